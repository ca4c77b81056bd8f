// Touching a kernel's parameter block at entry, so its constant-cache lines miss together.
//
// Why: after an L2 flush (the benchmarks' method; in serving, after a kernel that streamed a large
// tensor) the parameter block's lines are cold, and ptxas reads the c[0x0][...] words in the order the
// code needs them: the FP8 tile kernels touch the block's last lines first (tile geometry) and its
// first line (the input pointer) last, several hundred instructions later, so each line's first touch can
// be one more dependent miss before the CTA's first load. Loading one word per 16 bytes of the block at
// entry (16-byte steps meet every line whatever the line size) starts every line's miss at once.
// The words go to a volatile shared sink, or ptxas drops the loads with the unread stores.
//
// The kernel must declare the parameter __grid_constant__ (else taking its address makes a local copy).
#pragma once

#include <cuda_runtime.h>

namespace hpc {

template <typename Params>
__device__ __forceinline__ void touch_param_lines(const Params& p) {
  constexpr int kWords = static_cast<int>((sizeof(Params) + 15) / 16);
  __shared__ int sink[kWords];
  // Lane 0 of every warp, word i by warp i mod warps: ptxas puts each store right after its load, and a
  // thread waits at a store for its word's line, so words in one thread miss one line after another; in
  // different warps they miss together (8 warps: 1-2 words each).
  if ((threadIdx.x & 31) == 0) {
    const int* w = reinterpret_cast<const int*>(&p);
    const int warps = static_cast<int>((blockDim.x + 31) >> 5);
#pragma unroll 1
    for (int i = static_cast<int>(threadIdx.x >> 5); i < kWords; i += warps) {
      reinterpret_cast<volatile int*>(sink)[i] = w[i * 4];
    }
  }
}

}  // namespace hpc
