// FP8 quantisation with short-lived CTAs: the default wherever the bulk ring kernel
// (fp8_quant_bulk.cuh) applies, and for the aligned rows it does not take. Each CTA holds one tile
// (at most 16 KB: 256 threads x 4 vectors, or one long row) loaded straight into registers,
// quantised, stored, and gone; the next CTA takes its place:
//   fp8_quant_tile_kernel      the ring kernel's tiles and thread layout (BulkTile; a team of
//                              seg_vectors / 4 lanes per segment) without its shared-memory ring and
//                              one-wave grid: per-token rows, per-tensor scales on strided rows,
//                              group / per-head shapes the column tiles do not take;
//   fp8_quant_row_tile_kernel  the same body with ragged teams (eighteenth session): rows of 4-1024
//                              vectors that are no power of two (hidden 2880 / 5120 / 7168), and in
//                              its cover form rows of several segments ending in a shorter one;
//   fp8_quant_odd_group_row_kernel  (fp8_quant_odd_group_rows.cuh) odd group-128 rows of 2-byte inputs,
//                              one row's aligned cover per CTA, four lanes per group;
//   fp8_quant_odd_row_tile_kernel  (fp8_quant_odd_rows.cuh) covers from a misaligned start: the other
//                              group rows misaligned alike in x and q (odd row lengths);
//   fp8_quant_long_row_kernel  the same body with 8 / 16 vectors per lane: rows of 1025-4096 vectors;
//   fp8_quant_col_tile_kernel  group scales (row- or column-major) and dense per-head inputs in
//                              8-row tiles, so each CTA writes whole 32-byte runs of scales;
//   fp8_quant_flat_kernel      a per-tensor static scale on a contiguous tensor (a flat index).
// Which shape takes which kernel: FP8_NOTES.md (checked on the CPU by tests/common/test_fp8_dispatch.py).
//
// Why (H200, seventeenth session, FP8_HISTORY.md): under the per-call method (written L2 flush,
// one cold call) torch.add of two 32 MB bf16 tensors into a third, the quantiser's byte mix (64 MB
// read, 32 MB written) in one plain elementwise kernel, read 28.9 us where the ring kernel's
// per-tensor static call read 30.2: the ring starts streaming ~1.5 us after entry (barrier init,
// one thread issuing the first copies) and each CTA then waits on its own ring, where short-lived
// CTAs have their loads out at once and the tail is one 16 KB tile. Same process, 64 MB bf16, us
// (ring -> these kernels, run of 5c0a6f4): per-tensor static 30.5 -> 29.0, dynamic 48.5 -> 46.3,
// per-token 32.2 -> 29.8, group-128 32.4 -> 30.1 (column-major 33.1 -> 30.1), per-head 32.1 -> 30.0.
//
// Occupancy: the loads in flight per SM are the registers holding them. The tile kernels are
// compiled for 5 CTAs per SM (45-48 registers): capped at 40 the dynamic kernel spilled and read
// 31.1 us per-token, at 32 (no spill) 29.7-29.8 against 29.5-29.6. The flat kernel: 32 registers
// (7-8 CTAs per SM), 0.2-0.3 us faster than at 38.
//
// Semantics are exactly those of fp8_quant_kernel and the ring kernel (same device primitives):
// same bits out.
#pragma once

