
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdint.h>


// Macro to check for cuda errors.
#ifndef CUTE_DSL_CUDA_ERROR_CHECK
#define CUTE_DSL_CUDA_ERROR_CHECK(err) { \
    if ((err) != cudaSuccess) { \
        printf("Got Cuda Error %s: %s\n", cudaGetErrorName(err), cudaGetErrorString(err)); \
    } \
}

#endif

typedef struct {
    cudaLibrary_t module;
} tsopt_0c2f7ff595a17aaf_Kernel_Module_t;

#ifdef __cplusplus
extern "C" {
#endif
void _mlir_tsopt_0c2f7ff595a17aaf_cuda_init(void **);
void _mlir_tsopt_0c2f7ff595a17aaf_cuda_load_to_device(void **);
static inline void tsopt_0c2f7ff595a17aaf_Kernel_Module_Load(tsopt_0c2f7ff595a17aaf_Kernel_Module_t *module) {
    cudaLibrary_t *libraryPtr = &(module->module);
    cudaError_t ret = cudaSuccess;
    struct {
        cudaLibrary_t **libraryPtr;
        cudaError_t *ret;
    } initArgs = {&libraryPtr, &ret};
    _mlir_tsopt_0c2f7ff595a17aaf_cuda_init((void **)(&initArgs));
    CUTE_DSL_CUDA_ERROR_CHECK(ret);
    int32_t device_id = 0;
    struct {
        cudaLibrary_t **library;
        int32_t *device_id;
        cudaError_t *ret;
    } loadArgs = {&libraryPtr, &device_id, &ret};
    int32_t device_count;
    CUTE_DSL_CUDA_ERROR_CHECK(cudaGetDeviceCount(&device_count));
    for (int32_t i = 0; i < device_count; i++) {
        device_id = i;
        _mlir_tsopt_0c2f7ff595a17aaf_cuda_load_to_device((void **)(&loadArgs));
        CUTE_DSL_CUDA_ERROR_CHECK(ret);
    }
}

static inline void tsopt_0c2f7ff595a17aaf_Kernel_Module_Unload(tsopt_0c2f7ff595a17aaf_Kernel_Module_t *module) {
    CUTE_DSL_CUDA_ERROR_CHECK(cudaLibraryUnload(module->module));
}

#ifdef __cplusplus
}
#endif

typedef struct {
    void *data;
} tsopt_0c2f7ff595a17aaf_Tensor_src_t;


typedef struct {
    void *data;
} tsopt_0c2f7ff595a17aaf_Tensor_dst_t;

#ifdef __cplusplus
extern "C"
#endif
void _mlir_tsopt_0c2f7ff595a17aaf__mlir_ciface_cutlass_copy_host_FakeTensorFloat164096409640961_FakeTensorFloat164096409640961_FakeStream(void **args, int32_t num_args);

static inline int32_t cute_dsl_tsopt_0c2f7ff595a17aaf_wrapper(tsopt_0c2f7ff595a17aaf_Kernel_Module_t *module, tsopt_0c2f7ff595a17aaf_Tensor_src_t *src, tsopt_0c2f7ff595a17aaf_Tensor_dst_t *dst, cudaStream_t stream) {
    int32_t ret = 0;
    void *args[4] = {
        src, dst, &stream,
        &ret
    };
    _mlir_tsopt_0c2f7ff595a17aaf__mlir_ciface_cutlass_copy_host_FakeTensorFloat164096409640961_FakeTensorFloat164096409640961_FakeStream(args, 4);
    return ret;
}
