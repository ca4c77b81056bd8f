// Paged-KV decode attention, persistent and warp specialised (SM90).
//
// One CTA per bin of the plan (decode_plan.cuh). Warps 4-7 (the producers) walk the bin's
// tasks tile by tile and stream each 64-token tile of K and V (a row = one token of one KV head,
// 256 B in BF16, 128 B in FP8; rows found through the page table) into a ring of kStages
// shared-memory stages, completing on the stage's mbarrier; the first tile of a task also
// brings the task's G query rows. Two producers (template kTma, heuristics.PRODUCER):
// 16-byte cp.async copies from all four warps (decode_producer.cuh), or tensor-map copies
// of whole pages' rows with the 128-byte swizzle from one warp (decode_tma_producer.cuh;
// the consumers then read the swizzled layout, see decode_config.cuh). (A first version
// used one bulk copy per row: 128 copy-engine instructions per tile capped it at ~7 GB/s per
// SM.) Warps 0-3 (the consumers) each own 16 of the tile's 64 tokens: S = Q K^T
// and O += P V on m16n8k16 tensor cores with the G = 16 query heads of the KV head as the 16 rows
// or, for G <= 8, transposed (S^T = K Q^T, O^T += V^T P^T: tokens and head dims as the rows, the
// heads as the 8 columns; see consumer_warp), an online softmax in FP32 (log2 domain) and FP32
// accumulation of P V for the whole task. At the end of a task the four warps' (m, l, O) are
// merged in shared memory in a fixed order, and the task writes either the final BF16 output or
// an FP32 partial + log-sum-exp of a split item.
//
// Split items are merged either by the separate combine kernel (merge == 0) or here (merge != 0,
// heuristics.MERGE): after writing its partial, a part arrives on a counter of its item
// (release: one thread's GPU-scope fence after the CTA's barrier, then one atomicAdd); the CTA whose
// arrival completes the count (or that saw every other part arrived before its own stores, the
// arrival peek of decode_merge_in_kernel.cuh) reads the parts in the fixed part order and writes
// the final BF16 rows, with the same
// arithmetic as the combine kernel (split_merge.cuh), so the two paths give identical bits and
// the result never depends on which CTA finished last. An item of P <= kWarpParts parts is merged
// in one level; a longer one (a long context over many CTAs) in two: the last part of each of the
// 8 residue groups (parts g, g + 8, ...) merges its group into a state (m, l, acc) kept in slot
// f + g, and the last group merges the 8 states (the combine kernel's phase 2, spread over 9
// CTAs instead of one). Counters live in the workspace, are zeroed at its creation and put back
// to zero by the merging CTA, so every call (and every CUDA-graph replay) starts from zero
// without host memsets. Empty items (length 0) get their zero rows from the producer warps.
//
// FP8 (E4M3) KV: tiles are converted to FP16 in registers (exact) and multiplied with FP16 Q
// (BF16 Q is rounded to FP16, which needs |q| < 65504); P is FP16 and P V accumulates in
// FP32 registers per tile (no FP8 tensor-core accumulation). The per-tensor K scale folds into
// the softmax scale and the V scale into the output. FP8 Q carries one scale per (token, head)
// that scales the rows of S.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "hpc_attention/sm90_primitives.cuh"
#include "hpc_attention/decode_params.h"
#include "hpc_attention/split_merge.cuh"
#include "hpc_attention/decode_config.cuh"
#include "hpc_attention/decode_tile_ops.cuh"
#include "hpc_attention/decode_producer.cuh"
#include "hpc_attention/decode_tma_producer.cuh"
#include "hpc_attention/decode_merge_in_kernel.cuh"
#include "hpc_attention/decode_bin_ring.cuh"
#include "hpc_attention/decode_task_fold.cuh"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