#include <type_traits>

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_bulk.cuh"
#include "hpc_common/fp8_quant_odd_group_rows.cuh"
#include "hpc_common/fp8_quant_odd_rows.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kTileThreads = kBulkThreads;  // 256 threads x 4 vectors = one 16 KB tile per CTA
// Minimum CTAs per SM the kernels are compiled for (register cap: 65536 / (256 x this), rounded
// down to ptxas' 8-register granularity). Build switches for the A/B runs of FP8_HISTORY.md.
#ifndef HPC_FP8_TILE_MIN_BLOCKS
#define HPC_FP8_TILE_MIN_BLOCKS 5
#endif
#ifndef HPC_FP8_FLAT_MIN_BLOCKS
#define HPC_FP8_FLAT_MIN_BLOCKS 7
#endif
// One row per CTA of the row tile kernel when a row's team spans several warps (more than 32 lanes: the
// team's amax meets at a block barrier), rather than as many rows as 256 threads hold. Why (H200, 64 MB
// bf16 per-token, written flush, three interleaved rounds per process; fp8_quant_tile_segs_ab_fc77e29.* and
// fp8_quant_row_tile_rows_ab_628fa00.*): N = 2880 (96-lane teams) 29.66-29.86 / 29.70-29.79 us on one row
// per CTA of 96 threads against 30.11-30.21 on two rows per CTA of 192: the two rows' warps no longer wait
// for each other at the barrier, nor the CTA's exit for the later row. N = 1536 / 3072 (64- / 96-lane
// teams) read the same either way, and so do the tile kernel's 4096-wide rows (128-lane teams), which keep
// two per CTA. Build switch for the A/B row (`ours_row_tile_shared`): 0 = the rows shared, as before.
#ifndef HPC_FP8_ROW_TILE_ONE_ROW
#define HPC_FP8_ROW_TILE_ONE_ROW 1
#endif
// ... but only from teams of 3 warps (96 lanes): rows of 2-warp teams (N = 1536 bf16 on 64 lanes x 3 vectors,
// 3 KB) share 256-thread CTAs, 4 rows each. Why (twenty-sixth session, H200, bf16 per-token, written flush, two
// rounds, fp8_quant_row_tile_shared_ab_9b020de.*): one 3 KB row per 64-thread CTA streamed at 90 % of the copy
// rate (256 MB: 108.6 us, 86.8 %; every other width 101-103 %, fp8_quant_fixed_cost_9b020de.*), so the SMs
// turned CTAs over faster than they could launch them; 4 rows per CTA read 98.2 us at 256 MB and 29.41 against
// 29.90 us at 64 MB. N = 3072 (96 lanes) read 0.1-0.3 us faster shared too, N = 2880 (96 lanes) 0.15-0.35 slower,
// so teams of 96 keep a CTA of their own. Build switch for the A/B row (`ours_row_tile_one_row_64`): 64 = every
// multi-warp team on its own CTA, as before.
#ifndef HPC_FP8_ROW_TILE_OWN_CTA_MIN_TEAM
#define HPC_FP8_ROW_TILE_OWN_CTA_MIN_TEAM 96
#endif
// Threads per CTA of the row tile kernel's covers (segments x team: group-128 bf16 16 segments of 4 lanes) and of the
// odd-row kernel's (32 segments). Why (twenty-sixth session, H200, group-128 bf16, written flush, two rounds in one
// process, fp8_quant_cover_threads_ab_70b01d9.*): the covers paid ~1.5 us more fixed cost per cold call than the
// other shapes at the same streaming rate (FP8_NOTES.md, "Fixed cost and streaming rate"); on 256-thread CTAs
// (64 segments) N = 2880 read 31.33-31.39 / 101.7-101.8 us at 64 / 256 MB, on 128 threads 30.91-31.01 / 100.8-100.9,
// on 64 threads 30.69-30.82 / 100.4-100.6; odd rows (N = 4095) 36.06-36.22 / 119.1-119.5 on 256, 35.23-35.26 /
// 117.3-117.7 on 128, 35.36-35.42 / 118.4-118.5 on 64. Build switches for the A/B row (`ours_cover_threads_256`):
// 256 both, as before.
#ifndef HPC_FP8_COVER_CTA_THREADS
#define HPC_FP8_COVER_CTA_THREADS 64
#endif
#ifndef HPC_FP8_ODD_COVER_CTA_THREADS
#define HPC_FP8_ODD_COVER_CTA_THREADS 128
#endif
// Dynamic-scale tile kernels: a thread whose vectors are all finite takes its amax from the raw magnitudes
// and stores its codes without the NaN fix-up (MagnitudeMax); one that saw an Inf or NaN counts again
// element by element (ElementAmax) and fixes its codes. Build switch for the A/B row (`ours_nan_fixup`):
// 0 = AmaxAcc and the fix-up everywhere, as before.
#ifndef HPC_FP8_FINITE_FAST_PATH
#define HPC_FP8_FINITE_FAST_PATH 1
#endif
// Why (H200, 64 MB bf16 per-token, written flush, three interleaved rounds in each of two processes;
// fp8_quant_finite_fast_path_ab_380e378.* and _edc8e5e.*): the row tile kernels 0.2-0.6 us faster (N = 1536
// 30.95 -> 30.76, 7168 30.14 -> 29.72, 28672 32.30 -> 31.70 us), the tile kernel (N = 4096) -0.1, the rest
// within 0.1. The column tile kernel (group-128 row- and column-major, per-head) read 0.2-0.3 us slower with
// it in both processes (30.00-30.17 -> 30.29-30.37 us) and keeps the fix-up: HPC_FP8_COL_FINITE_FAST_PATH
// (A/B row `ours_col_finite`: 1). Like the division-free prologue (twenty-fourth session), fewer instructions
// before its stores made that kernel slower; why is not known (FP8_NOTES.md).
#ifndef HPC_FP8_COL_FINITE_FAST_PATH
#define HPC_FP8_COL_FINITE_FAST_PATH 0
#endif
// Three vectors per lane for one-segment rows of 3 x (team) vectors (row_tile_three), compiled for
// HPC_FP8_ROW3_MIN_BLOCKS CTAs per SM. Build switch for the A/B row (`ours_row_tile_four`): 0 = 4 per lane
// with the last slots empty, as before.
#ifndef HPC_FP8_ROW_TILE_THREE
#define HPC_FP8_ROW_TILE_THREE 1
#endif
// One-segment rows of 1025-1792 vectors with 6 / 7 vectors per lane on up to 256 lanes (4 CTAs per SM) instead
// of 8 on 129-224 lanes (3 CTAs per SM): N = 14336 bf16 (1792 vectors) 256 lanes x 7, where 224 x 8 held 86 KB per
// SM in flight and 256 x 7 x 4 CTAs hold 114 KB. Build switch for the A/B row (`ours_long_row_eight`): 0 = 8 per
// lane, as before.
#ifndef HPC_FP8_LONG_ROW_FULL_TEAMS
#define HPC_FP8_LONG_ROW_FULL_TEAMS 1
#endif
// 1: covers whose segments end on vector boundaries take a kernel without the partial-vector code
// (row_tile_partial_vectors). Why 1 (twenty-sixth session, H200, run of 1b62255, 64 MB bf16 group-128 N = 2880,
// written flush, three rounds in one process, every row bitwise): 31.25-31.46 against 32.10-32.24 us per cold
// call for the partial-vector kernel (A/B row `ours_cover_partial` = 0). Its first form was much slower (37.8
// against 32.3 us; ncu of 220cc1e: 14.8 against 7.6 cycles of L1TEX scoreboard stall per instruction): without
// the partial-vector branches ptxas put each vector's amax between its load and the next vector's, so a thread's 4
// loads left one after another (tools/sass_load_order.py flags it: 1-2 of 4 loads before the first use). The kept
// form computes every address first and issues 4 of 4 (quant_tile).
#ifndef HPC_FP8_COVER_WHOLE_VECTORS
#define HPC_FP8_COVER_WHOLE_VECTORS 1
#endif
// Rows of 1793-3584 vectors on 512-thread CTAs, 7 vectors per lane (fp8_quant_wide_row_kernel). Why 1 (twenty-sixth
// session, H200, run of 1b62255, 64 MB bf16 per-token N = 28672, as above): 30.30-30.34 against 31.66-31.86 us
// for 224 lanes x 16 vectors (A/B row `ours_long_row_sixteen` = 0).
#ifndef HPC_FP8_WIDE_LONG_ROWS
#define HPC_FP8_WIDE_LONG_ROWS 1
#endif
#ifndef HPC_FP8_ROW3_MIN_BLOCKS
#define HPC_FP8_ROW3_MIN_BLOCKS 6
#endif

