// The end of a decode task: the 4 consumer warps' partial states folded into the task's G output rows.
//
// On entry (after the consumers' barrier) shared memory holds, per warp w and row r < 16: the running max
// merge_m[w * 16 + r], the row sum merge_l[w * 16 + r] and the unnormalised output row merge_o[(w * 16 + r) *
// kPitch + d], d < 128. Row r's output is sum_w f_w O_w / sum_w f_w l_w with f_w = 2^(m_w - max_w m_w), times
// v_scale; a split task also stores its log-sum-exp (base 2).
//
// Twenty-eighth session: the timeline's end step (last tile -> consumer exit, 1.9-2.1 us on every case) spent
// 1.2-1.4 us in this fold at G = 8, and a second pass through the same code (stores off) took as long as the
// first, so the time is the fold's own dependent chain, not cold code or stores: each of the 128 threads ran
// every row's scalar chain (8 shared loads, max, 4 exp2, sums, reciprocal) before the row's output, one row
// after another (~280 cycles a row). HPC_ATTN_FOLD_ROW_SCALARS 1 (default): thread r < G computes row r's
// scalars once (f_w and 1 / l written back over its own m / l slots), a barrier, then the second step folds the
// rows with their loads and products independent of each other (its form: HPC_ATTN_FOLD_VECTOR below). Same
// arithmetic in the same order (the reciprocal is the same MUFU.RCP that `acc / L` compiles to under
// --use_fast_math), so the same bits; HPC_ATTN_FOLD_ROW_SCALARS 0 is the earlier form (`_ext.FOLD_EACH_THREAD`, the
// A/B build).
#pragma once

#include <cuda_bf16.h>

#include "hpc_attention/sm90_primitives.cuh"
#include "hpc_attention/decode_params.h"

#ifndef HPC_ATTN_FOLD_ROW_SCALARS
#define HPC_ATTN_FOLD_ROW_SCALARS 1
#endif

// HPC_ATTN_FOLD_ADDR_EARLY 1 (default, twenty-eighth session): with the row scalars the fold still took ~0.8 us
// (merged -> stored) against ~0.35 us of its instructions' chain. Suspect: its reads of the parameter block (p.out,
// the strides, p.partial_o / partial_lse, p.group: LDC / ULDC at the fold). The task's store addresses are computed
// at the task's start and pinned (and G) in registers, so the fold reads no constant: timeline's row scalars ->
// stored 0.64 -> 0.51 us, -0.10 us mean over 24 cases (17 faster, every 8/1 FP8 case;
// decode_attention_fold_addr_ab_3d26aad.*). 0 is the earlier form (`_ext.FOLD_ADDR_AT_FOLD`).
#ifndef HPC_ATTN_FOLD_ADDR_EARLY
#define HPC_ATTN_FOLD_ADDR_EARLY 1
#endif

// HPC_ATTN_FOLD_VECTOR 1 (default, twenty-eighth session): the row-scalar fold's second step (~0.5 us at G = 8)
// was ~220 instructions per consumer warp, issue- and dependency-bound (ncu: "wait" and "selected" stalls only,
// benchmarks/profiles/h200/ncu_decode_source_fold_b8ceb42.txt): per output element a 4-byte load per source warp and
// a scalar store with its own address arithmetic and branch. Now each thread takes 4 adjacent columns of rows
// r = warp, warp + 4, ...: one 16-byte load per source warp, one 8-byte (BF16) or 16-byte (partial) store per row,
// the branch on the task's kind once per row; ~110 instructions per warp at G = 8. Same arithmetic per element,
// same bits. Timeline's step 0.51 -> 0.32-0.35 us; -0.33 us mean over the 24 cases, 24 faster
// (decode_attention_fold_vector_ab_fcc7866.*). 0 is the earlier form (`_ext.FOLD_SCALAR_COLUMNS`).
#ifndef HPC_ATTN_FOLD_VECTOR
#define HPC_ATTN_FOLD_VECTOR 1
#endif

namespace hpc::attn {

constexpr bool kFoldRowScalars = HPC_ATTN_FOLD_ROW_SCALARS != 0;
constexpr bool kFoldVector = HPC_ATTN_FOLD_VECTOR != 0;
constexpr bool kFoldAddrEarly = HPC_ATTN_FOLD_ADDR_EARLY != 0;

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

// The targets of task slot w (< 0: a whole task) of item (b, h). kPin: pinned in registers (kFoldAddrEarly, called
// at the task's start); otherwise plain values that ptxas re-reads from the parameters where they are used.
template <int kDim, bool kPin>
__device__ __forceinline__ FoldTargets fold_targets(const PagedDecodeParams& p, int b, int h, int w) {
  const auto keep = [](auto v) {
    if constexpr (kPin) {
      return pin_reg(v);
    } else {
      return v;
    }
  };
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
// `bar` is the consumers' named barrier. store_row(row, value) writes column d of an output row; store_row4(row,
// col, v) columns col .. col + 3 (kFoldVector); store_lse(row, lse) a split task's log-sum-exp (called by one
// thread per row); after_scalars() runs after the row scalars' barrier (timeline stamps).
template <int kPitch, class StoreRow, class StoreRow4, class StoreLse, class AfterScalars>
__device__ __forceinline__ void fold_task_rows(float* merge_m, float* merge_l, const float* merge_o, int G,
                                               float v_scale, int d, int bar, StoreRow store_row,
                                               StoreRow4 store_row4, StoreLse store_lse,
                                               AfterScalars after_scalars) {
  const float kNegInf = -__int_as_float(0x7f800000);
  if constexpr (kFoldRowScalars) {
    // Row r's scalars, by thread r < G: f_w over the thread's own m slots [w][r], 1 / l over its l slot [0][r], so
    // no thread reads what another writes. (Factors written row-major for one 16-byte load per row, 8 rows per
    // step: null, -0.02 us, decode_attention_fold_packed_ab_a390661.*.)
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
    after_scalars();
    if constexpr (kFoldVector) {
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
    } else {  // one column (d) per thread, 4 rows at a time
      for (int row0 = 0; row0 < G; row0 += 4) {
        float val[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // rows >= G (the last group of G < 4) read stale slots: folded, not stored
          const int row = row0 + i;
          float acc = 0.f;
#pragma unroll
          for (int w = 0; w < 4; ++w) acc += merge_m[w * 16 + row] * merge_o[(w * 16 + row) * kPitch + d];
          const float rl = merge_l[row];
          val[i] = (rl > 0.f ? acc * rl : 0.f) * v_scale;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (row0 + i < G) store_row(row0 + i, val[i]);
        }
      }
    }
  } else {
    for (int row = 0; row < G; ++row) {
      float mw[4], mmax = kNegInf;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        mw[w] = merge_m[w * 16 + row];
        mmax = fmaxf(mmax, mw[w]);
      }
      const float mbase = mmax == kNegInf ? 0.f : mmax;
      float L = 0.f, acc = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float f = exp2f(mw[w] - mbase);
        L += f * merge_l[w * 16 + row];
        acc += f * merge_o[(w * 16 + row) * kPitch + d];
      }
      store_row(row, (L > 0.f ? acc / L : 0.f) * v_scale);
      if (d == 0) store_lse(row, mbase + __log2f(L));
    }
  }
}

}  // namespace hpc::attn
