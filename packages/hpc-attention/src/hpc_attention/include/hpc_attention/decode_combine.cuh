// Combine kernel of the decode attention: merges the partial outputs of the items (request,
// KV head) that the plan split over several CTAs, with the exact global softmax weights,
// and writes zeros for empty requests. Items that fit one CTA were written by the decode
// kernel directly and do not appear here.
//
// One work unit = (combine entry, query row of the group). Version 2 (latency first; the
// first version gave each unit a whole CTA and walked the parts with one dependent L2 round
// trip per 8 parts, and strided 4+ units per CTA on batches like 64 x 0.5K):
// - a unit with at most kWarpParts parts is merged by one warp (lane = 4 head dims), all of
//   its parts' loads issued together, in batches of kCombineBatch (kWideBatch above 16 parts);
// - a longer unit (a long context split over many CTAs) gets a whole CTA: warp w takes parts
//   w, w + 8, ... in batches of kGroupBatch, then warp 0 merges the 8 warps in a fixed order.
// Every unit's arithmetic depends only on the plan, never on which warp or CTA runs it, so
// results are bitwise reproducible. The arithmetic lives in split_merge.cuh, shared with the
// merge inside the decode kernel (heuristics.MERGE), which gives identical bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/split_merge.cuh"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

static_assert(kCombineThreads / 32 == kMergeGroups, "phase 2: one warp per merge group");
static_assert(kMergeGroups <= kCombineBatch, "phase 2: the 8 group partials are one merge batch (padded)");

__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeCombineParams p) {
  constexpr int kWarps = kCombineThreads / 32;
  __shared__ float s_m[kWarps];  // the groups' lse
  __shared__ float4 s_acc[kWarps][32];
  __shared__ int s_list[kCombineThreads];
  hpc::pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = p.group;
  const int units = p.counters[kNumCombine] * G;
  const float kNegInf = -__int_as_float(0x7f800000);
  auto out_row = [&](int item, int row) {
    const int b = item / p.num_kv_heads, h = item - b * p.num_kv_heads;
    return static_cast<__nv_bfloat16*>(p.out) + b * p.out_stride_b + (h * G + row) * p.out_stride_h;
  };

  // Phase 2 (long units, one CTA each) takes the CTAs from the top of the grid down while the
  // warp units of phase 1 fill the grid from the bottom up, so on typical plans a CTA has work
  // in one phase only and the two latencies overlap instead of adding up (measured: adding
  // them cost 3-4 us on the long 8/1 cases). The first round of phase-2 entry loads is issued
  // before phase 1.
  const int cb = gridDim.x - 1 - blockIdx.x;
  const int u_first = cb + threadIdx.x * gridDim.x;
  const int parts_first = u_first < units ? p.combine[u_first / G].z : 0;

  // Units of a warp: u = global warp id, strided over all warps; long ones are left to phase 2.
  const int gw = blockIdx.x * kWarps + warp, nw = gridDim.x * kWarps;
  for (int u = gw; u < units; u += nw) {
    const int4 e = p.combine[u / G];
    const int row = u - (u / G) * G;
    if (e.z > kWarpParts) continue;
    __nv_bfloat16* out = out_row(e.x, row);
    if (e.z == 0) {  // empty request: softmax over no keys, defined as 0
      reinterpret_cast<uint2*>(out)[lane] = make_uint2(0, 0);
      continue;
    }
    float m = kNegInf, l = 0.f;
    float4 acc[1] = {make_float4(0.f, 0.f, 0.f, 0.f)};
    if (wide_one_level(e.z)) {
      merge_parts<1, false, kWideBatch>(p.partial_o, p.partial_lse, static_cast<long long>(e.y) * G + row, G, 0, e.z,
                                        1, 4 * lane, m, l, acc);
    } else {
      merge_parts<1, false>(p.partial_o, p.partial_lse, static_cast<long long>(e.y) * G + row, G, 0, e.z, 1,
                            4 * lane, m, l, acc);
    }
    store_bf16_row<1>(out + 4 * lane, acc, 1.f / l);
  }

  // Phase 2: units with more than kWarpParts parts, one CTA each (units u = cb + k * grid).
  for (int base = 0; cb + base * gridDim.x < units; base += kCombineThreads) {
    __syncthreads();
    const int u = cb + (base + threadIdx.x) * gridDim.x;
    const bool is_long = u < units && (base == 0 ? parts_first : p.combine[u / G].z) > kWarpParts;
    const unsigned ball = __ballot_sync(0xffffffffu, is_long);
    // Compact in thread order (warp counts in shared memory, then ranks): a fixed list.
    if (lane == 0) s_list[warp] = __popc(ball);
    __syncthreads();
    int off = 0;
    for (int w = 0; w < warp; ++w) off += s_list[w];
    const int total_long = [&] {
      int t = 0;
      for (int w = 0; w < kWarps; ++w) t += s_list[w];
      return t;
    }();
    __syncthreads();
    if (is_long) s_list[off + __popc(ball & ((1u << lane) - 1u))] = u;
    __syncthreads();
    for (int i = 0; i < total_long; ++i) {
      const int uu = s_list[i];
      const int4 e = p.combine[uu / G];
      const int row = uu - (uu / G) * G;
      float m = kNegInf, l = 0.f;
      float4 acc[1] = {make_float4(0.f, 0.f, 0.f, 0.f)};
      merge_parts<1, false, kGroupBatch>(p.partial_o, p.partial_lse, static_cast<long long>(e.y) * G + row, G, warp,
                                         e.z, kWarps, 4 * lane, m, l, acc);
      float glse;
      float4 go[1];
      group_as_part<1>(m, l, acc, glse, go);  // group `warp` as a part; the 8 merged as one batch below
      s_acc[warp][lane] = go[0];
      if (lane == 0) s_m[warp] = glse;
      __syncthreads();
      if (warp == 0) {
        float lse[kCombineBatch];
        float4 v[kCombineBatch][1];
#pragma unroll
        for (int w = 0; w < kCombineBatch; ++w) {  // padded as the in-kernel merge's level-2 batch
          lse[w] = w < kMergeGroups ? s_m[w] : kNegInf;
          v[w][0] = w < kMergeGroups ? s_acc[w][lane] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float M = kNegInf, L = 0.f;
        float4 r[1] = {make_float4(0.f, 0.f, 0.f, 0.f)};
        merge_batch<1>(M, L, r, lse, v);
        store_bf16_row<1>(out_row(e.x, row) + 4 * lane, r, 1.f / L);
      }
      __syncthreads();
    }
  }
}

inline cudaError_t launch_decode_combine(const DecodeCombineParams& p, int num_ctas, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(decode_combine_kernel, dim3(num_ctas), dim3(kCombineThreads), 0, stream, pdl, p);
}

}  // namespace hpc::attn
