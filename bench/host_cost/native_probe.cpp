#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

// host_cost.py --native: what a native op would cost the host. A GEMM kernel of a tsopt export
// launched from C++ (torch.ops.tsopt_native.gemm): its libkernel.so opened by path (dlopen of a
// path already open returns the same handle, so the module its tsopt_load loaded is shared),
// tsopt_launch called on the current CUDA stream. Every call gets the Python op's checks
// (device, dtype, sizes, row-major, 16-byte aligned), in C++. A probe, not part of an export.
namespace {

using LaunchFn = int (*)(void **, int, void *);

struct Kernel {
  LaunchFn launch;
  int64_t m, n, k;
  at::ScalarType dtype;
};

std::vector<Kernel> &kernels() {
  static std::vector<Kernel> table;
  return table;
}

int64_t open_kernel(std::string library, int64_t m, int64_t n, int64_t k, std::string dtype) {
  TORCH_CHECK(dtype == "bf16" || dtype == "fp16", "dtype ", dtype, ": bf16 or fp16");
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle != nullptr, "dlopen ", library, ": ", dlerror());
  auto launch = reinterpret_cast<LaunchFn>(dlsym(handle, "tsopt_launch"));
  TORCH_CHECK(launch != nullptr, library, " has no tsopt_launch");
  kernels().push_back({launch, m, n, k, dtype == "bf16" ? at::kBFloat16 : at::kHalf});
  return static_cast<int64_t>(kernels().size()) - 1;
}

void check(const at::Tensor &t, const char *name, int64_t rows, int64_t cols, at::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda(), name, ": not on a CUDA device");
  TORCH_CHECK(t.scalar_type() == dtype, name, ": dtype ", t.scalar_type(), " != ", dtype);
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, name, ": shape ", t.sizes(),
              " != (", rows, ", ", cols, ")");
  TORCH_CHECK(t.is_contiguous(), name, ": not contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, ": not 16-byte aligned");
}

at::Tensor gemm(int64_t id, const at::Tensor &a, const at::Tensor &b) {
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(kernels().size()), "no kernel ", id);
  const Kernel &kernel = kernels()[id];
  check(a, "a", kernel.m, kernel.k, kernel.dtype);
  check(b, "b", kernel.n, kernel.k, kernel.dtype);
  TORCH_CHECK(a.device() == b.device(), "a and b on different devices");
  c10::cuda::CUDAGuard guard(a.device());
  at::Tensor d = at::empty({kernel.m, kernel.n}, a.options());
  void *pointers[3] = {a.data_ptr(), b.data_ptr(), d.data_ptr()};
  int code = kernel.launch(pointers, 3, c10::cuda::getCurrentCUDAStream(a.device().index()).stream());
  TORCH_CHECK(code == 0, "tsopt_launch failed: ", code);
  return d;
}

}  // namespace

TORCH_LIBRARY(tsopt_native, m) {
  m.def("open_kernel(str library, int m, int n, int k, str dtype) -> int", &open_kernel);
  m.def("gemm(int id, Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(tsopt_native, CUDA, m) { m.impl("gemm", &gemm); }