// kHeadsN (G <= 8 query heads per KV head): the products run transposed, the tile's
// tokens on the mma's M side and the heads on N: S^T = K Q^T (tile_scores) and
// O^T += V^T P^T, with P^T turned into the B operand by two movmatrix transposes. Each thread then
// holds heads 2j and 2j + 1 (m0 / l0 and m1 / l1), tokens g and g + 8, and O^T rows (head dims)
// of 8 m-tiles: half the mma and accumulators of the padded 16-row form, and no exp2 or rescale
// of padded rows. The V fragments are tile_v_frags' B fragments, two n-tiles per A fragment.
template <bool kFp8Kv, bool kFp8Q, bool kTma, bool kHeadsN>
__device__ __forceinline__ void consumer_warp(const DecodeParams& p, uint8_t* smem, uint64_t* full,
                                              uint64_t* empty, const BinRing& ring, const MergeRing& mring,
                                              int bin, int t_begin, int t_end, int4 first) {
  using Cfg = DecodeConfig<kFp8Kv, kFp8Q, kTma>;
  constexpr bool kF16 = kFp8Kv;
  constexpr int kOTiles = kHeadsN ? 8 : 16;  // accumulator fragments: m-tiles of O^T or n-tiles of O
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, j = lane & 3;
  const int G = p.group;
  const float k_scale = p.k_scale_ptr ? *p.k_scale_ptr : p.k_scale;
  const float v_scale = p.v_scale_ptr ? *p.v_scale_ptr : p.v_scale;
  const float score_scale = p.sm_scale_log2 * k_scale;
  float* merge_o = reinterpret_cast<float*>(smem + Cfg::kMergeOff);
  float* merge_m = reinterpret_cast<float*>(smem + Cfg::kStatsOff);
  float* merge_l = merge_m + 4 * 16;
  const float kNegInf = -__int_as_float(0x7f800000);

  const bool helpers_merge = kTma && p.merge == 2;  // split tasks handed to the helper warps
  int stage = 0;
  uint32_t phase = 0;
  int requests = 0;
  // Own bin (`bin`, own_bin), then the tail bins: claimed ones handed over by the scheduler (TMA
  // kernel) or a fixed sequence (cp.async kernel), see decode_bin_ring.cuh.
  StaticBins bins{bin, kTma ? 0 : p.counters[kNumTailBins], 0, 0, make_int4(0, 0, 0, 0)};
  for (int claimed = 0;; ++claimed) {
  if constexpr (!kTma) bins.prefetch(p);
  int4 next = first;  // the bin's first task (prologue, ring or previous bin)
  for (int t = t_begin; t < t_end; ++t) {
    const int4 task = next;
    // t is the position in the bin's run order (task_in_run)
    if (t + 1 < t_end) next = task_in_run(p, t_begin, t_end, t + 1);  // in flight while this task computes
    const int b = task.x / p.num_kv_heads, h = task.x - b * p.num_kv_heads;
    // Merge mode: {first slot, parts} of a split item, in flight while the task computes.
    const int2 meta = p.merge && task.w >= 0 ? p.slot_meta[task.w] : make_int2(0, 0);
    // The thread's two query heads: rows g and g + 8 of S, or (kHeadsN) columns 2j and 2j + 1 of S^T.
    const int head0 = kHeadsN ? 2 * j : g, head1 = kHeadsN ? 2 * j + 1 : g + 8;
    float row_scale0 = score_scale, row_scale1 = score_scale;
    if constexpr (kFp8Q) {
      const float* qs = p.q_scale + b * p.q_scale_stride_b + (h * G) * p.q_scale_stride_h;
      row_scale0 *= head0 < G ? qs[head0 * p.q_scale_stride_h] : 0.f;
      row_scale1 *= head1 < G ? qs[head1 * p.q_scale_stride_h] : 0.f;
    }
    const int tile_end = (task.z + Cfg::kTile - 1) / Cfg::kTile;
    // The fold's store addresses and G, pinned in registers from here on (fold_targets, decode_task_fold.cuh).
    const FoldTargets fold_at = fold_targets<Cfg::kDim>(p, b, h, task.w);
    float o[kOTiles][4];
#pragma unroll
    for (int nt = 0; nt < kOTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
    float m0 = kNegInf, m1 = kNegInf, l0 = 0.f, l1 = 0.f;
    uint32_t qa[8][4];

    // Score look-ahead: the scores of tile n + 1 of the task are computed
    // before the softmax and P V of tile n, in the same basic block, so that the 8-deep chains
    // of S products (and, FP8, their conversions) run in the shadow of the softmax's shuffles
    // and exp2 instead of after them. Why: one consumer warp per sub-partition walks each tile
    // as a dependent chain with nothing to hide its latencies (0.8 us per tile for BF16 and FP8
    // alike); the next tile's scores are the independent work at hand.
    // A task's last tile runs as a second copy of the body without the look-ahead (kNext false):
    // the next tile belongs to another task (other Q rows) or to no task at all.
    const uint8_t* sb = smem + stage * Cfg::kStageBytes;
    float s[2][4];
    if (task.y < tile_end) {
      mbar_wait(&full[stage], phase);
      load_q_frags<kFp8Kv, kFp8Q>(sb + Cfg::kQOff, qa);
      tile_scores<Cfg, kFp8Kv, kHeadsN>(sb, qa, s);
    }
    auto tile_body = [&](const int tile, auto next_tag) {
      constexpr bool kNext = decltype(next_tag)::value;  // tile + 1 < tile_end
      // Every tile of a task but its last is full: (tile + 1) * 64 <= (tile_end - 1) * 64 < task.z.
      // Known at compile time there, the masks of the scores and of V drop out of that body.
      const int valid = kNext ? Cfg::kTile : min(Cfg::kTile, task.z - tile * Cfg::kTile);
      const int nstage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
      const uint32_t nphase = nstage == 0 ? phase ^ 1 : phase;
      float sn[2][4];
      if constexpr (kNext) {
        mbar_wait(&full[nstage], nphase);
        tile_scores<Cfg, kFp8Kv, kHeadsN>(smem + nstage * Cfg::kStageBytes, qa, sn);
      }

      // ---- online softmax (log2 domain), tokens past the length masked ----
      float mx0 = kNegInf, mx1 = kNegInf;
      if constexpr (kHeadsN) {
        // s[0] + s[1]: (token g, head0), (token g, head1), (token g + 8, head0), (token g + 8, head1)
        const int tok = 16 * warp + g;
        const bool ok_lo = kNext || tok < valid, ok_hi = kNext || tok + 8 < valid;
        s[0][0] = ok_lo ? (s[0][0] + s[1][0]) * row_scale0 : kNegInf;
        s[0][1] = ok_lo ? (s[0][1] + s[1][1]) * row_scale1 : kNegInf;
        s[0][2] = ok_hi ? (s[0][2] + s[1][2]) * row_scale0 : kNegInf;
        s[0][3] = ok_hi ? (s[0][3] + s[1][3]) * row_scale1 : kNegInf;
        mx0 = fmaxf(s[0][0], s[0][2]);
        mx1 = fmaxf(s[0][1], s[0][3]);
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {  // over the 8 lanes of a column (g)
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
        }
      } else {
        const int tok_base = 16 * warp + 2 * j;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const bool ok = kNext || tok_base + 8 * n + e < valid;
            s[n][e] = ok ? s[n][e] * row_scale0 : kNegInf;
            s[n][2 + e] = ok ? s[n][2 + e] * row_scale1 : kNegInf;
            mx0 = fmaxf(mx0, s[n][e]);
            mx1 = fmaxf(mx1, s[n][2 + e]);
          }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      }
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float base0 = mn0 == kNegInf ? 0.f : mn0, base1 = mn1 == kNegInf ? 0.f : mn1;
      const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
      m0 = mn0;
      m1 = mn1;
      float ps0 = 0.f, ps1 = 0.f;
      uint32_t pa[4];  // A fragment of P, or (kHeadsN) pa[0] / pa[1]: B fragment of P^T
      if constexpr (kHeadsN) {
        // l0 / l1 are this lane's partial sums (tokens g, g + 8); the task's end adds the 8 lanes.
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          s[0][e] = exp2f(s[0][e] - base0);
          s[0][e + 1] = exp2f(s[0][e + 1] - base1);
          ps0 += s[0][e];
          ps1 += s[0][e + 1];
        }
        // (token g, heads 2j, 2j + 1) -> B fragment (tokens 2j, 2j + 1, head g): tokens 0-7, then 8-15
        pa[0] = movmatrix_trans(pack2<kF16>(s[0][0], s[0][1]));
        pa[1] = movmatrix_trans(pack2<kF16>(s[0][2], s[0][3]));
      } else {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            s[n][e] = exp2f(s[n][e] - base0);
            s[n][2 + e] = exp2f(s[n][2 + e] - base1);
            ps0 += s[n][e];
            ps1 += s[n][2 + e];
          }
        }
      }
      l0 = l0 * corr0 + ps0;
      l1 = l1 * corr1 + ps1;
      if (__any_sync(0xffffffffu, corr0 != 1.f || corr1 != 1.f)) {  // the running max moved
        // O: [0] / [1] row g (head0), [2] / [3] row g + 8 (head1); O^T: [0] / [2] head0, [1] / [3] head1
#pragma unroll
        for (int nt = 0; nt < kOTiles; ++nt) {
          o[nt][0] *= corr0;
          o[nt][1] *= kHeadsN ? corr1 : corr0;
          o[nt][2] *= kHeadsN ? corr0 : corr1;
          o[nt][3] *= corr1;
        }
      }
      if constexpr (!kHeadsN) {
        pa[0] = pack2<kF16>(s[0][0], s[0][1]);
        pa[1] = pack2<kF16>(s[0][2], s[0][3]);
        pa[2] = pack2<kF16>(s[1][0], s[1][1]);
        pa[3] = pack2<kF16>(s[1][2], s[1][3]);
      }

      // ---- O += P V ----
      // (Loading these fragments before the softmax, next to the look-ahead scores, measured
      // equal on every case and took up to 240 registers.)
      uint32_t vf[16][2];
      tile_v_frags<Cfg, kFp8Kv, kNext>(sb, valid, vf);
      if constexpr (kHeadsN) {
        // m-tile i of V^T: rows 0-7 = n-tile 2i's columns, rows 8-15 = n-tile 2i + 1's
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t va[4] = {vf[2 * i][0], vf[2 * i + 1][0], vf[2 * i][1], vf[2 * i + 1][1]};
          mma_16816<kF16>(o[i], va, pa[0], pa[1]);
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) mma_16816<kF16>(o[nt], pa, vf[nt][0], vf[nt][1]);
      }
      // Every lane arrives (the barrier counts 32 per consumer warp), so each lane's ldmatrix reads
      // of the stage are released to the producer's next writes into it by its own arrive. A
      // __syncwarp + lane-0 arrive compiles to a lone arrive (the warp is converged), which orders
      // nothing for lanes 1-31 in the memory model: compute-sanitizer racecheck reported their reads
      // against the cp.async producer's LDGSTS (H200, bbc6769) and the TMA producer's 1-D bulk copies (451a2cd).
      mbar_arrive(&empty[stage]);
      stage = nstage;
      phase = nphase;
      sb = smem + stage * Cfg::kStageBytes;
      if constexpr (kNext) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[n][e] = sn[n][e];
        }
      }
    };
    // The split tasks the consumers merge themselves: every one (cp.async kernel), or the bin's last
    // (see the merge below); the others go to the helper warps.
    const bool consumers_merge = p.merge && task.w >= 0 && !(helpers_merge && t + 1 != t_end);
    int seen = -1;  // thread 0's peek at the split item's counter (the arrival peek)
    if (task.y < tile_end) {
      for (int tile = task.y; tile + 1 < tile_end; ++tile) tile_body(tile, std::true_type{});
      // The arrival peek (decode_merge_in_kernel.cuh): read the counter as the last tile starts; the load's round
      // trip runs under the tile and the task-end fold.
      if (consumers_merge && threadIdx.x == 0) {
        seen = ld_relaxed_gpu(p.merge_counts + level1_counter(task.w, meta).index);
      }
      tile_body(tile_end - 1, std::false_type{});
    }

    // ---- merge the 4 warps (fixed order) and write the task's output ----
    float* mo = merge_o + warp * 16 * Cfg::kMergePitch;
    if constexpr (kHeadsN) {
#pragma unroll
      for (int x = 4; x < 32; x <<= 1) {  // the 8 lanes (g) of a head
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // O^T rows g / g + 8 of m-tile i: column g of n-tile 2i + half
          const int nt = 2 * i + half;
          const int d = v_col<kFp8Kv>(nt, g);
          if (head0 < G) mo[head0 * Cfg::kMergePitch + d] = o[i][2 * half];
          if (head1 < G) mo[head1 * Cfg::kMergePitch + d] = o[i][2 * half + 1];
        }
      }
      if (g == 0) {
        merge_m[warp * 16 + head0] = m0;
        merge_l[warp * 16 + head0] = l0;
        merge_m[warp * 16 + head1] = m1;
        merge_l[warp * 16 + head1] = l1;
      }
    } else {
      l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
      l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int d = out_col<kFp8Kv>(nt, j, e);
          if (g < G) mo[g * Cfg::kMergePitch + d] = o[nt][e];
          if (g + 8 < G) mo[(g + 8) * Cfg::kMergePitch + d] = o[nt][2 + e];
        }
      }
      if (j == 0) {
        merge_m[warp * 16 + g] = m0;
        merge_l[warp * 16 + g] = l0;
        merge_m[warp * 16 + g + 8] = m1;
        merge_l[warp * 16 + g + 8] = l1;
      }
    }
    named_barrier(1, 128);
    // A part that saw every other part arrived is the last: it acquires here, before its own partial's stores.
    bool known_last = false;
    if (threadIdx.x == 0 && seen >= 0) {
      const MergeCounter c1 = level1_counter(task.w, meta);
      known_last = last_by_peek(p.merge_counts + c1.index, seen, c1.need);
    }
    // The fold (decode_task_fold.cuh).
    fold_task_rows<Cfg::kMergePitch>(
        merge_m, merge_l, merge_o, fold_at.G, v_scale, threadIdx.x, 1,
        [&](int row, int col, const float (&v)[4]) {  // fold_at's pointers hold the thread's own column
          if (task.w < 0) {
            const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
            uint2 packed;
            packed.x = *reinterpret_cast<const uint32_t*>(&lo);
            packed.y = *reinterpret_cast<const uint32_t*>(&hi);
            // 8-byte aligned (out's strides are multiples of 8 elements, checked by the wrapper); inline PTX, as
            // NVVM split the vector store through the shuffled pointer into scalar ones.
            store_v2_b32(fold_at.out + row * fold_at.out_stride_h + (col - static_cast<int>(threadIdx.x)), packed);
          } else {
            store_v4_f32(fold_at.partial_o + row * Cfg::kDim + (col - static_cast<int>(threadIdx.x)), v);
          }
        },
        [&](int row, float lse) {
          if (task.w >= 0) fold_at.partial_lse[row] = lse;
        });
    if (p.merge && task.w >= 0) {
      // The bin's last task is merged by the consumers themselves: nothing follows it on them (but a claimed
      // tail bin, off by default, which then waits for the merge), and the hand-over to the helpers is a step on
      // the call's critical path when this part arrives last (-0.2 to -1 us at the call's end, same bits).
      if (!consumers_merge) {
        merge_request(mring, requests++, make_int4(task.x, task.w, meta.x, meta.y));
      } else {
        merge_split_task(p, b, h, G, task.w, meta, reinterpret_cast<volatile int*>(smem + Cfg::kFlagOff),
                         threadIdx.x, known_last);
      }
    }
    named_barrier(1, 128);
  }
  bool more;
  if constexpr (kTma) {
    more = ring_next(ring, claimed, t_begin, t_end, first);
  } else {
    more = bins.next(t_begin, t_end, first);
  }
  if (!more) break;
  }
  if (helpers_merge) merge_request(mring, requests, make_int4(-1, 0, 0, 0));  // ends the helpers' service
}

