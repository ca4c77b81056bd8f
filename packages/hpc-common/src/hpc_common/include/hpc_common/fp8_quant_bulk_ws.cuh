// FP8 quantisation through bulk copies, warp-specialised (an alternative to the ring kernel of
// fp8_quant_bulk.cuh, selected with kOptBulkWs), and the launcher of both bulk kernels.
//
// Why it was tried (FP8_NOTES.md, fourth pass): the ring kernel refills a stage only after the
// whole tile was quantised, written and stored (its closing __syncthreads), so while its 256
// threads compute a CTA has 2 of its 3 tiles in flight, and every warp waits for the slowest one
// at each tile. Here a producer warp owns the loads and each consumer warp frees its part of a
// stage as soon as its bytes are in registers:
//   producer (warp 8, one lane): for each tile i of the CTA, wait empty[i % 3] (all 8
//     consumer warps have read the tile that used the stage before), then one
//     cp.async.bulk of up to 16 KB into the stage, completing full[i % 3];
//   consumers (warps 0-7, 4 vectors per thread): wait full -> read 4 vectors from shared
//     memory -> __syncwarp, one arrive on empty -> amax, team reduction, scale -> FP8 bytes
//     into the warp's 1/8 of out[i % 3] -> fence.proxy.async, __syncwarp -> lane 0 stores
//     the warp's part with its own bulk store (kTileStore: thread 0 stores the whole tile after
//     a barrier of the 256 consumers, as the ring kernel does).
// No block-wide barrier per tile: a warp's 128 vectors are consecutive in the tile (team < 32:
// whole segments; team >= 32: 128 consecutive vectors of the segment per warp), so each warp
// stores its own FP8 bytes, and teams wider than a warp meet at a named barrier of their own
// warps only. Each warp's lane 0 tracks its own bulk-store groups (wait_group.read before it
// rewrites a buffer). Shared memory as the ring kernel (3 x 16 KB in, 3 x 16 KB / (16 / VEC)
// out: 72 KB for bf16, 3 CTAs and 27 warps per SM).
// Measured on the H200 (run 1 of the fourth pass, per-warp stores): slower than the ring kernel
// everywhere, +1.5 us at 64 MB and +5-7 us at 256 MB, so the ring kernel stays the default.
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

#include "hpc_common/fp8_quant_bulk.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kWsConsumerWarps = kBulkThreads / 32;  // 8
constexpr int kWsThreads = kBulkThreads + 32;        // + the producer warp
constexpr int kWsWarpVectors = kBulkTileVectors / kWsConsumerWarps;  // 128 x 16 B per warp
constexpr int kWsTeamBarrier = 1;   // named barriers 1..4: the warps of one segment (team > 32)
constexpr int kWsStoreBarrier = 5;  // kTileStore: all consumer warps before the tile's store

