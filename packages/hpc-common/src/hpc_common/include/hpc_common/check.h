// Host-side checks for the binding layer: turn CUDA errors into Python exceptions that
// name the kernel. Only binding files (.cpp) include this; kernels return cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hpc {

inline void throw_on_cuda_error(cudaError_t err, const char* kernel) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // a launch error is sticky for the thread until read
  throw std::runtime_error(std::string("hpc-ops kernel '") + kernel + "' failed: " +
                           cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

template <typename T>
inline T* as_ptr(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

inline cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace hpc

#define HPC_CUDA_CHECK(expr, kernel_name) ::hpc::throw_on_cuda_error((expr), (kernel_name))
