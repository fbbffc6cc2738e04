#include "kernel.h"
static tsopt_0c2f7ff595a17aaf_Kernel_Module_t tsopt_module;
static int tsopt_loaded = 0;

int tsopt_load(void) {
  if (!tsopt_loaded) {
    int devices = 0;
    cudaError_t probe = cudaGetDeviceCount(&devices);
    if (probe != cudaSuccess) return (int)probe;
    if (devices == 0) return (int)cudaErrorNoDevice;
    tsopt_0c2f7ff595a17aaf_Kernel_Module_Load(&tsopt_module);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    tsopt_loaded = 1;
  }
  return 0;
}

int tsopt_launch(void **data, int n, void *stream) {
  if (n != 2 || !tsopt_loaded) return -1;
  tsopt_0c2f7ff595a17aaf_Tensor_src_t t0 = {data[0]};
  tsopt_0c2f7ff595a17aaf_Tensor_dst_t t1 = {data[1]};
  int rc = cute_dsl_tsopt_0c2f7ff595a17aaf_wrapper(&tsopt_module, &t0, &t1, (cudaStream_t)stream);
  if (rc != 0) return rc;
  return (int)cudaGetLastError();
}
