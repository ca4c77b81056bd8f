// Host stand-in for hpc_common/pdl.cuh (prologue emulation): no PDL; launch_kernel runs the grid on fibers.
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace emu {
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);
}
namespace hpc {
inline void pdl_wait() {}
inline void pdl_launch_dependents() {}
template <typename... KA, typename... A>
inline cudaError_t launch_kernel(void (*kernel)(KA...), dim3 grid, dim3 block, size_t, cudaStream_t, bool, A&&... args) {
  emu::run_grid(grid, block, [&] { kernel(args...); });
  return cudaSuccess;
}
}  // namespace hpc