template <int DT, int VEC, bool kTileStore>
__global__ void __launch_bounds__(kWsThreads, 3) fp8_quant_bulk_ws_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr uint32_t kInBytes = kBulkTileVectors * 16;
  constexpr uint32_t kOutBytes = kBulkTileVectors * VEC;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* in_buf = smem;
  uint8_t* out_buf = smem + size_t(kBulkStages) * kInBytes;
  __shared__ __align__(8) uint64_t full[kBulkStages];
  __shared__ __align__(8) uint64_t empty[kBulkStages];
  __shared__ uint32_t red_block[kWsThreads / 32];
  __shared__ uint32_t red[2][kWsConsumerWarps];  // team maxima, double-buffered by tile parity

  const raw* x = static_cast<const raw*>(p.x);
  const int64_t ntiles = bulk_cta_tiles(p);
  const int warp = threadIdx.x >> 5, wl = threadIdx.x & 31;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kBulkStages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], kWsConsumerWarps);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();
  hpc::pdl_wait();  // x, the static scale and the partials may come from the previous kernel

  const bool producer = warp == kWsConsumerWarps;
  const bool evict_first = (p.kernel_opts & kOptEvictFirst) != 0;
  const uint64_t policy = evict_first && producer && wl == 0 ? l2_evict_first_policy() : 0;
  auto issue_load = [&](int64_t i) {
    const BulkTile t = bulk_work(p, i);
    const int s = int(i % kBulkStages);
    const uint32_t bytes = uint32_t(t.count) * uint32_t(p.seg_len) * uint32_t(sizeof(raw));
    bulk_load_tile(in_buf + size_t(s) * kInBytes, x + locate(p, t.s0).x_off, bytes, &full[s], evict_first, policy);
  };
  if (producer && wl == 0) {
    for (int64_t i = 0; i < kBulkStages && i < ntiles; ++i) issue_load(i);
  }

  const float fixed_scale = per_tensor_scale(p, red_block);  // whole block (partials: barriers)
  const float fixed_inv = div_rn(1.0f, fixed_scale);
  hpc::pdl_launch_dependents();

  if (producer) {
    if (wl == 0) {
      for (int64_t i = kBulkStages; i < ntiles; ++i) {
        sm90::mbar_wait<true>(&empty[i % kBulkStages], uint32_t(i / kBulkStages - 1) & 1u);
        issue_load(i);
      }
    }
    return;
  }

  const bool dynamic = p.scale_source == kScaleDynamic;
  const int team = p.team;  // seg_vectors / 4, a power of two in [1, 256]
  const int seg_local = threadIdx.x / team, lane = threadIdx.x & (team - 1);
  const int seg_vecs = team * kBulkVecPerThread;
  // team < 32: lane l holds vectors l + team * j of its segment, j rotated per segment so that
  // a quarter-warp's 16-byte reads fall in distinct banks; team >= 32: warp k of the team holds
  // the segment's vectors 128k .. 128k + 127, lane l vectors 128k + l + 32 j.
  const int rot = team < 32 ? (wl / team) & 3 : 0;
  const int step = team < 32 ? team : 32;
  const int v0 = seg_local * seg_vecs + (lane & ~31) * kBulkVecPerThread + (lane & 31);
  const int team_warps = team >> 5, team_warp0 = team >= 32 ? seg_local * team_warps : 0;
  const uint32_t warp_off = uint32_t(warp) * kWsWarpVectors;

  for (int64_t i = 0; i < ntiles; ++i) {
    const int s = int(i % kBulkStages);
    const BulkTile t = bulk_work(p, i);
    const bool active = seg_local < t.count;
    const uint8_t* tin = in_buf + size_t(s) * kInBytes;
    uint8_t* tout = out_buf + size_t(i % kBulkOutBufs) * kOutBytes;

    sm90::mbar_wait<true>(&full[s], uint32_t(i / kBulkStages) & 1u);
    P pk[kBulkVecPerThread];
    int vidx[kBulkVecPerThread];
#pragma unroll
    for (int j = 0; j < kBulkVecPerThread; ++j) {
      vidx[j] = v0 + step * ((j + rot) & (kBulkVecPerThread - 1));
      if (active) *reinterpret_cast<uint4*>(pk[j].v) = *reinterpret_cast<const uint4*>(tin + vidx[j] * 16);
    }
    __syncwarp();
    if (wl == 0) sm90::mbar_arrive(&empty[s]);  // this warp is done with stage s

    float scale = fixed_scale, inv = fixed_inv;
    if (dynamic) {
      uint32_t m = 0;
      if (active) {
        AmaxAcc<DT, VEC> acc;
#pragma unroll
        for (int j = 0; j < kBulkVecPerThread; ++j) acc.add(pk[j]);
        m = acc.bits();
      }
      if (team <= 32) {
        for (int off = team >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
      } else {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
        // red[i & 1] was last read at tile i - 2, before this team's barrier of tile i - 1.
        if (wl == 0) red[i & 1][warp] = m;
        sm90::named_barrier(kWsTeamBarrier + seg_local, team);
        m = 0;
        for (int w = 0; w < team_warps; ++w) m = max(m, red[i & 1][team_warp0 + w]);
      }
      scale = scale_from_amax_bits(m, p.ue8m0);
      inv = div_rn(1.0f, scale);
      if (active && lane == 0) write_segment_scale(p, t.s0 + seg_local, scale);
    }

    if constexpr (kTileStore) {
      // As the ring kernel: one store per tile by thread 0 after a barrier of the consumers;
      // its wait leaves only tile i - 1's store pending, and the barrier orders that before
      // anyone writes out[(i + 1) % 3] (last stored from at tile i - 2).
      if (active) {
#pragma unroll
        for (int j = 0; j < kBulkVecPerThread; ++j) quantise_to_smem(pk[j], tout + vidx[j] * VEC, inv);
      }
      fence_proxy_async_smem();
      if (threadIdx.x == 0) bulk_store_wait_read<1>();
      sm90::named_barrier(kWsStoreBarrier, kBulkThreads);
      if (threadIdx.x == 0) {
        bulk_store(p.q + locate(p, t.s0).q_off, tout, uint32_t(t.count) * uint32_t(p.seg_len));
      }
    } else {
      // out[i % 3] was last stored from at tile i - 3: with the two newest groups (tiles i - 1,
      // i - 2) allowed to be pending, that store has read it. Lane 0 commits a group per tile
      // (empty when the warp stores nothing), so the count is in tiles.
      if (wl == 0) bulk_store_wait_read<kBulkOutBufs - 1>();
      __syncwarp();
      if (active) {
#pragma unroll
        for (int j = 0; j < kBulkVecPerThread; ++j) quantise_to_smem(pk[j], tout + vidx[j] * VEC, inv);
      }
      fence_proxy_async_smem();
      __syncwarp();
      if (wl == 0) {
        const int nv = t.count * seg_vecs - int(warp_off);
        const uint32_t bytes = uint32_t(nv < 0 ? 0 : (nv < kWsWarpVectors ? nv : kWsWarpVectors)) * VEC;
        if (bytes > 0) {
          bulk_store(p.q + locate(p, t.s0).q_off + warp_off * VEC, tout + warp_off * VEC, bytes);
        } else {
          bulk_commit();
        }
      }
    }
  }
  if (kTileStore ? threadIdx.x == 0 : wl == 0) bulk_store_wait_all();
}