// kDynamic: one scale per segment from its amax (p.scale_source == kScaleDynamic); else the
// per-tensor scale (static, or the amax pass's partials). kRagged: segments of p.seg_vecs vectors,
// at most VPT x team (fp8_quant_row_tile_kernel below), so a lane's last vectors may lie past its
// segment's end; otherwise exactly VPT x team (a power of two). VPT: vectors per lane (4, or 8 / 16
// for the long rows of fp8_quant_long_row_kernel). kCover (with kRagged): segments of unequal length
// (rows ending in a shorter one), so each team locates its own; segment starts are 16-byte aligned
// (p.vectorized without p.peel), and only a segment's last vector may hold elements of the next one
// (out of the amax, not stored: a byte-exact store of the segment's part of the shared word).
// Odd rows (segment starts misaligned) take quant_odd_rows (fp8_quant_odd_rows.cuh) instead.
template <int DT, int VEC, bool kDynamic, bool kRagged, int VPT = kBulkVecPerThread, bool kCover = false,
          bool kPartial = true>
__device__ __forceinline__ void quant_tile(const QuantParams& p, uint32_t* red) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  // Per-tensor dynamic (p.reverse): CTAs start at the last tile, which the amax pass read last (CTAs
  // launch in index order, so the tensor's end is quantised while it is still in the L2).
  const BulkTile t = bulk_tile(p, p.reverse ? p.num_tiles - 1 - blockIdx.x : blockIdx.x);
  const int team = p.team;  // seg_vectors / 4, a power of two in [1, 256]; kRagged: see row_tile_team
  const int seg_local = threadIdx.x / team, lane = kRagged ? threadIdx.x - seg_local * team : threadIdx.x & (team - 1);
  const int seg_vecs = kRagged ? p.seg_vecs : team * VPT;
  const bool active = seg_local < t.count;
  // The tile's segments follow each other in x and q from its first one. A dense tensor (one run:
  // every row, head and token back to back in both) puts segment s at s * seg_len in both, so the
  // loads need no index division (locate's two, on the path to the first load of every CTA).
  const raw* x;
  uint8_t* q;
  int len = 0;  // kCover: this team's segment's elements, from (x, q)
  Segment sg{};  // kCover: where it lives (its row and group give the scale's place)
  if constexpr (kCover) {
    sg = locate_cover(p, uint32_t(t.s0) + uint32_t(active ? seg_local : 0));
    len = int(sg.len);
    x = static_cast<const raw*>(p.x) + sg.x_off;
    q = p.q + sg.q_off;
  } else {
    const bool dense = p.tiles_per_run == p.num_tiles;
    int64_t x_off = t.s0 * p.seg_len, q_off = x_off;
    if (!dense) {
      const Segment first = locate(p, t.s0);
      x_off = first.x_off;
      q_off = first.q_off;
    }
    x = static_cast<const raw*>(p.x) + x_off;
    q = p.q + q_off;
  }

  constexpr int NS = VPT;
  P pk[NS];
  int vidx[NS];
  bool live[NS];
  if constexpr (kCover && !kPartial) {
    // Every address before the first load: computed per load, each one's constant-bank reload of x gave ptxas a
    // gap that it filled with the previous vector's amax, and the loads left one after another
    // (tools/sass_load_order.py: 1-2 of 4 first; 4 of 4 this way). The whole-vector covers only: the same form for
    // every kernel changes the measured kernels' SASS (they issue all loads first already).
    const raw* at[NS];
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      vidx[j] = lane + team * j;
      live[j] = active && vidx[j] * VEC < len;
      at[j] = x + int64_t(vidx[j]) * VEC;
    }
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      if (live[j]) pk[j].load(at[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      if constexpr (kCover) {
        vidx[j] = lane + team * j;  // vector of the segment's cover
        live[j] = active && vidx[j] * VEC < len;
        if (live[j]) pk[j].load(x + int64_t(vidx[j]) * VEC);
      } else {
        vidx[j] = seg_local * seg_vecs + lane + team * j;
        live[j] = active && (!kRagged || lane + team * j < seg_vecs);
        if (live[j]) pk[j].load(x + int64_t(vidx[j]) * VEC);
      }
    }
  }
  // kCover: the elements [0, end) of cover vector c are the segment's (end < VEC only for its last).
  // kPartial false: every segment ends on a vector boundary (p.seg_len and p.row_len multiples of VEC), so no
  // cover vector is partial and the masked amax and byte-exact stores drop out.
  auto cover_end = [&](int c) {
    if constexpr (!kPartial) return VEC;
    return min(VEC, len - c * VEC);
  };

  // The thread's live vectors into an amax accumulator (AmaxAcc, MagnitudeMax or ElementAmax).
  auto accumulate = [&](auto& acc) {
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      if (!live[j]) continue;
      if constexpr (kCover) {
        const int end = cover_end(vidx[j]);
        if (end < VEC) {
          P part = pk[j];
          part.keep_range(0, end);
          acc.add(part);
          continue;
        }
      }
      acc.add(pk[j]);
    }
  };
  float scale;
  bool finite = false;  // every live element finite: the codes need no NaN fix-up
  if constexpr (kDynamic) {
    uint32_t m = 0u;
    if constexpr (HPC_FP8_FINITE_FAST_PATH) {
      m = finite_fast_amax_bits<DT, VEC>(accumulate, finite);
      if (!active) m = 0u;
    } else if constexpr (kRagged) {
      AmaxAcc<DT, VEC> acc;
      accumulate(acc);
      m = active ? acc.bits() : 0u;
    } else {
      m = active ? amax_bits(pk) : 0u;
    }
    // red[] is unused before this point: one call per CTA, no barrier in front
    scale = scale_from_amax_bits(team_max<false>(m, team, red), p.ue8m0);
  } else {
    scale = per_tensor_scale(p, red);
  }
  const float inv = div_rn(1.0f, scale);
  auto store_all = [&](auto may_hold_nan) {
    constexpr bool kNaN = decltype(may_hold_nan)::value;
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      if (!live[j]) continue;
      if constexpr (kCover) {
        uint8_t* qv = q + int64_t(vidx[j]) * VEC;
        const int end = cover_end(vidx[j]);
        if (end < VEC) {  // a word shared with the next segment: our bytes only
          uint32_t w[VEC / 4];
          pk[j].template quantised_words<kNaN>(inv, w);
          P::store_words_range(qv, w, 0, end);
        } else {
          pk[j].template store_quantised<kNaN>(qv, inv);
        }
      } else {
        pk[j].template store_quantised<kNaN>(q + int64_t(vidx[j]) * VEC, inv);
      }
    }
  };
  if (finite) {
    store_all(std::false_type{});
  } else {
    store_all(std::true_type{});
  }
  // After the stores, when the tile's vectors are dead (the scale's index arithmetic then costs no
  // registers of its own; before the stores the kernel spilled at 48).
  if constexpr (kDynamic) {
    if constexpr (kCover) {
      if (active && lane == 0) write_scale(p, sg.row, sg.g, scale);
    } else {
      if (active && lane == 0) write_segment_scale(p, t.s0 + seg_local, scale);
    }
  }
}

