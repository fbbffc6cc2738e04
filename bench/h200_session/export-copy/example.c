/* Calling the exported kernel from C through kernel.h (built by build.sh).
   Inputs are left as cudaMalloc returned them: fill them with your data. */
#include <stdio.h>
#include "kernel.h"

int main(void) {
    tsopt_0c2f7ff595a17aaf_Kernel_Module_t module;
    tsopt_0c2f7ff595a17aaf_Kernel_Module_Load(&module);
    void *src_data = NULL;  /* input: fp16 [4096, 4096] */
    CUTE_DSL_CUDA_ERROR_CHECK(cudaMalloc(&src_data, 16777216ull * 2));
    tsopt_0c2f7ff595a17aaf_Tensor_src_t src = {src_data};
    void *dst_data = NULL;  /* output: fp16 [4096, 4096] */
    CUTE_DSL_CUDA_ERROR_CHECK(cudaMalloc(&dst_data, 16777216ull * 2));
    tsopt_0c2f7ff595a17aaf_Tensor_dst_t dst = {dst_data};
    cudaStream_t stream;
    CUTE_DSL_CUDA_ERROR_CHECK(cudaStreamCreate(&stream));
    int rc = cute_dsl_tsopt_0c2f7ff595a17aaf_wrapper(&module, &src, &dst, stream);
    CUTE_DSL_CUDA_ERROR_CHECK(cudaStreamSynchronize(stream));
    printf("launch returned %d, last error %s\n", rc, cudaGetErrorString(cudaGetLastError()));
    cudaFree(src_data);
    cudaFree(dst_data);
    tsopt_0c2f7ff595a17aaf_Kernel_Module_Unload(&module);
    return rc;
}
