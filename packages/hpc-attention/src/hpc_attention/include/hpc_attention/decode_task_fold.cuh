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
// scalars once (f_w and 1 / l written back over its own m / l slots), a barrier, then every thread folds its
// column of 4 rows at a time, the rows' loads and products independent of each other. Same arithmetic in the
// same order (the reciprocal is the same MUFU.RCP that `acc / L` compiles to under --use_fast_math), so the
// same bits; HPC_ATTN_FOLD_ROW_SCALARS 0 is the earlier form (`_ext.FOLD_EACH_THREAD`, the A/B build).
#pragma once

#include "hpc_attention/sm90_primitives.cuh"

#ifndef HPC_ATTN_FOLD_ROW_SCALARS
#define HPC_ATTN_FOLD_ROW_SCALARS 1
#endif

namespace hpc::attn {

constexpr bool kFoldRowScalars = HPC_ATTN_FOLD_ROW_SCALARS != 0;

// Called by the 128 consumer threads (d = threadIdx.x) after the barrier that follows the warps' state writes;
// `bar` is the consumers' named barrier. store_row(row, value) writes column d of an output row;
// store_lse(row, lse) a split task's log-sum-exp (called by one thread per row).
template <int kPitch, class StoreRow, class StoreLse>
__device__ __forceinline__ void fold_task_rows(float* merge_m, float* merge_l, const float* merge_o, int G,
                                               float v_scale, int d, int bar, StoreRow store_row,
                                               StoreLse store_lse) {
  const float kNegInf = -__int_as_float(0x7f800000);
  if constexpr (kFoldRowScalars) {
    if (d < G) {  // row d's scalars: its own slots only, so no thread reads what another writes
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
