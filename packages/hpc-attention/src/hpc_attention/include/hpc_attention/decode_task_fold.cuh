// The end of a decode task: the 4 consumer warps' partial states folded into the task's G output rows.
//
// On entry (after the consumers' barrier) shared memory holds, per warp w and row r < 16: the running max
// merge_m[w * 16 + r], the row sum merge_l[w * 16 + r] and the unnormalised output row merge_o[(w * 16 + r) *
// kPitch + d], d < 128. Row r's output is sum_w f_w O_w / sum_w f_w l_w with f_w = 2^(m_w - max_w m_w), times
// v_scale; a split task also stores its log-sum-exp (base 2).
//
// The fold is on every task's critical path (the timeline's last tile -> consumer exit step was 1.9-2.1 us at G = 8,
// 1.2-1.4 us of it here when every thread ran every row's scalar chain), so it is laid out as two short steps:
// 1. row scalars: thread r < G computes row r's factors f_w and 1 / l once and writes them back over its own m / l
//    slots, then a barrier (-0.3 us mean over the 24 benchmark cases);
// 2. rows: each thread takes 4 adjacent columns of rows r = warp, warp + 4, ...: one 16-byte load per source warp,
//    one 8-byte (BF16) or 16-byte (partial) store per row (half the instructions of a column per thread: -0.33 us
//    mean, all 24 cases faster).
// The task's store addresses are computed at its start and pinned in registers (fold_targets), so the fold reads no
// parameter (its LDC at the fold cost -0.10 us mean). Same arithmetic in the same order as a plain per-element fold
// (the reciprocal is the same MUFU.RCP that `acc / L` compiles to under --use_fast_math), so the same bits.
#pragma once

#include <cuda_bf16.h>

#include "hpc_attention/sm90_primitives.cuh"
#include "hpc_attention/decode_params.h"

namespace hpc::attn {

// A task's fold targets at the thread's column d = threadIdx.x (the vector step subtracts d and adds its own
// first column): output row 0 (whole task) or partial row 0 and its log-sum-exp slot (split task, slot w >= 0).
struct FoldTargets {
  __nv_bfloat16* out;
  float* partial_o;
  float* partial_lse;
  long long out_stride_h;
  int G;
};

// Pins a value in a register: passed through a shuffle from the thread's own lane, which ptxas cannot see
// through (an empty asm statement it can: it re-read the value from the parameter block at the point of use).
template <class T>
__device__ __forceinline__ T pin_reg(T v) {
  static_assert(sizeof(T) == 8 || sizeof(T) == 4, "pin_reg: 4- or 8-byte values");
  const int lane = threadIdx.x & 31;
  if constexpr (sizeof(T) == 8) {
    unsigned long long u = *reinterpret_cast<unsigned long long*>(&v);
    u = __shfl_sync(0xffffffffu, u, lane);
    return *reinterpret_cast<T*>(&u);
  } else {
    unsigned u = *reinterpret_cast<unsigned*>(&v);
    u = __shfl_sync(0xffffffffu, u, lane);
    return *reinterpret_cast<T*>(&u);
  }
}

// Vector stores through a generic pointer (8- / 16-byte aligned by the caller).
__device__ __forceinline__ void store_v2_b32(void* dst, uint2 v) {
  asm volatile("st.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ void store_v4_f32(void* dst, const float (&v)[4]) {
  asm volatile("st.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
}

// The targets of task slot w (< 0: a whole task) of item (b, h), pinned in registers (called at the task's start).
template <int kDim>
__device__ __forceinline__ FoldTargets fold_targets(const DecodeParams& p, int b, int h, int w) {
  const auto keep = [](auto v) { return pin_reg(v); };
  FoldTargets t;
  t.G = keep(p.group);
  t.out_stride_h = keep(p.out_stride_h);
  t.out = keep(static_cast<__nv_bfloat16*>(p.out) + b * p.out_stride_b + h * t.G * t.out_stride_h + threadIdx.x);
  const long long slot_row = static_cast<long long>(w < 0 ? 0 : w) * t.G;
  t.partial_o = keep(p.partial_o + slot_row * kDim + threadIdx.x);
  t.partial_lse = keep(p.partial_lse + slot_row);
  return t;
}

// Called by the 128 consumer threads (d = threadIdx.x) after the barrier that follows the warps' state writes;
// `bar` is the consumers' named barrier. store_row4(row, col, v) writes columns col .. col + 3 of an output row;
// store_lse(row, lse) a split task's log-sum-exp (called by one thread per row).
template <int kPitch, class StoreRow4, class StoreLse>
__device__ __forceinline__ void fold_task_rows(float* merge_m, float* merge_l, const float* merge_o, int G,
                                               float v_scale, int d, int bar, StoreRow4 store_row4,
                                               StoreLse store_lse) {
  const float kNegInf = -__int_as_float(0x7f800000);
  // Row r's scalars, by thread r < G: f_w over the thread's own m slots [w][r], 1 / l over its l slot [0][r], so
  // no thread reads what another writes.
  if (d < G) {
    const int r = d;
    float mw[4], lw[4], mmax = kNegInf;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      mw[w] = merge_m[w * 16 + r];
      lw[w] = merge_l[w * 16 + r];
      mmax = fmaxf(mmax, mw[w]);
    }
    const float mbase = mmax == kNegInf ? 0.f : mmax;
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float f = exp2f(mw[w] - mbase);
      L += f * lw[w];
      merge_m[w * 16 + r] = f;
    }
    merge_l[r] = L > 0.f ? 1.f / L : 0.f;
    store_lse(r, mbase + __log2f(L));
  }
  named_barrier(bar, 128);
  static_assert(kPitch % 4 == 0, "fold_task_rows: 16-byte rows of merge_o");
  const int col = 4 * (d & 31);
  for (int row = d >> 5; row < G; row += 4) {
    float fw[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) fw[w] = merge_m[w * 16 + row];
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float4 o = *reinterpret_cast<const float4*>(merge_o + (w * 16 + row) * kPitch + col);
      acc[0] += fw[w] * o.x;
      acc[1] += fw[w] * o.y;
      acc[2] += fw[w] * o.z;
      acc[3] += fw[w] * o.w;
    }
    const float rl = merge_l[row];
    float val[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) val[c] = (rl > 0.f ? acc[c] * rl : 0.f) * v_scale;
    store_row4(row, col, val);
  }
}

}  // namespace hpc::attn
