// Split-K of the Gate-Up GEMM (moe_gate_up.cuh, DESIGN.md "Gate-Up split-K"): at small T the grid has
// only I/8 tasks per active expert, so a task's K stages are cut into `splits` equal parts, each a
// CTA task of its own. A part stores its FP32 C fragments (already summed over its warps, in warp order)
// in the workspace, one 64-byte row of 16 values (8 gate rows, 8 up rows) per (part, pair, tile), then
// arrives on the task's counter. The part that arrives last (whichever it is) sums the parts of every
// pair in part order 0, 1, ..., so the bits never depend on the arrival order, forms silu(g) * u and
// stores `inter`; it also resets the counter to zero, so the next launch (graph replay included) finds
// every counter zero. Nothing spins: no part waits for another, so the grid needs no co-residency.
//
// Counters are indexed by the task's number among the active (expert, tile) tasks (SmemIndex::tstart
// order), which every CTA derives from the same per-expert counts; partials by the pair index p, so
// the order of pairs inside an expert's range (different in every CTA) does not matter either.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

// The 16 partial values of (part, pair, tile): 8 gate rows then 8 up rows.
__device__ __forceinline__ float* split_partial_row(const GateUpParams& p, int part, int pair, int tile) {
  const int tiles = p.I / 8;
  return p.split_partials + ((int64_t(part) * p.T * p.K + pair) * tiles + tile) * 16;
}

// Whole CTA, once its partials of every chunk of the task are stored: true in every thread of the CTA
// whose part arrived last. `flag` is a shared word; ends with a __syncthreads().
__device__ __forceinline__ bool split_arrive(const GateUpParams& p, int task, int* flag) {
  __threadfence();  // each thread's partial stores before the arrival that publishes them
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool last = atomicAdd(p.split_counters + task, 1) == p.splits - 1;
    if (last) {
      p.split_counters[task] = 0;  // every other part has arrived: no one else touches it this launch
      __threadfence();             // the other parts' stores, seen through the counter, before our reads
    }
    *flag = last;
  }
  __syncthreads();
  return *flag != 0;
}

// Whole CTA of the last part: inter[p][8 t + r] = silu(sum_k gate_k) * sum_k up_k for every pair of
// the task's expert, the sums in part order (L2 loads: the rows were written by other CTAs).
__device__ __forceinline__ void split_finish(const GateUpParams& p, const SmemIndex& x, int e, int tile) {
  const int cnt = x.cnt[e];
  const int* pairs = x.list + x.start[e];
  const int64_t part_stride = int64_t(p.T) * p.K * (p.I / 8) * 16;
  for (int i = threadIdx.x; i < cnt * 8; i += kThreads) {
    const int pair = pairs[i >> 3], r = i & 7;
    const float* src = split_partial_row(p, 0, pair, tile) + r;
    float gate = 0.f, up = 0.f;
    for (int k = 0; k < p.splits; ++k) {
      gate += __ldcg(src + k * part_stride);
      up += __ldcg(src + k * part_stride + 8);
    }
    static_cast<__nv_bfloat16*>(p.inter)[int64_t(pair) * p.I + 8 * tile + r] =
        __float2bfloat16_rn(silu_mul(gate, up));
  }
}

}  // namespace hpc::moe
