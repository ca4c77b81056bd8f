// FP8 quantisation with bulk (TMA) copies through a shared-memory ring: one kernel for every
// mode whose segments are whole, 16-element multiples and at most one 16 KB tile long
// (per-tensor static / dynamic-partials, per-token up to 8192 bf16, group-32..., per-head).
//
// Why (H200, FP8_HISTORY.md): the register kernels (fp8_quant_kernel, the short-segment
// kernel) need 96-128 registers for their 16 vectors in flight, so 16 warps per SM; each
// warp loads, then reduces, then stores, and has no load in flight while it computes and
// stores. Per-token measured 78% of the copy bandwidth at 256 MB, group-128 70%, against 88%
// for per-tensor static (no reduction). Here one thread per CTA keeps kBulkStages 16 KB tiles
// of input in flight with cp.async.bulk (the copy engine, not the LSU), independent of what
// the 256 threads are computing, and the FP8 output leaves through cp.async.bulk stores of
// whole tiles (full 128-byte lines, no partial-sector writes).
//
// Per tile (16 KB of input = 1024 16-byte vectors; 256 threads x 4 vectors):
//   wait full[stage] -> each thread reads its 4 vectors from shared memory -> amax, team
//   reduction (shuffles; > 32 lanes: one extra barrier) -> scale, reciprocal -> FP8 bytes into
//   out[i % 3] -> fence.proxy.async + __syncthreads -> thread 0 refills the stage with the tile
//   kBulkStages ahead and stores out[i % 3] with one bulk copy.
// BulkOptions::variant kBulkStoreFirst gives the 8fdf820 order (store, then refill; FP8_HISTORY.md,
// fifth pass).
// A team of seg_vectors / 4 lanes owns a segment (lane l holds vectors l + team * j); for
// teams of 1..4 lanes the j order is rotated per segment so that a quarter-warp's 16-byte
// shared-memory reads fall in distinct banks.
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/sm90.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kBulkThreads = 256;
constexpr int kBulkVecPerThread = 4;
constexpr int kBulkTileVectors = kBulkThreads * kBulkVecPerThread;  // 1024 x 16 B = 16 KB
// Input tiles in flight per CTA. 3 stages + 3 output buffers = 72 KB (bf16) of shared memory:
// 3 CTAs (24 warps) and up to 144 KB of loads in flight per SM. (4 stages, 90 KB: 2 CTAs, 16
// warps; the H200 run of eaffb4d found that kernel issue-bound, 55% issue-slot use.)
constexpr int kBulkStages = 3;
constexpr int kBulkOutBufs = 3;  // see the wait_group.read<1> argument in the kernel

template <int VEC>
constexpr size_t bulk_smem_bytes() {
  return size_t(kBulkStages) * kBulkTileVectors * 16 + size_t(kBulkOutBufs) * kBulkTileVectors * VEC;
}