template <int DT, int VEC, bool kDynamic>
__global__ void __launch_bounds__(kTileThreads, HPC_FP8_TILE_MIN_BLOCKS) fp8_quant_tile_kernel(const QuantParams p) {
  __shared__ uint32_t red[kTileThreads / 32];
  quant_tile<DT, VEC, kDynamic, false>(p, red);
}

// One segment per row (per-token, per-head) of any number of vectors up to 1024: rows the tile kernel
// does not take because their vector count is no power of two (hidden sizes 2880, 5120, 7168 bf16:
// 360, 640, 896 vectors). A team is the vectors / 4 lanes rounded up to a power of two up to 32, else
// to whole warps; the CTA holds as many teams as fit 256 threads, one when they span several warps
// (HPC_FP8_ROW_TILE_ONE_ROW; 2880: 96 threads, 7168: 224).
// Why: those rows took the register kernels, H200, 64 MB bf16 per-token, written flush: 33.5 /
// 35.3 / 34.0 us (70.5 / 66.9 / 69.3 % of 4.27 TB/s) at N = 2880 / 5120 / 7168, where the tile
// kernel reads N = 4096 at 29.1-29.7 us (FP8_HISTORY.md, eighteenth session).
// kCover: rows of several segments ending in a shorter one, each segment located by its team
// (quant_tile).
// VPT: vectors per lane, 4, or 3 for the one-segment rows row_tile_three picks. kPartial (covers): a segment
// may end inside a vector (row_tile_partial_vectors).
template <int DT, int VEC, bool kCover, int VPT = kBulkVecPerThread, bool kPartial = true>
__global__ void __launch_bounds__(kTileThreads, VPT == 3 ? HPC_FP8_ROW3_MIN_BLOCKS : HPC_FP8_TILE_MIN_BLOCKS)
    fp8_quant_row_tile_kernel(const QuantParams p) {
  __shared__ uint32_t red[kTileThreads / 32];
  quant_tile<DT, VEC, true, true, VPT, kCover, kPartial>(p, red);
}

// Rows of 1025 to 4096 vectors (bf16 N = 8200..32768: MLP intermediates such as 14336 and 28672 that
// per-token quantisation sees before a down projection), one row per CTA with 8 (up to 2048 vectors)
// or 16 vectors per lane: the register kernels read them at 63.5-70 % of 4.27 TB/s (64 MB bf16, H200,
// eighteenth session). A row split over a cluster of CTAs exchanging their amax through distributed
// shared memory was slower still (FP8_HISTORY.md).
template <int DT, int VEC, int VPT, bool kCover>
__global__ void __launch_bounds__(kTileThreads, VPT == 16 ? 2 : VPT == 8 ? 3 : 4)
    fp8_quant_long_row_kernel(const QuantParams p) {
  __shared__ uint32_t red[kTileThreads / 32];
  quant_tile<DT, VEC, true, true, VPT, kCover>(p, red);
}

// Rows of 1793-3584 vectors on one 512-thread CTA, 7 vectors per lane (HPC_FP8_WIDE_LONG_ROWS; 1.4 us faster at
// N = 28672, measured above). Why: N = 28672 bf16 (3584 vectors) took 224 lanes x 16 vectors at 128
// registers, 2 CTAs per SM (75 % at 64 MB per cold call, 85.5 % back to back); 512 lanes x 7 at 64 registers holds the
// same bytes per SM (2 CTAs) with twice the warps, as 256 x 7 did for N = 14336 (FP8_NOTES.md, twenty-fifth session).
constexpr int kWideRowThreads = 512;
template <int DT, int VEC>
__global__ void __launch_bounds__(kWideRowThreads, 2) fp8_quant_wide_row_kernel(const QuantParams p) {
  __shared__ uint32_t red[kWideRowThreads / 32];
  quant_tile<DT, VEC, true, true, 7, false>(p, red);
}

