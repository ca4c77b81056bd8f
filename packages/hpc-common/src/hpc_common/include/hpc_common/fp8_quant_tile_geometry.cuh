// Tile geometry shared by the short-lived-CTA kernels (fp8_quant_tile.cuh): 16 KB tiles of whole
// segments (256 threads x 4 16-byte vectors), grouped into runs of segments that follow each other
// with no gap in x and q, and the scale stores of a segment. A team of seg_vectors / 4 lanes owns a
// segment (lane l holds vectors l + team * j).
#pragma once

#include "hpc_common/fp8_quant.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kBulkThreads = 256;
constexpr int kBulkVecPerThread = 4;
constexpr int kBulkTileVectors = kBulkThreads * kBulkVecPerThread;  // 1024 x 16 B = 16 KB
// Column-major group scales: zero the padding rows [rows, pitch) of column g (out of line: one
// thread per column runs it, on the CTA of the last row).
__device__ __noinline__ void zero_scale_padding(float* scale, int64_t rows, int64_t pitch, int64_t g) {
  for (int64_t r = rows; r < pitch; ++r) scale[r + g * pitch] = 0.0f;
}

// Dynamic scale of segment g of row `row`; the last row of a column-major layout also zeroes the
// padding rows of its column.
__device__ __forceinline__ void write_scale(const QuantParams& p, int64_t row, int64_t g, float scale) {
  p.scale[row * p.scale_stride_row + g * p.scale_stride_seg] = scale;
  if (p.scale_stride_row == 1 && row == p.rows - 1) zero_scale_padding(p.scale, p.rows, p.scale_stride_seg, g);
}

// The same for segment sg (flat index).
__device__ __forceinline__ void write_segment_scale(const QuantParams& p, int64_t sg, float scale) {
  const int64_t row = div_index(sg, p.segs_per_row);
  write_scale(p, row, sg - row * p.segs_per_row, scale);
}

// Tile geometry. A "run" is a stretch of segments that follow each other with no gap in x and
// in q: the whole tensor when it is dense, else one token (all heads, when heads follow each
// other: a Q slice of a fused QKV buffer) or one row. Tiles are tile_segs consecutive segments
// of a run (the last tile of a run may be shorter).
struct BulkTile {
  int64_t s0;  // first segment (flat index r * segs_per_row + g, r = t * heads + h)
  int count;   // segments in the tile
};

// Every thread needs s0 and count; the common single-run case (dense tensor) takes no division.
__device__ __forceinline__ BulkTile bulk_tile(const QuantParams& p, int64_t j) {
  BulkTile t;
  const int64_t run = p.tiles_per_run == p.num_tiles ? 0 : div_index(j, p.tiles_per_run);
  const int64_t k0 = (j - run * p.tiles_per_run) * p.tile_segs;
  t.s0 = run * p.run_segs + k0;
  t.count = int(min(int64_t(p.tile_segs), p.run_segs - k0));
  return t;
}

// Whether p's segments cut into whole tiles: segments of a power-of-two number of vectors (4 to 1024),
// whole 16-byte multiples, rows of whole segments, 16-byte-aligned FP8 rows. Called after the caller
// checked `vectorized` (every segment start 16-byte aligned in x).
inline bool bulk_applicable(const QuantParams& p, int vec) {
  if (vec == 1 || p.peel || p.seg_len % 16 != 0 || p.row_len % p.seg_len != 0) return false;
  const int64_t sv = p.seg_len / vec;
  if (sv < kBulkVecPerThread || sv > kBulkTileVectors || (sv & (sv - 1)) != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.q) % 16 != 0 || p.q_stride_t % 16 != 0 || (p.heads > 1 && p.q_stride_h % 16 != 0))
    return false;
  return true;
}

// Runs and tiles of up to per_tile segments (see BulkTile).
inline void set_tile_runs(QuantParams& p, int64_t per_tile) {
  const int64_t nseg = p.rows * p.segs_per_row;
  // Longest gap-free run of segments: heads of a token follow each other when their stride is
  // the row length; tokens follow each other when theirs is heads * row_len.
  const bool heads_dense = p.heads == 1 || (p.x_stride_h == p.row_len && p.q_stride_h == p.row_len);
  const bool tokens_dense = p.rows == p.heads || (p.x_stride_t == p.heads * p.row_len &&
                                                  p.q_stride_t == p.heads * p.row_len);
  p.run_segs = heads_dense ? (tokens_dense ? nseg : p.heads * p.segs_per_row) : p.segs_per_row;
  p.tile_segs = int(per_tile < p.run_segs ? per_tile : p.run_segs);
  p.tiles_per_run = (p.run_segs + p.tile_segs - 1) / p.tile_segs;
  p.num_tiles = (nseg / p.run_segs) * p.tiles_per_run;
  p.reverse = false;
}

// The tile geometry of p (team, runs, tiles; see BulkTile).
inline void set_tile_geometry(QuantParams& p, int VEC) {
  const int64_t sv = p.seg_len / VEC;
  p.team = int(sv / kBulkVecPerThread);
  p.seg_vecs = int(sv);
  set_tile_runs(p, kBulkTileVectors / sv);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