__device__ __forceinline__ void touch_decode_param_lines(const DecodeParams& p) {
  constexpr int kLines = static_cast<int>((sizeof(DecodeParams) + 255) / 256);
  static_assert(kLines <= 3, "warps 1..kLines of the CTA touch one line each");
  __shared__ volatile int sink[kLines];  // volatile: ptxas would drop unread stores and the loads with them
  const int w = static_cast<int>(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0 && w >= 1 && w <= kLines) {
    // One word per 256 bytes from the block's start: every line the block spans, whatever its alignment.
    sink[w - 1] = reinterpret_cast<const int*>(&p)[(w - 1) * 64];
  }
}

// kEarly (TMA kernels, launched when p.early_kv_tokens > 0): the producer's early KV loads. A template parameter, not
// a test of the parameter, so the plain kernels keep their code: a runtime flag read before the PDL wait and a check
// in the producer's loop measured +0.4-0.7 us per cold call (cold A/B of 81b3336 against 5b52a77, H200).
template <bool kFp8Kv, bool kFp8Q, bool kTma, bool kHeadsN, bool kEarly = false>
__global__ void __launch_bounds__(DecodeConfig<kFp8Kv, kFp8Q, kTma>::kThreads, 1)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  using Cfg = DecodeConfig<kFp8Kv, kFp8Q, kTma>;
  touch_decode_param_lines(p);
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;
  if constexpr (kTma) smem += (1024u - (smem_u32(smem_raw) & 1023u)) & 1023u;  // swizzle atoms
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarOff);
  uint64_t* empty = full + Cfg::kStages;
  BinRing ring;
  ring.slot = reinterpret_cast<int4*>(smem + Cfg::kRingOff);
  ring.full = reinterpret_cast<uint64_t*>(smem + Cfg::kRingBarOff);
  ring.empty = ring.full + kRingSlots;
  ring.want = ring.empty + kRingSlots;
  MergeRing mring;
  mring.desc = reinterpret_cast<int4*>(smem + Cfg::kMergeRingOff);
  mring.full = reinterpret_cast<uint64_t*>(smem + Cfg::kMergeRingOff + kMergeRingSlots * 16);
  mring.empty = mring.full + kMergeRingSlots;
  if (threadIdx.x == 0) {  // (one barrier per thread of warps 0-1, each with its fences: +1.4 us)
    for (int s = 0; s < Cfg::kStages; ++s) {
      // cp.async: one arrival per producer thread; TMA: the producer's one expect_tx arrival.
      mbar_init(&full[s], kTma ? 1 : Cfg::kProducerThreads);
      mbar_init(&empty[s], 32 * Cfg::kConsumerWarps);  // every consumer lane arrives
    }
    for (int s = 0; s < kRingSlots; ++s) {  // TMA kernel: read by the 4 consumer warps + the producer warp
      mbar_init(&ring.full[s], 1);
      mbar_init(&ring.empty[s], Cfg::kConsumerWarps + 1);
    }
    mbar_init(ring.want, 1);
    for (int s = 0; s < kMergeRingSlots; ++s) {
      mbar_init(&mring.full[s], 32 * Cfg::kConsumerWarps);
      mbar_init(&mring.empty[s], 1);
    }
    mbar_fence_init();
    if constexpr (kTma) fence_proxy_async_smem();
  }
  // Q rows >= G of every stage are never copied: zero them once so padded rows are finite. Every row is zeroed, so
  // the loop reads no parameter (see decode_config.cuh, the prologue); the producer's copies of rows < G are issued
  // after the block barrier below, and the proxy fence orders this thread's zero stores before the TMA kernel's
  // async-proxy writes of them.
  for (int i = threadIdx.x; i < Cfg::kStages * 16 * 16; i += blockDim.x) {
    const int s = i >> 8, row = (i >> 4) & 15, c = i & 15;
    *reinterpret_cast<uint4*>(smem + s * Cfg::kStageBytes + Cfg::kQOff + row * Cfg::kQPitch + 16 * c) =
        make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async_smem();
  __syncthreads();
  // early (DecodeParams::early_kv_tokens, TMA producer): the plan tables and the first task's older KV tiles are
  // read before the wait, by the producer warp; every other warp waits at its role's entry (pdl_wait_here), before
  // it reads q, the scales or a counter or writes anything.
  constexpr bool early = kTma && kEarly;
  if (!early) pdl_wait_here(p);
  const int bin = own_bin(p);
  const int t_begin = p.bin_start[bin], t_end = p.bin_start[bin + 1];
  // The bin's first task: its copy in bin_first is loaded together with bin_start instead of
  // after it (one dependent global round trip fewer before the first page id and KV bytes).
  // Only used when the bin is not empty (t_begin < t_end).
  const int4 first = p.bin_first[bin];
  // The page id of the bin's first tile from the planner (pages >= 64 tokens, own bin not empty;
  // read with bin_start, so the first copies need no page-table round trip); -1: read the table.
  int first_page = p.bin_first_page != nullptr && p.page_size_log2 >= 6 ? p.bin_first_page[bin] : -1;
  if (t_begin >= t_end) first_page = -1;  // empty own bin: the entry is stale
  if (threadIdx.x >= 32 * Cfg::kConsumerWarps) {
    if constexpr (kTma) {
      // One warp issues the copies, lane 0 of the next one claims tail bins (decode_bin_ring.cuh),
      // the last two write the empty items' zero rows.
      const int pw = threadIdx.x - 32 * Cfg::kConsumerWarps;
      if (pw < 32) {
        producer_tma_warp<kFp8Kv, kFp8Q, early>(p, smem, full, empty, ring, t_begin, t_end, first, first_page);
      } else {
        if (early) pdl_wait_here(p);
        if (pw < 64) {
          if (pw == 32) bin_scheduler(p, ring);
        } else if (p.merge) {
          static_assert(Cfg::kProducerThreads - 64 == kMergeHelperThreads, "two helper warps");
          write_empty_items<kMergeHelperThreads>(p, pw - 64);
          if (p.merge == 2) merge_helpers(p, mring, reinterpret_cast<volatile int*>(smem + Cfg::kFlagOff + 4), pw - 64);
        }
      }
    } else {
      producer_warps<kFp8Kv, kFp8Q>(p, smem, full, empty, bin, t_begin, t_end, first, first_page);
    }
  } else {
    if (early) pdl_wait_here(p);
    consumer_warp<kFp8Kv, kFp8Q, kTma, kHeadsN>(p, smem, full, empty, ring, mring, bin, t_begin, t_end, first);
  }
}

// kTma: the TMA producer; p.k_map / p.v_map must hold the caches' tensor maps
// (csrc/decode_dispatch.cu). Products with the heads on the mma's N side (consumer_warp's
// kHeadsN) for G <= 8 query heads per KV head, the padded 16-row form for G = 16.
template <bool kFp8Kv, bool kFp8Q, bool kTma>
inline cudaError_t launch_decode(const DecodeParams& p, int num_ctas, cudaStream_t stream, bool pdl) {
  using Cfg = DecodeConfig<kFp8Kv, kFp8Q, kTma>;
  const bool early = kTma && p.early_kv_tokens > 0;  // (cp.async kernels: never; kTma as kEarly adds no kernel)
  const auto kernel = p.group <= 8 ? (early ? decode_kernel<kFp8Kv, kFp8Q, kTma, true, kTma>
                                            : decode_kernel<kFp8Kv, kFp8Q, kTma, true, false>)
                                   : (early ? decode_kernel<kFp8Kv, kFp8Q, kTma, false, kTma>
                                            : decode_kernel<kFp8Kv, kFp8Q, kTma, false, false>);
  return hpc::launch_kernel(kernel, dim3(num_ctas), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, pdl, p);
}

}  // namespace hpc::attn
