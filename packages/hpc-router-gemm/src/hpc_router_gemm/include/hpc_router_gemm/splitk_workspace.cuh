// Split-K reduction of the BF16x2 wgmma kernel through a global workspace instead of a
// thread-block cluster (router_gemm_bf16x2_wgmma.cuh, Bf16x2DevParams::ws_mode != 0).
//
// Why: an S-CTA cluster must be resident as a unit; on the H200 only 30 four-CTA clusters of
// the wide tiles fit (132 SMs), so S = 4 at 32 tiles ran two waves. Without clusters the S
// CTAs of a tile are independent, 128 CTAs fill 128 SMs in one wave.
//
// Every CTA writes its combined tile (acc_hi + acc_lo / 256) to its own slot of the workspace
// in register-fragment order ([float4 j][consumer thread]: coalesced, no shared memory), then
// arrives on the tile's counter (release/acquire through one thread, the split-K semaphore
// pattern of hpc-attention's decode_merge_in_kernel.cuh). The reduction sums the S partials in
// rank order 0, 1, ..., S-1, the order of the cluster path, so both give the same bits:
//   ws_mode 1 (last arrival): the CTA that arrives last reduces the whole tile; the others exit.
//     Safe for any grid. The reducer reads S tiles from L2 alone.
//   ws_mode 2 (all reduce): every CTA waits until all S have arrived, then reduces 1/S of the
//     tile. Needs all CTAs of the grid resident at once (the host checks grid <= resident
//     CTAs); a wait of 2^26 polls traps instead of hanging.
// The counter goes back to zero inside the call (mode 1: the last arrival; mode 2: the last
// of a second round of arrivals, made after each CTA has seen all S), so graphs replay
// without a memset.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_router_gemm/sm90.cuh"

namespace hpc::router_gemm::splitk {

__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Consumer thread `ctid` of kThreads writes its R accumulators (R % 4 == 0) to `slot`.
template <int R, int kThreads>
__device__ __forceinline__ void store_partial(float4* slot, const float (&acc)[R], int ctid) {
#pragma unroll
  for (int j = 0; j < R / 4; ++j) {
    __stcg(slot + j * kThreads + ctid, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
  }
}

// One arrival of this CTA's consumers (all kThreads call it; named barrier 1). Returns the
// counter value before this arrival, in every consumer thread. `wait_for` > 0: then also spin
// (thread 0) until the counter reaches it. The barrier orders every consumer's partial
// stores before thread 0's GPU-scope release; the acquire after the atomic (or the spin)
// makes the other CTAs' partials visible, and the second barrier hands that to all threads.
template <int kThreads>
__device__ __forceinline__ int arrive(int* ctr, int wait_for, int reset_at, volatile int* flag) {
  sm90::named_barrier(1, kThreads);
  if (threadIdx.x == 0) {
    fence_acq_rel_gpu();
    const int old = atomicAdd(ctr, 1);
    if (old == reset_at - 1) atomicExch(ctr, 0);  // every arrival of this call is in
    if (wait_for > 0) {
      uint32_t polls = 0;
      while (ld_acquire_gpu(ctr) < wait_for) {
        if (++polls == (1u << 26)) __trap();
        __nanosleep(20);
      }
    }
    fence_acq_rel_gpu();
    *flag = old;
  }
  sm90::named_barrier(1, kThreads);
  return *flag;
}

// Sum float4 slots [lo, hi) of the S partials (rank order; rank q's slots start at q * T)
// and write them to `out`. Slot s = j * kThreads + t holds registers 4j..4j+3 of consumer
// thread t, whose wgmma m64nN layout puts register 4c + 2h + i at row 64 wg + 16 warp +
// lane / 4 + 8h, column 8c + 2 (lane % 4) + i of the tile (wg = t / 128, warp, lane of t).
template <int kThreads>
__device__ __forceinline__ void reduce_slots(const float4* part, int T, int splits, int lo, int hi, float* out,
                                             int64_t out_stride, int m0, int n0, int M, int N) {
  for (int s = lo + static_cast<int>(threadIdx.x); s < hi; s += kThreads) {
    float4 acc = __ldcg(part + s);
    for (int q = 1; q < splits; ++q) {
      const float4 v = __ldcg(part + q * T + s);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const int j = s / kThreads, t = s % kThreads;
    const int lane = t % 32;
    const int row = m0 + (t / 128) * 64 + ((t % 128) / 32) * 16 + lane / 4;
    const int col = n0 + 8 * j + 2 * (lane % 4);
    if (col < N) {
      if (row < M) *reinterpret_cast<float2*>(out + static_cast<int64_t>(row) * out_stride + col) = make_float2(acc.x, acc.y);
      if (row + 8 < M) {
        *reinterpret_cast<float2*>(out + static_cast<int64_t>(row + 8) * out_stride + col) = make_float2(acc.z, acc.w);
      }
    }
  }
}

}  // namespace hpc::router_gemm::splitk
