// FP8 quantisation with short-lived CTAs: every shape whose segments cut into 16 KB tiles, and the
// aligned rows of 4-4096 vectors. Each CTA holds one tile (at most 16 KB: 256 threads x 4 vectors, or
// one long row) loaded straight into registers, quantised, stored, and gone; the next CTA takes its
// place (host side: fp8_quant_tile_launch.cuh):
//   fp8_quant_tile_kernel      tiles of whole segments (BulkTile, fp8_quant_tile_geometry.cuh; a team
//                              of seg_vectors / 4 lanes per segment): per-token rows, per-tensor scales
//                              on strided rows, group / per-head shapes the column tiles do not take;
//   fp8_quant_row_tile_kernel  the same body with ragged teams: rows of 4-1024
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
// Which shape takes which kernel: FP8_DESIGN.md (checked on the CPU by tests/common/test_fp8_dispatch.py).
//
// Why short-lived CTAs rather than a persistent grid streaming through a shared-memory ring of bulk
// copies (H200, written L2 flush, one cold call): torch.add of two 32 MB bf16 tensors into a third, the
// quantiser's byte mix (64 MB read, 32 MB written) in one plain elementwise kernel, read 28.9 us where
// the ring kernel's per-tensor static call read 30.2: the ring starts streaming ~1.5 us after entry
// (barrier init, one thread issuing the first copies) and each CTA then waits on its own ring, where
// short-lived CTAs have their loads out at once and the tail is one 16 KB tile. 64 MB bf16, us (ring ->
// these kernels): per-tensor static 30.5 -> 29.0, dynamic 48.5 -> 46.3,
// per-token 32.2 -> 29.8, group-128 32.4 -> 30.1 (column-major 33.1 -> 30.1), per-head 32.1 -> 30.0.
//
// Occupancy: the loads in flight per SM are the registers holding them. The tile kernels are
// compiled for 5 CTAs per SM (45-48 registers): capped at 40 the dynamic kernel spilled and read
// 31.1 us per-token, at 32 (no spill) 29.7-29.8 against 29.5-29.6. The flat kernel: 32 registers
// (7-8 CTAs per SM), 0.2-0.3 us faster than at 38.
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

