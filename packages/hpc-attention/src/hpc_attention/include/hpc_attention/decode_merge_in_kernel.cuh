// Merge of split items inside the paged decode kernel (heuristics.MERGE_IN_DECODE): the last
// part of an item to finish merges all parts in the fixed part order (see paged_decode.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/sm90_primitives.cuh"
#include "hpc_attention/split_merge.cuh"

namespace hpc::attn {

// ---- merge of split items inside the decode kernel (merge mode) ----------------------------
// Called by the 128 consumer threads together (uniform control flow, named barrier 1).

// Arrival of this CTA on `ctr`, which completes at `need` arrivals. Returns true (in every
// consumer thread) when this arrival is the last one; the counter is then put back to zero.
// Release/acquire through one thread (the split-K semaphore pattern): the named barrier orders
// the 128 threads' partial writes before thread 0's GPU-scope acq_rel fence, whose release is
// cumulative over them; the atomic is the synchronising access; on the last arrival the same
// fence acquires the other parts' writes, and the second barrier hands them to every thread
// (the partials are read with ld.cg, past the non-coherent L1). diag bit 3 keeps version 4's
// protocol (an SC fence in every thread before the barrier) for comparison: the TMA run showed
// the arrival costing 1-4 us more than with cp.async, attributed to those per-thread fences.
__device__ __forceinline__ bool arrive_last(int* ctr, int need, volatile int* flag, bool sc_fences) {
  if (sc_fences) __threadfence();
  named_barrier(1, 128);
  if (threadIdx.x == 0) {
    fence_acq_rel_gpu();  // release: every consumer thread's writes (ordered by the barrier)
    const int old = atomicAdd(ctr, 1);
    const int last = old == need - 1 ? 1 : 0;
    if (last) atomicExch(ctr, 0);  // every arrival of this call is in: zero for the next call
    fence_acq_rel_gpu();  // acquire: the other arrivals' writes before the merge reads them
    *flag = last;
  }
  named_barrier(1, 128);
  const bool last = *flag != 0;
  if (sc_fences && last) __threadfence();
  return last;
}

// Task of slot `slot` of split item (b, h) with meta = {first slot f, parts P} has written its
// partial: arrive, and if last merge (thread t: rows t / 16 + 8 k, columns 8 (t % 16) .. + 7).
__device__ __forceinline__ void merge_split_task(const PagedDecodeParams& p, int b, int h, int G, int slot,
                                                 int2 meta, volatile int* flag) {
  const float kNegInf = -__int_as_float(0x7f800000);
  const int f = meta.x, P = meta.y;
  const int g = (slot - f) & (kMergeGroups - 1);
  const bool grouped = P > kWarpParts;
  const int need = grouped ? (P - g + kMergeGroups - 1) / kMergeGroups : P;
  const bool sc = (p.diag & 8) != 0;
  if (!arrive_last(p.merge_counts + (grouped ? f + 1 + g : f), need, flag, sc)) return;
  const int tid = threadIdx.x, col = 8 * (tid & 15);
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + b * p.out_stride_b + h * G * p.out_stride_h + col;
  const long long first_row = static_cast<long long>(f) * G;
  if (!grouped) {  // one level: parts 0 .. P - 1 (the combine kernel's warp units)
    for (int row = tid >> 4; row < G; row += 8) {
      float m = kNegInf, l = 0.f;
      float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
      merge_parts<2, true>(p.partial_o, p.partial_lse, first_row + row, G, 0, P, 1, col, m, l, acc);
      store_bf16_row<2>(out + row * p.out_stride_h, acc, 1.f / l);
    }
    return;
  }
  // Level 1: group g (parts g, g + 8, ...). Its state goes to slot f + g: the partial_o columns
  // a thread writes are those it alone read (part g is in its first batch), partial_lse is kept.
  for (int row = tid >> 4; row < G; row += 8) {
    float m = kNegInf, l = 0.f;
    float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
    merge_parts<2, true>(p.partial_o, p.partial_lse, first_row + row, G, g, P, kMergeGroups, col, m, l, acc);
    const long long sr = first_row + static_cast<long long>(g) * G + row;
    float4* dst = reinterpret_cast<float4*>(p.partial_o + sr * 128 + col);
    dst[0] = acc[0];
    dst[1] = acc[1];
    if ((tid & 15) == 0) p.merge_ml[sr] = make_float2(m, l);
  }
  if (!arrive_last(p.merge_counts + f, kMergeGroups, flag, sc)) return;
  // Level 2: the 8 group states, folded in group order (the combine kernel's phase 2).
  for (int row = tid >> 4; row < G; row += 8) {
    float gm[kMergeGroups], gl[kMergeGroups];
    float4 ga[kMergeGroups][2];
#pragma unroll
    for (int w = 0; w < kMergeGroups; ++w) {
      const long long sr = first_row + static_cast<long long>(w) * G + row;
      const float2 ml = __ldcg(p.merge_ml + sr);
      gm[w] = ml.x;
      gl[w] = ml.y;
      ga[w][0] = __ldcg(reinterpret_cast<const float4*>(p.partial_o + sr * 128 + col));
      ga[w][1] = __ldcg(reinterpret_cast<const float4*>(p.partial_o + sr * 128 + col + 4));
    }
    float L;
    float4 r[2];
    fold_groups<2>(gm, gl, ga, L, r);
    store_bf16_row<2>(out + row * p.out_stride_h, r, 1.f / L);
  }
}

}  // namespace hpc::attn
