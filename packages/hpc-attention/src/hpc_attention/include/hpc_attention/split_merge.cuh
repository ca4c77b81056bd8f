// Fixed-order merge arithmetic of split items (request, KV head), shared by the combine
// kernel (decode_combine.cuh) and the merge inside the decode kernel (decode.cuh), so
// that both paths compute the same floating-point operations in the same order per output
// element and give bitwise identical results.
//
// A split item has P parts in consecutive slots f .. f + P - 1; part q of row r is the FP32
// row partial_o[((f + q) * G + r) * 128 ...] (normalised, V scale applied) with its log2-sum-exp
// partial_lse[(f + q) * G + r].
// - P <= kWarpParts: one running (m, l, acc) over parts 0, 1, ..., P - 1 in batches of
//   kCombineBatch, or kWideBatch above kNarrowParts parts (wide_one_level; all loads of a batch before its
//   arithmetic; the last batch padded).
// - P > kWarpParts: kMergeGroups running states, group g over parts g, g + 8, g + 16, ... (batches of
//   kGroupBatch), each group turned into a partial of its own (group_as_part), then the 8 group partials merged
//   as one padded batch in the order g = 0 .. 7.
// Per element the arithmetic depends only on the parts' values and P, never on the thread
// that runs it, so the result is the same whichever CTA merges.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hpc::attn {

// Parts per batch of a one-level merge (an item of at most kWarpParts parts, and level 2's 8 group partials, padded).
// 9: at 64/8 the long item of 1x64K+15x4K (both KV dtypes) and of 1x128K+31x4K (BF16) is split in 9 parts per head,
// which batches of 8 loaded in two dependent L2 round trips at the call's end. For P <= 8 the padding adds exact
// zeros; 10-16 parts take two batches either way.
constexpr int kCombineBatch = 9;
constexpr int kMergeGroups = 8;
static_assert(kCombineBatch >= kMergeGroups && kCombineBatch <= 16, "kCombineBatch: 8 to 16");

// Parts merged in one level (more: two levels, 8 groups then the group partials). 24: at 8/1 the 32K items of
// 2x32K+30x4K are split in 23 parts, whose two levels each cost an arrival of ~1 us and a pass of ~1.0-1.2 us at the
// call's end, against one more dependent batch round trip for one level. One-level merges of more than kNarrowParts
// parts take batches of kWideBatch (two round trips for 17-24 parts; the helpers' two rows per thread run one after
// the other there, for their registers).
constexpr int kNarrowParts = 16;
constexpr int kWideBatch = 12;
constexpr int kWarpParts = 2 * kWideBatch;

// Whether a one-level merge of P parts takes batches of kWideBatch (else kCombineBatch).
__host__ __device__ constexpr bool wide_one_level(int P) { return P > kNarrowParts; }

// Parts per batch of a merge group (level 1 of an item with more than kWarpParts parts; a group holds parts
// g, g + 8, ...). 9: a long context split over 65-72 parts (8/1 1x128K+31x4K: 68, 1x64K+15x4K: 69) has groups of 8-9,
// which batches of 8 loaded in two dependent L2 round trips (level 1 at +2.2-2.9 us after the descriptor against
// +1.6-2.0 for a one-batch merge, on the call's critical path). Both merge paths use it alike (the combine kernel's
// phase 2 and the in-kernel merge keep identical bits).
constexpr int kGroupBatch = 9;
static_assert(kGroupBatch >= 8 && kGroupBatch <= 16, "kGroupBatch: 8 to 16");

// The 8 group states of an item with more than kWarpParts parts are each turned into a partial of its own
// (group_as_part: o = acc / l, lse = m + log2 l) and the 8 group partials are merged as a one-level item of 8 parts
// (merge_batch), so the decode kernel's level 2 runs the same code as its one-level merges: a level-2 fold of its own
// ran once per call on one CTA, its code cold after the flush, and took 2.2-5.1 us at 8/1 on 1x128K+31x4K and
// 1x64K+15x4K, against 1.5 us for the same fold run a second time.

template <bool kL2Only>
__device__ __forceinline__ float merge_load(const float* p) {
  if constexpr (kL2Only) {
    return __ldcg(p);  // written by other CTAs of the running grid: never from L1
  } else {
    return *p;
  }
}

template <bool kL2Only>
__device__ __forceinline__ float4 merge_load4(const float* p) {
  if constexpr (kL2Only) {
    return __ldcg(reinterpret_cast<const float4*>(p));
  } else {
    return *reinterpret_cast<const float4*>(p);
  }
}

// a += w v, a *= s (per component; the FMAs every merge form compiles to).
__device__ __forceinline__ void fma4(float4& a, float w, const float4& v) {
  a.x += w * v.x;
  a.y += w * v.y;
  a.z += w * v.z;
  a.w += w * v.w;
}
__device__ __forceinline__ void scale4(float4& a, float s) {
  a.x *= s;
  a.y *= s;
  a.z *= s;
  a.w *= s;
}

