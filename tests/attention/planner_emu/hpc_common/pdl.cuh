// Host stand-in for hpc_common/pdl.cuh (planner emulation, harness.cpp).
#pragma once
#include <cuda_runtime.h>
namespace hpc {
inline void pdl_wait() {}
inline void pdl_launch_dependents() {}
template <typename K, typename... A> inline cudaError_t launch_kernel(K, dim3, dim3, size_t, cudaStream_t, bool, A&&...) { return 0; }
}  // namespace hpc