// Per-tensor static scale, contiguous tensor (p.rows == 1: the launcher made it one flat row).
// CTA b quantises vectors [b * 1024, (b + 1) * 1024): thread k vectors b * 1024 + k + 256 j; the
// elements after the last whole vector go to the last CTA.
constexpr int kFlatVecs = kBulkVecPerThread;
template <int DT, int VEC>
__global__ void __launch_bounds__(kTileThreads, HPC_FP8_FLAT_MIN_BLOCKS) fp8_quant_flat_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  __shared__ uint32_t red[kTileThreads / 32];
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const raw* x = static_cast<const raw*>(p.x);
  const int64_t n = p.row_len, nvec = n / VEC;
  const int64_t v0 = int64_t(blockIdx.x) * (kTileThreads * kFlatVecs) + threadIdx.x;
  P pk[kFlatVecs];
#pragma unroll
  for (int j = 0; j < kFlatVecs; ++j) {
    if (v0 + j * kTileThreads < nvec) pk[j].load(x + (v0 + j * kTileThreads) * VEC);
  }
  const float inv = div_rn(1.0f, per_tensor_scale(p, red));  // the scale's load overlaps x's
#pragma unroll
  for (int j = 0; j < kFlatVecs; ++j) {
    const int64_t v = v0 + j * kTileThreads;
    if (v < nvec) pk[j].store_quantised(p.q + v * VEC, inv);
  }
  if (blockIdx.x == gridDim.x - 1) {
    for (int64_t e = nvec * VEC + threadIdx.x; e < n; e += kTileThreads) store_quantised_element<DT>(x + e, p.q + e, 0, inv);
  }
}

// Group scales in 8-row blocks. With the tile kernel's tiles (whole rows: two 4096-wide bf16 rows
// per tile) every 32-byte sector of a column-major scale column ([M, G] with strides (1, pitch), the
// layout DeepGEMM's block-scaled GEMMs read) is written 4 bytes at a time by 4 CTAs at different
// times; H200, 64 MB bf16 group-128: 32.6 us, against 30.6-30.8 with the scale stores skipped
// (timing build). A column tile is kColTileRows rows x p.tile_segs segments (128 / seg_vectors of
// them: 16 KB), so a CTA owns whole 32-byte runs of every scale column it touches (column-major: 8
// rows of a group; row-major: 8 or more groups of a row); it stages its scales in shared memory and
// writes each run with consecutive threads, column padding rows as 0. Tiles in row-block-major
// order: neighbouring CTAs read neighbouring columns of the same 8 rows. Measured with column-major
// scales: 29.8 us (80.0 %), faster than row-major scales on the tile kernel (30.9). 2-D input (a
// dense [T, H, D] per-head input is one: row t, group h; as_col_tiles), segments of at most 128
// vectors, G a multiple of p.tile_segs.
constexpr int kColTileRows = 8;
template <int DT, int VEC>
__global__ void __launch_bounds__(kTileThreads, HPC_FP8_TILE_MIN_BLOCKS) fp8_quant_col_tile_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  __shared__ float staged[kTileThreads];  // one per segment of the tile (at most one per thread)
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  const int gpt = p.tile_segs;                      // segments per tile row, a power of two
  const uint32_t cbs = uint32_t(p.tiles_per_run);   // column blocks per row block
  const uint32_t rb = blockIdx.x / cbs, cb = blockIdx.x - rb * cbs;
  const int team = p.team;                          // <= 32: the amax reduction is shuffles only
  const int seg_local = threadIdx.x / team, lane = threadIdx.x & (team - 1);
  const int row_l = seg_local / gpt, g_l = seg_local & (gpt - 1);
  const int64_t row = int64_t(rb) * kColTileRows + row_l, g = int64_t(cb) * gpt + g_l;
  const bool active = row < p.rows;
  const int64_t col = g * p.seg_len;
  const raw* x = static_cast<const raw*>(p.x) + row * p.x_stride_t + col;
  uint8_t* q = p.q + row * p.q_stride_t + col;

  P pk[kBulkVecPerThread];
#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    if (active) pk[j].load(x + int64_t(lane + team * j) * VEC);
  }
  uint32_t m = 0u;
  bool finite = false;  // as in quant_tile: every element finite, no NaN fix-up
  if (active) {
    if constexpr (HPC_FP8_COL_FINITE_FAST_PATH) {
      m = finite_fast_amax_bits<DT, VEC>([&](auto& acc) {
#pragma unroll
        for (int j = 0; j < kBulkVecPerThread; ++j) acc.add(pk[j]);
      }, finite);
    } else {
      m = amax_bits(pk);
    }
  }
  for (int off = team >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));  // team <= 32
  const float scale = scale_from_amax_bits(m, p.ue8m0);
  const float inv = div_rn(1.0f, scale);
  if (active) {
    if (finite) {
#pragma unroll
      for (int j = 0; j < kBulkVecPerThread; ++j) {
        pk[j].template store_quantised<false>(q + int64_t(lane + team * j) * VEC, inv);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBulkVecPerThread; ++j) pk[j].store_quantised(q + int64_t(lane + team * j) * VEC, inv);
    }
  }
  if (lane == 0) staged[g_l * kColTileRows + row_l] = active ? scale : 0.0f;  // padding rows: 0
  __syncthreads();
  if (threadIdx.x < gpt * kColTileRows) {
    if (p.scale_stride_row == 1) {  // column-major: consecutive threads down a column
      const int gl = threadIdx.x / kColTileRows, rl = threadIdx.x % kColTileRows;
      const int64_t pitch = p.scale_stride_seg, r = int64_t(rb) * kColTileRows + rl, gc = int64_t(cb) * gpt + gl;
      if (r < pitch) p.scale[gc * pitch + r] = staged[threadIdx.x];
      // A caller's pitch beyond the last row block: the rest of the column's padding.
      const int64_t block_end = int64_t(rb + 1) * kColTileRows;
      if (rl == 0 && block_end >= p.rows && block_end < pitch) zero_scale_padding(p.scale, block_end, pitch, gc);
    } else {  // row-major: consecutive threads along a row
      const int rl = threadIdx.x / gpt, gl = threadIdx.x & (gpt - 1);
      const int64_t r = int64_t(rb) * kColTileRows + rl, gc = int64_t(cb) * gpt + gl;
      if (r < p.rows) p.scale[r * p.scale_stride_row + gc * p.scale_stride_seg] = staged[gl * kColTileRows + rl];
    }
  }
}

