// FP8 quantisation through bulk copies, warp-specialised: an alternative to the ring kernel of
// fp8_quant_bulk.cuh (BulkOptions::variant & kBulkWarpSpecialised), included by that file after
// its helpers. The version 3 of the fourth pass (commit 59a5220) without its L2 policy, tile
// schedule options and per-warp stores.
//
// The ring kernel refills a stage only after the whole tile was quantised and the tile's block
// barrier passed, so while its 256 threads compute a CTA has 2 of its 3 tiles in flight. Here a
// producer warp owns the loads and the stage is free as soon as the 8 consumer warps have its
// bytes in registers:
//   producer (warp 8, one lane): for each tile i of the CTA, wait empty[i % 3] (every consumer
//     warp has read the tile that used the stage before), then one cp.async.bulk into it;
//   consumers (warps 0-7, 4 vectors per thread): wait full -> read 4 vectors from shared
//     memory -> __syncwarp, one arrive on empty -> amax, team reduction, scale -> FP8 bytes
//     into out[i % 3] -> fence.proxy.async -> barrier of the 256 consumers -> thread 0 stores the
//     tile with one bulk store.
// Fourth pass (H200, both with evict_first loads): 0.4-1.3 us faster than the ring kernel at
// 64 MB, 0.9-2.6 us at 256 MB; with 8 per-warp stores per tile it was 2-7 us slower.
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kWsConsumerWarps = kBulkThreads / 32;  // 8
constexpr int kWsThreads = kBulkThreads + 32;        // + the producer warp
constexpr int kWsTeamBarrier = 1;   // named barriers 1..4: the warps of one segment (team > 32)
constexpr int kWsStoreBarrier = 5;  // all consumer warps before the tile's store

// VARIANT: BulkVariant bits kBulkEarlyIssue, kBulkExitOnRead (kBulkWarpSpecialised is implied).
template <int DT, int VEC, int VARIANT>
__global__ void __launch_bounds__(kWsThreads, 3) fp8_quant_bulk_ws_kernel(const QuantParams p,
                                                                           unsigned long long* timeline) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr uint32_t kInBytes = kBulkTileVectors * 16;
  constexpr uint32_t kOutBytes = kBulkTileVectors * VEC;
  constexpr bool kEarlyIssue = (VARIANT & kBulkEarlyIssue) != 0;
  constexpr bool kExitOnRead = (VARIANT & kBulkExitOnRead) != 0;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* in_buf = smem;
  uint8_t* out_buf = smem + size_t(kBulkStages) * kInBytes;
  __shared__ __align__(8) uint64_t full[kBulkStages];
  __shared__ __align__(8) uint64_t empty[kBulkStages];
  __shared__ uint32_t red_block[kWsThreads / 32];
  __shared__ uint32_t red[2][kWsConsumerWarps];  // team maxima, double-buffered by tile parity

  const int warp = threadIdx.x >> 5, wl = threadIdx.x & 31;
  const bool producer = warp == kWsConsumerWarps;
  unsigned long long* tl =
      timeline != nullptr && threadIdx.x == 0 ? timeline + size_t(blockIdx.x) * kTimelineSlots : nullptr;
  stamp_entry(tl);

  const raw* x = static_cast<const raw*>(p.x);
  const int64_t total = p.num_tiles;
  // This CTA's tiles: blockIdx.x + i * gridDim.x (round robin, as the ring kernel).
  const int64_t ntiles = (total - int64_t(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  auto tile_of = [&](int64_t i) {
    const int64_t j = int64_t(blockIdx.x) + i * gridDim.x;
    return bulk_tile(p, p.reverse ? total - 1 - j : j);
  };
  auto issue_load = [&](int64_t i) {  // producer lane 0 only
    const BulkTile t = tile_of(i);
    const int s = int(i % kBulkStages);
    const uint32_t bytes = uint32_t(t.count) * uint32_t(p.seg_len) * uint32_t(sizeof(raw));
    sm90::mbar_arrive_expect_tx(&full[s], bytes);
    bulk_load(in_buf + size_t(s) * kInBytes, x + locate(p, t.s0).x_off, bytes, &full[s]);
  };
  auto init_barriers = [&]() {
    for (int s = 0; s < kBulkStages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], kWsConsumerWarps);
    }
    sm90::mbar_init_fence();
  };
  auto first_loads = [&]() {
    for (int64_t i = 0; i < kBulkStages && i < ntiles; ++i) issue_load(i);
  };

  if constexpr (kEarlyIssue) {
    // The producer initialises the barriers and issues at once; consumers wait at the barrier.
    if (producer && wl == 0) {
      init_barriers();
      hpc::pdl_wait();  // x may come from the previous kernel
      first_loads();
    }
  } else if (threadIdx.x == 0) {
    init_barriers();
  }
  __syncthreads();
  hpc::pdl_wait();  // x, the static scale and the partials may come from the previous kernel
  if constexpr (!kEarlyIssue) {
    if (producer && wl == 0) first_loads();
  }
  if (tl != nullptr) {
    tl[kTlIssued] = clock64();  // the loads are issued by now (early) or about now
    tl[kTlTiles] = ntiles;
    tl[kTlSm] = smid();
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

  for (int64_t i = 0; i < ntiles; ++i) {
    const int s = int(i % kBulkStages);
    const BulkTile t = tile_of(i);
    const bool active = seg_local < t.count;
    const uint8_t* tin = in_buf + size_t(s) * kInBytes;
    uint8_t* tout = out_buf + size_t(i % kBulkOutBufs) * kOutBytes;

    sm90::mbar_wait<true>(&full[s], uint32_t(i / kBulkStages) & 1u);
    stamp_tile(tl, kTlLanded, i);
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

    // One store per tile by thread 0 after a barrier of the consumers; its wait leaves only tile
    // i - 1's store pending, and the barrier orders that before anyone writes out[(i + 1) % 3]
    // (last stored from at tile i - 2).
    if (active) {
#pragma unroll
      for (int j = 0; j < kBulkVecPerThread; ++j) quantise_to_smem(pk[j], tout + vidx[j] * VEC, inv);
    }
    fence_proxy_async_smem();
    if (threadIdx.x == 0) bulk_store_wait_read<1>();
    sm90::named_barrier(kWsStoreBarrier, kBulkThreads);
    if (threadIdx.x == 0) {
      bulk_store(p.q + locate(p, t.s0).q_off, tout, uint32_t(t.count) * uint32_t(p.seg_len));
      stamp_tile(tl, kTlStored, i);
    }
  }
  if (threadIdx.x == 0) {
    if constexpr (kExitOnRead) {
      bulk_store_wait_read<0>();
    } else {
      bulk_store_wait_all();
    }
    stamp_exit(tl);
  }
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