// ---- bulk copies (loads: hpc::sm90::bulk_load; addresses 16-byte aligned, sizes multiples of 16) ----
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(sm90::smem_u32(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Shared-memory reads of all but the newest `N` store groups are done (their buffers are free).
template <int N>
__device__ __forceinline__ void bulk_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void bulk_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Per-CTA timeline stamps (BulkOptions::timeline); `tl` is null unless diagnosing.
__device__ __forceinline__ void stamp_entry(unsigned long long* tl) {
  if (tl != nullptr) {
    tl[kTlEntryClk] = clock64();
    tl[kTlEntry] = sm90::global_timer_ns();
  }
}
__device__ __forceinline__ void stamp_exit(unsigned long long* tl) {
  if (tl != nullptr) {
    tl[kTlExit] = sm90::global_timer_ns();
    tl[kTlExitClk] = clock64();
  }
}
__device__ __forceinline__ void stamp_tile(unsigned long long* tl, int slot, int64_t i) {
  if (tl != nullptr && i < kTimelineMaxTiles) tl[slot + int(i)] = clock64();
}

// The FP8 bytes of one pack (same operations as Pack::store_quantised), stored to shared memory.
template <int DT, int VEC>
__device__ __forceinline__ void quantise_to_smem(const Pack<DT, VEC>& pk, uint8_t* dst, float inv) {
  static_assert(VEC == 8 || VEC == 4, "bulk path: 16-byte vectors of 2- or 4-byte elements");
  uint32_t w[VEC / 4];
  pk.quantised_words(inv, w);
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
    *reinterpret_cast<uint32_t*>(dst) = w[0];
  }
}

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

// VARIANT: 0 (the default): after a tile's barrier, thread 0 refills the stage, then stores the
// tile; kBulkStoreFirst: the other way round (8fdf820).
template <int DT, int VEC, int VARIANT>
__global__ void __launch_bounds__(kBulkThreads) fp8_quant_bulk_kernel(const QuantParams p,
                                                                       unsigned long long* timeline) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr uint32_t kInBytes = kBulkTileVectors * 16;
  constexpr uint32_t kOutBytes = kBulkTileVectors * VEC;
  constexpr bool kRefillFirst = (VARIANT & kBulkStoreFirst) == 0;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* in_buf = smem;
  uint8_t* out_buf = smem + size_t(kBulkStages) * kInBytes;
  __shared__ __align__(8) uint64_t full[kBulkStages];
  __shared__ uint32_t red[kBulkThreads / 32];

  unsigned long long* tl =
      timeline != nullptr && threadIdx.x == 0 ? timeline + size_t(blockIdx.x) * kTimelineSlots : nullptr;
  stamp_entry(tl);

  const raw* x = static_cast<const raw*>(p.x);
  const bool dynamic = p.scale_source == kScaleDynamic;
  const int64_t ntiles = p.num_tiles;
  const int team = p.team;  // seg_vectors / 4, a power of two in [1, 256]
  const int seg_local = threadIdx.x / team, lane = threadIdx.x & (team - 1);
  const int rot = team < 32 ? ((threadIdx.x & 31) / team) & 3 : 0;
  const int seg_vecs = team * kBulkVecPerThread;
  const uint32_t esize = sizeof(raw);

  auto tile_index = [&](int64_t i) {
    const int64_t j = int64_t(blockIdx.x) + i * gridDim.x;
    return p.reverse ? ntiles - 1 - j : j;
  };
  auto issue_load = [&](int64_t i) {  // thread 0 only
    const int64_t j = int64_t(blockIdx.x) + i * gridDim.x;
    if (j >= ntiles) return;
    const BulkTile t = bulk_tile(p, tile_index(i));
    const uint32_t bytes = uint32_t(t.count) * uint32_t(p.seg_len) * esize;
    const int s = int(i % kBulkStages);
    sm90::mbar_arrive_expect_tx(&full[s], bytes);
    sm90::bulk_load(in_buf + size_t(s) * kInBytes, x + locate(p, t.s0).x_off, bytes, &full[s]);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kBulkStages; ++s) sm90::mbar_init(&full[s], 1);
    sm90::mbar_init_fence();
  }
  __syncthreads();
  hpc::pdl_wait();  // x, the static scale and the partials may come from the previous kernel
  if (threadIdx.x == 0) {
    for (int i = 0; i < kBulkStages; ++i) issue_load(i);
    if (tl != nullptr) {
      tl[kTlIssued] = clock64();
      tl[kTlTiles] = (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x;
      tl[kTlSm] = sm90::sm_id();
    }
  }

  const float fixed_scale = per_tensor_scale(p, red);
  if (p.scale_source == kScalePartials) __syncthreads();  // red[] is reused by the team reduction below
  const float fixed_inv = div_rn(1.0f, fixed_scale);
  hpc::pdl_launch_dependents();

  for (int64_t i = 0; int64_t(blockIdx.x) + i * gridDim.x < ntiles; ++i) {
    const int s = int(i % kBulkStages);
    const BulkTile t = bulk_tile(p, tile_index(i));
    const bool active = seg_local < t.count;
    const uint8_t* tin = in_buf + size_t(s) * kInBytes;
    uint8_t* tout = out_buf + size_t(i % kBulkOutBufs) * kOutBytes;

    sm90::mbar_wait<true>(&full[s], uint32_t(i / kBulkStages) & 1u);
    stamp_tile(tl, kTlLanded, i);
    P pk[kBulkVecPerThread];
    int vidx[kBulkVecPerThread];
#pragma unroll
    for (int j = 0; j < kBulkVecPerThread; ++j) {
      vidx[j] = seg_local * seg_vecs + lane + team * ((j + rot) & (kBulkVecPerThread - 1));
      if (active) *reinterpret_cast<uint4*>(pk[j].v) = *reinterpret_cast<const uint4*>(tin + vidx[j] * 16);
    }

    float scale = fixed_scale, inv = fixed_inv;
    if (dynamic) {
      // red[] was last read before the previous tile's closing barrier
      const uint32_t m = team_max<false>(active ? amax_bits(pk) : 0u, team, red);
      scale = scale_from_amax_bits(m, p.ue8m0);
      inv = div_rn(1.0f, scale);
      if (active && lane == 0) write_segment_scale(p, t.s0 + seg_local, scale);
    }
    if (active) {
#pragma unroll
      for (int j = 0; j < kBulkVecPerThread; ++j) quantise_to_smem(pk[j], tout + vidx[j] * VEC, inv);
    }
    sm90::fence_proxy_async_smem();
    // Buffer reuse: the store issued kBulkOutBufs tiles ago read out[i % 3]; after this wait
    // only the newest store (tile i - 1) may still be reading, and the barrier below orders
    // the wait before anyone writes out[(i + 1) % 3] (last used by tile i - 2).
    if (threadIdx.x == 0) bulk_store_wait_read<1>();
    __syncthreads();  // stage s fully read, out[i % 3] complete
    if (threadIdx.x == 0) {
      // Refill first: the SM's bulk-copy unit serves its queue in order, so the next tile's
      // reads do not wait behind this tile's store (H200, fifth pass: 64 MB calls 0.3-0.8 us
      // faster than with the store first).
      if constexpr (kRefillFirst) issue_load(i + kBulkStages);
      bulk_store(p.q + locate(p, t.s0).q_off, tout, uint32_t(t.count) * uint32_t(p.seg_len));
      stamp_tile(tl, kTlStored, i);
      if constexpr (!kRefillFirst) issue_load(i + kBulkStages);
    }
  }
  if (threadIdx.x == 0) {
    bulk_store_wait_all();
    stamp_exit(tl);
  }
}