// Whether the bulk kernels serve these parameters. Called by the launcher after
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

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_bulk(QuantParams p, cudaStream_t stream, bool pdl) {
  const int64_t nseg = p.rows * p.segs_per_row;
  if (nseg == 0) return cudaSuccess;
  const int64_t sv = p.seg_len / VEC;
  const int64_t per_tile = kBulkTileVectors / sv;
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
  if (p.per_tensor_dynamic) {
    cudaError_t e = launch_amax_pass<DT, VEC>(p, stream, pdl);
    if (e != cudaSuccess) return e;
  }
  p.team = int(sv / kBulkVecPerThread);
  const bool ws = (p.kernel_opts & kOptBulkWs) != 0;
  auto* kernel = !ws ? fp8_quant_bulk_kernel<DT, VEC>
                     : ((p.kernel_opts & kOptWsTileStore) ? fp8_quant_bulk_ws_kernel<DT, VEC, true>
                                                          : fp8_quant_bulk_ws_kernel<DT, VEC, false>);
  const int threads = ws ? kWsThreads : kBulkThreads;
  constexpr size_t smem = bulk_smem_bytes<VEC>();
  const int64_t wave = hpc::persistent_ctas(kernel, threads, smem, p.num_sms);
  // Balanced deal (bulk_work, kOptBalanced) for one run; else the round-robin deal.
  p.balanced = (p.kernel_opts & kOptBalanced) && p.run_segs == nseg;
  int64_t grid;
  if (p.balanced) {
    grid = nseg < wave ? nseg : wave;
    p.full_rounds = nseg / (grid * p.tile_segs);
  } else {
    grid = p.num_tiles < wave ? p.num_tiles : wave;
    p.full_rounds = 0;
  }
  return hpc::launch_kernel(kernel, dim3(int(grid)), dim3(threads), smem, stream, pdl, p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
