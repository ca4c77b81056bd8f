// Opt a kernel in to `smem` bytes of dynamic shared memory where the launch needs it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace hpc {

// Without the opt-in a kernel gets 48 KB of shared memory in all, static __shared__ arrays
// included: a launch whose dynamic plus static bytes exceed 48 KB fails with "invalid argument"
// even when the dynamic part alone is <= 48 KB (a 48 KB ring plus a few barriers). So the
// attribute is set whenever dynamic + static > 48 KB.
//
// This runs on every launch, so the driver is asked once per (device, kernel): the static size
// and the largest size opted in so far are remembered (both only change by this function).
template <typename Kernel>
inline cudaError_t allow_dynamic_smem(Kernel kernel, size_t smem) {
  constexpr size_t kDefault = 48 * 1024;
  if (smem == 0) return cudaSuccess;
  struct Entry {
    size_t static_bytes;
    size_t opted_in;  // the attribute's value set so far (0: never)
  };
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, Entry> known;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const std::pair<int, const void*> key(device, reinterpret_cast<const void*>(kernel));
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(key);
  if (it == known.end()) {
    cudaFuncAttributes fa;
    if (const cudaError_t e = cudaFuncGetAttributes(&fa, kernel); e != cudaSuccess) return e;
    it = known.emplace(key, Entry{fa.sharedSizeBytes, 0}).first;
  }
  Entry& entry = it->second;
  if (smem + entry.static_bytes <= kDefault || smem <= entry.opted_in) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess) entry.opted_in = smem;
  return e;
}

}  // namespace hpc