// Whether the bulk kernel serves these parameters. Called by the launcher after
// `vectorized` was checked by the caller: every segment start is 16-byte aligned in x.
inline bool bulk_applicable(const QuantParams& p, int vec) {
  if (!p.bulk || vec == 1 || p.peel || p.seg_len % 16 != 0 || p.row_len % p.seg_len != 0) return false;
  const int64_t sv = p.seg_len / vec;
  if (sv < kBulkVecPerThread || sv > kBulkTileVectors || (sv & (sv - 1)) != 0) return false;
  // FP8 tiles leave through 16-byte-aligned bulk stores.
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

// The tile geometry of p (team, runs, tiles; see BulkTile), shared by the bulk kernel and the
// one-tile-per-CTA kernel (fp8_quant_tile.cuh).
inline void set_tile_geometry(QuantParams& p, int VEC) {
  const int64_t sv = p.seg_len / VEC;
  p.team = int(sv / kBulkVecPerThread);
  p.seg_vecs = int(sv);
  set_tile_runs(p, kBulkTileVectors / sv);
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_bulk(QuantParams p, cudaStream_t stream, bool pdl, const BulkOptions& opt) {
  if (p.rows * p.segs_per_row == 0) return cudaSuccess;
  set_tile_geometry(p, VEC);
  using Kernel = void (*)(const QuantParams, unsigned long long*);
  Kernel kernel = nullptr;
  switch (opt.variant) {
    case 0: kernel = fp8_quant_bulk_kernel<DT, VEC, 0>; break;
    case kBulkStoreFirst: kernel = fp8_quant_bulk_kernel<DT, VEC, kBulkStoreFirst>; break;
    default: return cudaErrorInvalidValue;
  }
  if (p.per_tensor_dynamic) {
    cudaError_t e = launch_amax_pass<DT, VEC>(p, stream, pdl);  // sets the partials, reverse order
    if (e != cudaSuccess) return e;
  }
  constexpr size_t smem = bulk_smem_bytes<VEC>();
  const int64_t wave = hpc::persistent_ctas(kernel, kBulkThreads, smem, p.num_sms);
  const int grid = int(p.num_tiles < wave ? p.num_tiles : wave);
  return hpc::launch_kernel(kernel, dim3(grid), dim3(kBulkThreads), smem, stream, pdl, p, opt.timeline);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