// Groups per column tile: 128 / seg_vectors (a full 16 KB tile) when G is a multiple of it. Column-major
// scales also take halves of it down to 2 groups (whole warps of lanes) when G is not (N = 1536 bf16,
// 12 groups of 128: 4 per tile, an 8 KB tile): their 32-byte runs are 8 rows of one group either way,
// where the tile kernel would write each sector 4 bytes at a time from several CTAs (72 % at 64 MB,
// eighteenth session). Row-major scales keep the tile kernel then. 0: no column tiles.
inline int col_tile_groups(const QuantParams& g, int64_t sv) {
  const int64_t team = sv / kBulkVecPerThread;
  int64_t gpt = kBulkTileVectors / kColTileRows / sv;
  if (g.segs_per_row % gpt == 0) return int(gpt);
  if (g.scale_stride_row != 1) return 0;  // row-major
  while (gpt > 2 && g.segs_per_row % gpt != 0) gpt /= 2;
  if (g.segs_per_row % gpt != 0 || (gpt * kColTileRows * team) % 32 != 0) return 0;
  return int(gpt);
}

// Whether the column-tile kernel serves p (dynamic group scales in 8-row blocks; bulk_applicable(p)
// holds), after turning a dense per-head input [T, H, D] into its 2-D form (row t, group h of D, scale
// [T, H] row-major) in place. False leaves p as it was.
inline bool as_col_tiles(QuantParams& p, int vec) {
  if (p.scale_source != kScaleDynamic || p.per_tensor_dynamic) return false;
  QuantParams g = p;
  if (g.heads > 1) {  // per-head (segment = x[t, h, :]): heads back to back in x and q
    if (g.segs_per_row != 1 || g.x_stride_h != g.row_len || g.q_stride_h != g.row_len) return false;
    g.rows = p.rows / p.heads;
    g.segs_per_row = p.heads;
    g.row_len = p.heads * p.row_len;
    g.heads = 1;
    g.scale_stride_row = p.heads;  // scale index t * H + h
    g.scale_stride_seg = 1;
  }
  if (g.segs_per_row < 2) return false;
  const bool col_major = g.scale_stride_row == 1 && g.scale_stride_seg >= g.rows;
  const bool row_major = g.scale_stride_seg == 1 && g.scale_stride_row >= g.segs_per_row;
  if (!col_major && !row_major) return false;
  const int64_t sv = g.seg_len / vec;
  if (sv > kBulkTileVectors / kColTileRows) return false;
  if (col_tile_groups(g, sv) == 0) return false;
  p = g;
  return true;
}

inline void set_col_tile_geometry(QuantParams& p, int vec) {
  const int64_t sv = p.seg_len / vec;
  p.team = int(sv / kBulkVecPerThread);
  p.tile_segs = col_tile_groups(p, sv);
  p.tiles_per_run = p.segs_per_row / p.tile_segs;
  p.num_tiles = (p.rows + kColTileRows - 1) / kColTileRows * p.tiles_per_run;
  p.reverse = false;
}

// Lanes per row for the row tile kernel: vectors / 4, rounded up to a power of two up to 32 (the
// team's shuffle reduction), else to whole warps (team_max through shared memory).
inline int row_tile_team(int64_t seg_vecs, int vpt = kBulkVecPerThread) {
  int64_t team = (seg_vecs + vpt - 1) / vpt;
  if (team <= 32) {
    int64_t t = 1;
    while (t < team) t *= 2;
    return int(t);
  }
  return int((team + 31) / 32 * 32);
}

// Whether a one-segment row of sv vectors takes 3 vectors per lane: sv is exactly 3 teams' worth of lanes
// (row_tile_team) and 4 per lane would leave slots empty, e.g. N = 1536 bf16 (192 vectors: 64 lanes x 3,
// where 4 per lane round 48 lanes up to 64 and a quarter of the slots stay empty), 768, 384 and 96 (per-head
// rows of 12 vectors). Why: the empty slots still hold registers, so fewer loads are in flight per SM; with
// 3 per lane the kernel takes fewer registers and more CTAs per SM (HPC_FP8_ROW3_MIN_BLOCKS).
inline bool row_tile_three(int64_t sv) {
  if (!HPC_FP8_ROW_TILE_THREE || sv > kBulkTileVectors) return false;
  return int64_t(row_tile_team(sv, 3)) * 3 == sv && int64_t(row_tile_team(sv, 4)) * 4 != sv;
}

// Vectors per lane of the row kernels: 4 for rows of one tile (fp8_quant_row_tile_kernel; 3 for one-segment
// rows that row_tile_three picks), 8 / 16 for longer ones (fp8_quant_long_row_kernel; one-segment rows of
// 1025-1792 vectors 6 / 7, HPC_FP8_LONG_ROW_FULL_TEAMS). one_segment: the rows are single segments (not
// covers, not odd rows).
inline int row_tile_vpt(int64_t seg_vecs, bool one_segment) {
  if (one_segment && row_tile_three(seg_vecs)) return 3;
  if (seg_vecs <= kBulkTileVectors) return kBulkVecPerThread;
  if (one_segment && HPC_FP8_LONG_ROW_FULL_TEAMS && seg_vecs <= 7 * kTileThreads) {
    return seg_vecs <= 6 * kTileThreads ? 6 : 7;
  }
  // fp8_quant_wide_row_kernel: 7 per lane on more than 256 lanes (row_tile_team(seg_vecs, 7) > kTileThreads).
  if (one_segment && HPC_FP8_WIDE_LONG_ROWS && seg_vecs <= 7 * kWideRowThreads) return 7;
  return seg_vecs <= 2 * kBulkTileVectors ? 8 : 16;
}