#include <type_traits>

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_tile_geometry.cuh"
#include "hpc_common/fp8_quant_odd_group_rows.cuh"
#include "hpc_common/fp8_quant_odd_rows.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kTileThreads = kBulkThreads;  // 256 threads x 4 vectors = one 16 KB tile per CTA
// Minimum CTAs per SM the kernels are compiled for (register cap: 65536 / (256 x this), rounded
// down to ptxas' 8-register granularity): see "Occupancy" above.
constexpr int kTileMinBlocks = 5;
constexpr int kFlatMinBlocks = 7;
constexpr int kRow3MinBlocks = 6;  // rows of 3 vectors per lane (row_tile_three): fewer registers
// A row whose team spans 3 or more warps (96+ lanes: the team's amax meets at a block barrier) takes a
// CTA of its own rather than sharing 256 threads with other rows. H200, 64 MB bf16 per-token, written
// flush: N = 2880 (96-lane teams) 29.66-29.86 us on one row per CTA against 30.11-30.21 on two rows per
// 192-thread CTA (the rows' warps no longer wait for each other at the barrier, nor the CTA's exit for
// the later row). Rows of 2-warp teams (N = 1536 bf16, 3 KB) share 256-thread CTAs, 4 rows each: one
// 3 KB row per 64-thread CTA streamed at 90 % of the copy rate (the SMs turned CTAs over faster than
// they could launch them); shared, 98.2 us at 256 MB and 29.41 against 29.90 us at 64 MB.
constexpr int kRowTileOwnCtaMinTeam = 96;
// Threads per CTA of the row tile kernel's covers (group-128 bf16: 16 segments of 4 lanes) and of the
// odd-row kernel's (32 segments). H200, group-128 bf16, written flush: N = 2880 read 31.33-31.39 /
// 101.7-101.8 us at 64 / 256 MB on 256-thread CTAs, 30.91-31.01 / 100.8-100.9 on 128, 30.69-30.82 /
// 100.4-100.6 on 64; odd rows (N = 4095) 36.06-36.22 / 119.1-119.5 on 256, 35.23-35.26 / 117.3-117.7
// on 128, 35.36-35.42 / 118.4-118.5 on 64.
constexpr int kCoverCtaThreads = 64;
constexpr int kOddCoverCtaThreads = 128;
// Dynamic-scale tile kernels: a thread whose vectors are all finite takes its amax from the raw
// magnitudes and stores its codes without the NaN fix-up (MagnitudeMax); one that saw an Inf or NaN
// counts again element by element (ElementAmax) and fixes its codes. H200, 64 MB bf16 per-token,
// written flush: the row tile kernels 0.2-0.6 us faster (N = 1536 30.95 -> 30.76, 7168 30.14 -> 29.72,
// 28672 32.30 -> 31.70 us). The column tile kernel read 0.2-0.3 us slower with it (30.00-30.17 ->
// 30.29-30.37 us) and keeps the fix-up; why is not known.
// Covers whose segments end on vector boundaries take a kernel without the partial-vector code
// (row_tile_partial_vectors): 64 MB bf16 group-128 N = 2880, 31.25-31.46 against 32.10-32.24 us. That
// kernel computes every address before its first load (quant_tile), so a thread's 4 loads leave
// together: with the loads interleaved with the amax, it read 37.8 us (ncu: 14.8 against 7.6 cycles of
// L1TEX scoreboard stall per instruction).
// Rows of 1793-3584 vectors run on 512-thread CTAs, 7 vectors per lane (fp8_quant_wide_row_kernel):
// 64 MB bf16 per-token N = 28672, 30.30-30.34 against 31.66-31.86 us for 224 lanes x 16 vectors.

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
    m = finite_fast_amax_bits<DT, VEC>(accumulate, finite);
    if (!active) m = 0u;
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
__global__ void __launch_bounds__(kTileThreads, kTileMinBlocks) fp8_quant_tile_kernel(const QuantParams p) {
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
// kernel reads N = 4096 at 29.1-29.7 us.
// kCover: rows of several segments ending in a shorter one, each segment located by its team
// (quant_tile).
// VPT: vectors per lane, 4, or 3 for the one-segment rows row_tile_three picks. kPartial (covers): a segment
// may end inside a vector (row_tile_partial_vectors).
template <int DT, int VEC, bool kCover, int VPT = kBulkVecPerThread, bool kPartial = true>
__global__ void __launch_bounds__(kTileThreads, VPT == 3 ? kRow3MinBlocks : kTileMinBlocks)
    fp8_quant_row_tile_kernel(const QuantParams p) {
  __shared__ uint32_t red[kTileThreads / 32];
  quant_tile<DT, VEC, true, true, VPT, kCover, kPartial>(p, red);
}

// Rows of 1025 to 4096 vectors (bf16 N = 8200..32768: MLP intermediates such as 14336 and 28672 that
// per-token quantisation sees before a down projection), one row per CTA with 8 (up to 2048 vectors)
// or 16 vectors per lane: the register kernels read them at 63.5-70 % of 4.27 TB/s (64 MB bf16, H200).
// A row split over a cluster of CTAs exchanging their amax through distributed shared memory was
// slower still.
template <int DT, int VEC, int VPT, bool kCover>
__global__ void __launch_bounds__(kTileThreads, VPT == 16 ? 2 : VPT == 8 ? 3 : 4)
    fp8_quant_long_row_kernel(const QuantParams p) {
  __shared__ uint32_t red[kTileThreads / 32];
  quant_tile<DT, VEC, true, true, VPT, kCover>(p, red);
}

// Rows of 1793-3584 vectors on one 512-thread CTA, 7 vectors per lane (HPC_FP8_WIDE_LONG_ROWS; 1.4 us faster at
// N = 28672, measured above). Why: N = 28672 bf16 (3584 vectors) took 224 lanes x 16 vectors at 128
// registers, 2 CTAs per SM (75 % at 64 MB per cold call, 85.5 % back to back); 512 lanes x 7 at 64 registers holds the
// same bytes per SM (2 CTAs) with twice the warps, as 256 x 7 did for N = 14336.
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
__global__ void __launch_bounds__(kTileThreads, kFlatMinBlocks) fp8_quant_flat_kernel(const QuantParams p) {
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
__global__ void __launch_bounds__(kTileThreads, kTileMinBlocks) fp8_quant_col_tile_kernel(const QuantParams p) {
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
  if (active) m = amax_bits(pk);
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

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
