// Host side of the short-lived-CTA kernels (fp8_quant_tile.cuh): which kernel serves a shape
// (prepare_tile_kernel, with the geometry it launches with) and the launches. Pure functions of the
// parameters: tests/common/fp8_dispatch_probe.cu runs them on the CPU to check each shape's kernel.
#pragma once

#include "hpc_common/fp8_quant_tile.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

// Groups per column tile: 128 / seg_vectors (a full 16 KB tile) when G is a multiple of it. Column-major
// scales also take halves of it down to 2 groups (whole warps of lanes) when G is not (N = 1536 bf16,
// 12 groups of 128: 4 per tile, an 8 KB tile): their 32-byte runs are 8 rows of one group either way,
// where the tile kernel would write each sector 4 bytes at a time from several CTAs (72 % at 64 MB).
// Row-major scales keep the tile kernel then. 0: no column tiles.
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
// 3 per lane the kernel takes fewer registers and more CTAs per SM (kRow3MinBlocks).
inline bool row_tile_three(int64_t sv) {
  if (sv > kBulkTileVectors) return false;
  return int64_t(row_tile_team(sv, 3)) * 3 == sv && int64_t(row_tile_team(sv, 4)) * 4 != sv;
}

// Vectors per lane of the row kernels: 4 for rows of one tile (fp8_quant_row_tile_kernel; 3 for one-segment
// rows that row_tile_three picks), 8 / 16 for longer ones (fp8_quant_long_row_kernel; one-segment rows of
// 1025-1792 vectors 6 / 7, HPC_FP8_LONG_ROW_FULL_TEAMS). one_segment: the rows are single segments (not
// covers, not odd rows).
inline int row_tile_vpt(int64_t seg_vecs, bool one_segment) {
  if (one_segment && row_tile_three(seg_vecs)) return 3;
  if (seg_vecs <= kBulkTileVectors) return kBulkVecPerThread;
  if (one_segment && seg_vecs <= 7 * kTileThreads) {
    return seg_vecs <= 6 * kTileThreads ? 6 : 7;
  }
  // fp8_quant_wide_row_kernel: 7 per lane on more than 256 lanes (row_tile_team(seg_vecs, 7) > kTileThreads).
  if (one_segment && seg_vecs <= 7 * kWideRowThreads) return 7;
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
  return p.seg_len % vec != 0 || p.row_len % vec != 0;
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
  if (vec == 1 || p.scale_source != kScaleDynamic || p.per_tensor_dynamic) return false;
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
      !cover ? kTileThreads : p.peel ? kOddCoverCtaThreads : kCoverCtaThreads;
  const int64_t per_tile =
      (!cover && g.team >= kRowTileOwnCtaMinTeam) || g.team >= cta_threads
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
// (grid size in p.num_tiles) so the launch derives nothing again. kNone (p unchanged): an empty tensor,
// a shape no tile kernel takes, or more CTAs than one grid dimension holds (the register kernels then
// serve).
inline TileKernel prepare_tile_kernel(QuantParams& p, int vec) {
  if (p.rows * p.segs_per_row == 0) return TileKernel::kNone;
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
    if (p.team > kTileThreads) kernel = fp8_quant_wide_row_kernel<DT, VEC>;
  } else if (vpt == 16) {
    kernel = cover ? fp8_quant_long_row_kernel<DT, VEC, 16, true> : fp8_quant_long_row_kernel<DT, VEC, 16, false>;
  } else if (vpt == 8) {
    kernel = cover ? fp8_quant_long_row_kernel<DT, VEC, 8, true> : fp8_quant_long_row_kernel<DT, VEC, 8, false>;
  } else if (cover) {
    kernel = fp8_quant_row_tile_kernel<DT, VEC, true>;
    if (!row_tile_partial_vectors(p, VEC)) kernel = fp8_quant_row_tile_kernel<DT, VEC, true, kBulkVecPerThread, false>;
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