// Whether the row kernels read p's segments as covers (quant_tile's kCover): rows of several segments
// that the tile kernels did not take (a shorter last one, lengths that are no power-of-two number of
// vectors, and odd rows: p.peel, quant_odd_rows). Odd rows of one segment (per-token N = 4095) keep
// the register kernels: as one cover per row they read slower (H200, 64 MB bf16: 35.0 us against 33.8;
// run of 8cdeaa6, where odd group rows on 8-lane teams also lost, 57.0 against 54.4, before the odd-row
// kernel's extra slot kept the 4-lane teams).
inline bool row_tile_covers(const QuantParams& p) { return p.segs_per_row > 1; }

// Whether a cover's segments may end inside a vector (its last vector then partial: masked amax, byte-exact
// stores). With HPC_FP8_COVER_WHOLE_VECTORS (the default) not when the group length and the
// row length are whole vectors (N = 2880 bf16, group 128: the shorter last group is 8 whole vectors), whose covers
// then take the kernel without that code.
inline bool row_tile_partial_vectors(const QuantParams& p, int vec) {
  return !HPC_FP8_COVER_WHOLE_VECTORS || p.seg_len % vec != 0 || p.row_len % vec != 0;
}

// QuantParams' segment divider for d = segs_per_row in [1, 2^31): s / d == (s * mul) >> shift for every
// s < 2^31, with shift = 31 + ceil(log2 d) and mul = ceil(2^shift / d) < 2^32. Why exact: mul * d =
// 2^shift + e with 0 <= e < d <= 2^(shift - 31), so s * e < 2^shift and the product's excess over
// s / d * 2^shift never reaches the next multiple of 2^shift / d (Granlund and Montgomery, 1994).
inline void set_segment_divider(QuantParams& p) {
  const uint64_t d = uint64_t(p.segs_per_row);
  int log2_ceil = 0;
  while ((uint64_t(1) << log2_ceil) < d) ++log2_ceil;
  const int shift = 31 + log2_ceil;
  p.seg_div_mul = uint32_t(((uint64_t(1) << shift) + d - 1) / d);
  p.seg_div_shift = shift;
}

// Whether the row tile kernel serves p (dynamic scales, 16-byte aligned rows, segments of 4 to 4096
// vectors: one per row, or several read as covers, row_tile_covers; bulk_applicable(p) does not hold),
// with its geometry set (p.seg_vecs: the most vectors a segment covers). False: p unchanged.
inline bool prepare_row_tiles(QuantParams& p, int vec) {
  if (!p.bulk || vec == 1 || p.scale_source != kScaleDynamic || p.per_tensor_dynamic) return false;
  const bool cover = row_tile_covers(p);
  if (p.peel && !cover) return false;
  if (!cover && p.seg_len % vec != 0) return false;
  // Vectors a segment covers (16-byte aligned rows: its own, the last one possibly partial; odd rows
  // one more, in lane 0's extra slot).
  const int64_t sv = (p.seg_len + vec - 1) / vec;
  if (sv < kBulkVecPerThread || sv > 4 * kBulkTileVectors) return false;
  if (p.peel && row_tile_vpt(sv, false) != kBulkVecPerThread) return false;  // quant_odd_rows: 4 vectors per lane
  QuantParams g = p;
  g.team = row_tile_team(sv, row_tile_vpt(sv, !cover));
  g.seg_vecs = int(sv);
  // Segments per CTA: as many teams as the CTA's threads hold, at least one (a team wider than them, e.g. a cover of
  // a 4096-element group on 128 lanes, gets a CTA of its own).
  const int cta_threads =
      !cover ? kTileThreads : p.peel ? HPC_FP8_ODD_COVER_CTA_THREADS : HPC_FP8_COVER_CTA_THREADS;
  const int64_t per_tile =
      (HPC_FP8_ROW_TILE_ONE_ROW && !cover && g.team >= HPC_FP8_ROW_TILE_OWN_CTA_MIN_TEAM) || g.team >= cta_threads
          ? 1
          : cta_threads / g.team;
  if (cover) {  // each team locates its segment (locate_cover: indices below 2^31): one run of every segment
    const int64_t nseg = g.rows * g.segs_per_row;
    if (nseg >= (int64_t(1) << 31)) return false;
    set_segment_divider(g);
    g.run_segs = nseg;
    g.tile_segs = int(per_tile < nseg ? per_tile : nseg);
    g.tiles_per_run = g.num_tiles = (nseg + g.tile_segs - 1) / g.tile_segs;
    g.reverse = false;
  } else {
    set_tile_runs(g, per_tile);
  }
  p = g;
  return true;
}

enum class TileKernel { kNone, kTiles, kFlat, kColumns, kRows, kOddGroupRows };

