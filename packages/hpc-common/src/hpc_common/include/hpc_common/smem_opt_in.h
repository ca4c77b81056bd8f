// Opt a kernel in to `smem` bytes of dynamic shared memory where the launch needs it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace hpc {

// Without the opt-in a kernel gets 48 KB of shared memory in all, static __shared__ arrays
// included: a launch whose dynamic plus static bytes exceed 48 KB fails with "invalid argument"
// even when the dynamic part alone is <= 48 KB (a 48 KB ring plus a few barriers). So the
// attribute is set whenever dynamic + static > 48 KB; the static size is only looked up for
// dynamic requests at or below 48 KB (above, the opt-in is needed anyway).
template <typename Kernel>
inline cudaError_t allow_dynamic_smem(Kernel kernel, size_t smem) {
  constexpr size_t kDefault = 48 * 1024;
  if (smem == 0) return cudaSuccess;
  if (smem <= kDefault) {
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return e;
    if (smem + fa.sharedSizeBytes <= kDefault) return cudaSuccess;
  }
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
}

}  // namespace hpc