// One batch of the running merge (m, l, acc) of a row: kBatch parts' (lse, o), padding lse = -inf.
template <int kVec, int kBatch = kCombineBatch>
__device__ __forceinline__ void merge_batch(float& m, float& l, float4 (&acc)[kVec], const float (&lse)[kBatch],
                                            const float4 (&v)[kBatch][kVec]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  float mb = m;
#pragma unroll
  for (int k = 0; k < kBatch; ++k) mb = fmaxf(mb, lse[k]);
  const float base = mb == kNegInf ? 0.f : mb;
  const float a = exp2f(m - base);
  l *= a;
#pragma unroll
  for (int i = 0; i < kVec; ++i) scale4(acc[i], a);
#pragma unroll
  for (int k = 0; k < kBatch; ++k) {
    const float w = exp2f(lse[k] - base);  // 0 for the padding (lse = -inf)
    l += w;
#pragma unroll
    for (int i = 0; i < kVec; ++i) fma4(acc[i], w, v[k][i]);
  }
  m = mb;
}

// A merge group's running state (m, l, acc) as a partial of its own: o = acc / l with the
// reciprocal the output store takes, lse = m + log2(l); a group that saw no weight (l = 0) is padding (lse = -inf,
// o = 0), which merge_batch weighs 0.
template <int kVec>
__device__ __forceinline__ void group_as_part(float m, float l, const float4 (&acc)[kVec], float& lse,
                                              float4 (&o)[kVec]) {
  const bool some = l > 0.f;
  const float inv = some ? 1.f / l : 0.f;
  lse = some ? m + log2f(l) : -__int_as_float(0x7f800000);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    o[i] = acc[i];
    scale4(o[i], inv);
  }
}

// Running (m, l, acc) over parts q = q_begin, q_begin + step, ... < q_end of kRows rows of one item at once:
// row i's first part is first_row[i] (= f * G + r_i), valid for i < rows; acc[i] holds kVec float4 = columns
// col .. col + 4 kVec - 1. Every batch's loads, of all rows, are issued before its arithmetic, so kRows rows
// cost one dependent L2 round trip per batch instead of kRows; per row the arithmetic is the one-row form's.
// kBatch parts per batch (kCombineBatch, or kGroupBatch for a merge group).
template <int kRows, int kVec, bool kL2Only, int kBatch = kCombineBatch>
__device__ __forceinline__ void merge_parts_rows(const float* partial_o, const float* partial_lse,
                                                 const long long (&first_row)[kRows], int rows, int G, int q_begin,
                                                 int q_end, int step, int col, float (&m)[kRows], float (&l)[kRows],
                                                 float4 (&acc)[kRows][kVec]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  for (int q0 = q_begin; q0 < q_end; q0 += kBatch * step) {
    float lse[kRows][kBatch];
    float4 v[kRows][kBatch][kVec];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int q = q0 + k * step;
        if (q < q_end && r < rows) {
          const long long sr = first_row[r] + static_cast<long long>(q) * G;
          lse[r][k] = merge_load<kL2Only>(partial_lse + sr);
#pragma unroll
          for (int i = 0; i < kVec; ++i) v[r][k][i] = merge_load4<kL2Only>(partial_o + sr * 128 + col + 4 * i);
        } else {
          lse[r][k] = kNegInf;
#pragma unroll
          for (int i = 0; i < kVec; ++i) v[r][k][i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) merge_batch<kVec, kBatch>(m[r], l[r], acc[r], lse[r], v[r]);
  }
}

// The one-row form (first_row = f * G + r): the combine kernel's and the one-row merge's.
template <int kVec, bool kL2Only, int kBatch = kCombineBatch>
__device__ __forceinline__ void merge_parts(const float* partial_o, const float* partial_lse, long long first_row,
                                            int G, int q_begin, int q_end, int step, int col, float& m, float& l,
                                            float4 (&acc)[kVec]) {
  const long long fr[1] = {first_row};
  float m1[1] = {m}, l1[1] = {l};
  float4 a1[1][kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) a1[0][i] = acc[i];
  merge_parts_rows<1, kVec, kL2Only, kBatch>(partial_o, partial_lse, fr, 1, G, q_begin, q_end, step, col, m1, l1,
                                             a1);
  m = m1[0];
  l = l1[0];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = a1[0][i];
}

// out[0 .. 4 kVec) = bf16(r * inv).
template <int kVec>
__device__ __forceinline__ void store_bf16_row(__nv_bfloat16* out, const float4 (&r)[kVec], float inv) {
  uint32_t w[2 * kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(r[i].x * inv, r[i].y * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn(r[i].z * inv, r[i].w * inv);
    w[2 * i] = *reinterpret_cast<uint32_t*>(&lo);
    w[2 * i + 1] = *reinterpret_cast<uint32_t*>(&hi);
  }
  if constexpr (kVec == 1) {
    *reinterpret_cast<uint2*>(out) = make_uint2(w[0], w[1]);
  } else {
    static_assert(kVec == 2, "kVec 1 or 2");
    *reinterpret_cast<uint4*>(out) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace hpc::attn