// Which short-lived kernel serves p (the caller checked p.vectorized), with p's geometry set for it
// (grid size in p.num_tiles) so the launch derives nothing again. kNone (p unchanged): p.tile off, the
// ring kernel does not apply, or more CTAs than one grid dimension holds (the ring kernel then serves).
inline TileKernel prepare_tile_kernel(QuantParams& p, int vec) {
  if (!p.tile || !p.bulk || p.rows * p.segs_per_row == 0) return TileKernel::kNone;
  constexpr int64_t kMaxGrid = 0x7fffffff;
  if (p.rows == 1 && !p.peel && p.scale_source == kScaleStatic && !p.per_tensor_dynamic) {
    const int64_t per_cta = int64_t(kTileThreads) * kFlatVecs;
    const int64_t ctas = (p.row_len / vec + per_cta - 1) / per_cta;
    if (ctas > kMaxGrid) return TileKernel::kNone;
    p.num_tiles = ctas > 0 ? ctas : 1;  // a tensor of fewer elements than one vector: the scalar tail
    return TileKernel::kFlat;
  }
  if (!bulk_applicable(p, vec)) {
    QuantParams r = p;
    if (!prepare_row_tiles(r, vec) || r.num_tiles > kMaxGrid) return TileKernel::kNone;
    const bool one_row = odd_group_rows_applicable(r, vec);  // odd group-128 rows of 2-byte inputs: one row per CTA
    if (one_row) set_odd_group_row_geometry(r);
    p = r;
    return one_row ? TileKernel::kOddGroupRows : TileKernel::kRows;
  }
  QuantParams g = p;
  if (as_col_tiles(g, vec)) {
    set_col_tile_geometry(g, vec);
    if (g.num_tiles <= kMaxGrid) {
      p = g;
      return TileKernel::kColumns;
    }
    g = p;
  }
  set_tile_geometry(g, vec);
  if (g.num_tiles > kMaxGrid) return TileKernel::kNone;
  p = g;
  return TileKernel::kTiles;
}

// Threads per CTA of the kernel prepare_tile_kernel chose for p (host code: the launches below and the CPU dispatch
// probe's geometry check use it). Rows: whole warps of teams, so a short last run (or a small tensor) still fills
// each warp's shuffles; columns: kColTileRows rows of the tile's teams.
inline unsigned tile_kernel_threads(const QuantParams& p, TileKernel k) {
  if (k == TileKernel::kRows || k == TileKernel::kOddGroupRows) {
    return unsigned((int64_t(p.tile_segs) * p.team + 31) / 32 * 32);
  }
  if (k == TileKernel::kColumns) return unsigned(p.tile_segs * kColTileRows * p.team);  // 256 for a full tile
  return kTileThreads;
}

// The launches of a p that prepare_tile_kernel set up for them.
template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_flat(const QuantParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(fp8_quant_flat_kernel<DT, VEC>, dim3(unsigned(p.num_tiles)), dim3(kTileThreads), 0, stream,
                            pdl, p);
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_tile(QuantParams p, cudaStream_t stream, bool pdl) {
  if (p.per_tensor_dynamic) {
    cudaError_t e = launch_amax_pass<DT, VEC>(p, stream, pdl);  // p now reads the partials, reversed
    if (e != cudaSuccess) return e;
  }
  const auto kernel = p.scale_source == kScaleDynamic ? fp8_quant_tile_kernel<DT, VEC, true>
                                                      : fp8_quant_tile_kernel<DT, VEC, false>;
  return hpc::launch_kernel(kernel, dim3(unsigned(p.num_tiles)), dim3(kTileThreads), 0, stream, pdl, p);
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_row_tile(const QuantParams& p, cudaStream_t stream, bool pdl) {
  const unsigned threads = tile_kernel_threads(p, TileKernel::kRows);
  const bool cover = row_tile_covers(p);
  const int vpt = row_tile_vpt(p.seg_vecs, !cover && !p.peel);
  void (*kernel)(const QuantParams);
  if (p.peel) {  // prepare_row_tiles took odd rows as covers of 4 vectors per lane only
    kernel = fp8_quant_odd_row_tile_kernel<DT, VEC>;
  } else if (vpt == 3) {
    kernel = fp8_quant_row_tile_kernel<DT, VEC, false, 3>;
  } else if (vpt == 6) {
    kernel = fp8_quant_long_row_kernel<DT, VEC, 6, false>;
  } else if (vpt == 7) {
    kernel = fp8_quant_long_row_kernel<DT, VEC, 7, false>;
    if constexpr (HPC_FP8_WIDE_LONG_ROWS) {  // switched off (A/B row): not even compiled
      if (p.team > kTileThreads) kernel = fp8_quant_wide_row_kernel<DT, VEC>;
    }
  } else if (vpt == 16) {
    kernel = cover ? fp8_quant_long_row_kernel<DT, VEC, 16, true> : fp8_quant_long_row_kernel<DT, VEC, 16, false>;
  } else if (vpt == 8) {
    kernel = cover ? fp8_quant_long_row_kernel<DT, VEC, 8, true> : fp8_quant_long_row_kernel<DT, VEC, 8, false>;
  } else if (cover) {
    kernel = fp8_quant_row_tile_kernel<DT, VEC, true>;
    if constexpr (HPC_FP8_COVER_WHOLE_VECTORS) {  // switched off (A/B row): not even compiled
      if (!row_tile_partial_vectors(p, VEC)) kernel = fp8_quant_row_tile_kernel<DT, VEC, true, kBulkVecPerThread, false>;
    }
  } else {
    kernel = fp8_quant_row_tile_kernel<DT, VEC, false>;
  }
  return hpc::launch_kernel(kernel, dim3(unsigned(p.num_tiles)), dim3(threads), 0, stream, pdl, p);
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_odd_group_rows(const QuantParams& p, cudaStream_t stream, bool pdl) {
  if constexpr (VEC == 8 && DT != kFP32) {  // (odd_group_rows_applicable: 2-byte inputs only)
    return hpc::launch_kernel(fp8_quant_odd_group_row_kernel<DT>, dim3(unsigned(p.num_tiles)),
                              dim3(tile_kernel_threads(p, TileKernel::kOddGroupRows)), 0, stream, pdl, p);
  } else {
    return cudaErrorInvalidValue;
  }
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_col_tile(const QuantParams& p, cudaStream_t stream, bool pdl) {
  const unsigned threads = tile_kernel_threads(p, TileKernel::kColumns);
  return hpc::launch_kernel(fp8_quant_col_tile_kernel<DT, VEC>, dim3(unsigned(p.num_tiles)), dim3(threads), 0, stream,
                            pdl, p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
