// Shared-memory layout and thread roles of the decode kernel (decode.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

// The PDL wait of this thread: plan, q and the KV cache may come from the previous kernels. Dependents (the combine
// kernel, or in merge mode the next layer's kernels) wait for our completion in griddepcontrol.wait before reading the
// output, so the trigger right after the wait only lets their prologues start; it is safe in both modes, and coming
// after our own wait it keeps the chain's guarantee that a kernel starts only once the one two launches back is done
// (which the early KV loads of the next call rely on).
__device__ __forceinline__ void pdl_wait_here(const DecodeParams& p) {
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
}

// Tiles the producer may copy before the PDL wait (DecodeParams::early_kv_tokens), at most one lap of the ring. 3
// (H200, input rotation, same process, change against the plain call, mean over the six cases of 8/1 BF16 / 8/1 FP8 /
// 64/8 BF16 / 64/8 FP8): 1 tile -0.86 / -0.80 / -1.29 / -0.76 us, 2 tiles -1.27 / -0.98 / -1.60 / -0.88, 3 tiles
// -1.64 / -1.21 / -2.02 / -0.95, 4 tiles -1.72 / -1.32 / -2.22 / -1.28, 6 tiles -1.26 / -1.15 / -2.00 / -1.16, a lap
// -1.09 / -0.35 / -1.50 / +0.08. A lap reads +0.5 to +1.4 on the uniform FP8 cases: the next call's early copies
// share DRAM with this call's last tiles, so many delay the call they overlap, while a few already take the start
// chain (plan entries, first page id, first copies) off the path. 3 and 4 are alike; 3 keeps fewer bytes in flight.
constexpr int kEarlyTilesMax = 3;

constexpr int kRingSlots = 4;  // claimed tail bins in flight per CTA (decode_bin_ring.cuh)

// The task a CTA runs at position `pos` of the bin [t_begin, t_end): the bin's first task, then
// its last, then the others in line order. Why: the last task of a bin is
// usually the first part of an item cut at the bin's end, whose other part opens the next bin;
// run in line order it ends with the bin, so its merge (by whichever part finishes last) comes
// after the end of the CTA's stream, on the kernel's critical path. Run second, both parts of the
// item finish early and the merge overlaps the rest of the bin. (H200:
// 64/8 1-2 us faster; the first task stays first: it closes the item the previous bin began,
// often a long one, and bin_first / the plan's first page id describe it.) Producer and
// consumers use the same order; results do not depend on it (merges run in slot order).
__device__ __forceinline__ int4 task_in_run(const DecodeParams& p, int t_begin, int t_end, int pos) {
  const int t = pos == t_begin ? pos : (pos == t_begin + 1 ? t_end - 1 : pos - 1);
  return p.tasks[t];
}

// The prologue before the PDL wait reads no parameter: every Q row of every stage is zeroed, not only rows >= G, so it
// does not wait for p.group's constant line (the block's first cold constant miss after the flush), and warps 1-3
// touch the block's three 256-byte constant lines at entry (touch_decode_param_lines, decode.cuh), so those misses
// overlap the barrier inits and the zeroing instead of following the PDL wait: -0.32 us mean over the 24 benchmark
// cases (22 of 24 faster), the entry-to-wait step 0.77 -> 0.58 us at FP8. Safe before the wait: the parameter block
// is the launch's own, no earlier kernel writes it. (The 23-35 mbarriers initialised one per thread of warps 0-1,
// each with its init and proxy fences, instead of by thread 0: +1.4 us on every case.)

// The bin CTA blockIdx.x runs. A head-major line cut into a multiple of Hkv bins holds head h's
// stretch in bins h * nb1 .. (h + 1) * nb1 - 1, every stretch cut alike; with bin_heads = Hkv the
// bins are dealt so that CTAs c .. c + Hkv - 1 run the Hkv heads' bins of the same stretch (bin
// (c % Hkv) * nb1 + c / Hkv, nb1 = gridDim.x / Hkv), i.e. CTAs next to each other read the Hkv
// 128-byte rows of the same tokens at the same time, as the static split's round robin does.
// Why (H200): 64/8 FP8 64x4K 153.9 -> 149.4 us, 1x128K+31x4K 155.6 ->
// 150.8, 2x32K+30x4K 117.6 -> 113.8; BF16 within +-0.7 us except 64x4K -1.9. Any bijection of the
// bins gives the same results (GPU test); the CTAs past nb1 * Hkv run their own bin.
__device__ __forceinline__ int own_bin(const DecodeParams& p) {
  const int c = static_cast<int>(blockIdx.x), H = p.bin_heads;
  if (H <= 1) return c;
  const int nb1 = static_cast<int>(gridDim.x) / H;
  const int h = c % H;
  return c < nb1 * H ? h * nb1 + c / H : c;
}

// kTma selects the producer and with it the layout of a K / V tile in shared memory:
//  - cp.async producer (kTma = false): rows of kRowBytes at a padded pitch of kRowBytes + 16,
//    so the 8 rows of an ldmatrix phase start on different banks;
//  - TMA producer (kTma = true): what a tensor-map copy with the 128-byte swizzle writes: boxes
//    of 128-byte rows (FP8 row = one box, BF16 row = two boxes of 64 dims, kept as two halves of
//    the tile, 8 KB apart), 16-byte chunk c of row r stored at chunk c ^ (r & 7). The 8 rows of
//    an ldmatrix phase then hit 8 different chunks (conflict free without padding); the swizzle
//    pattern follows address bits 7-9, so every stage buffer is 1024-byte aligned.
template <bool kFp8Kv, bool kFp8Q, bool kTma = false>
struct DecodeConfig {
  static constexpr int kTile = 64;
  static constexpr int kDim = 128;
  static constexpr int kRowBytes = kFp8Kv ? 128 : 256;
  static constexpr bool kSwizzled = kTma;
  static constexpr int kRowPitch = kTma ? 128 : kRowBytes + 16;  // TMA: pitch within one 128-byte half
  static constexpr int kHalfBytes = kTile * 128;                  // TMA: one 64-row box of 128-byte rows
  static constexpr int kQRowBytes = kFp8Q ? 128 : 256;
  static constexpr int kQPitch = 272;
  // cp.async: ~112 / 128 KB of KV in flight per SM. TMA (no padding): as many as fit.
  static constexpr int kStages = kTma ? (kFp8Kv ? 9 : 5) : (kFp8Kv ? 7 : 4);
  static constexpr int kKOff = 0;
  static constexpr int kVOff = kTile * (kTma ? kRowBytes : kRowPitch);
  static constexpr int kQOff = 2 * kVOff;
  static constexpr int kStageAlign = kTma ? 1024 : 16;
  static constexpr int kStageBytes = (kQOff + 16 * kQPitch + kStageAlign - 1) / kStageAlign * kStageAlign;
  static constexpr int kMergePitch = 136;  // floats; conflict-free float2 stores
  static constexpr int kMergeOff = kStages * kStageBytes;
  static constexpr int kStatsOff = kMergeOff + 4 * 16 * kMergePitch * 4;
  static constexpr int kBarOff = kStatsOff + 2 * 4 * 16 * 4;
  static constexpr int kFlagOff = kBarOff + 2 * kStages * 8;  // int: "this CTA merges" broadcast
  // Ring of claimed tail bins (decode_bin_ring.cuh): kRingSlots x 2 int4, then its barriers
  // (full[kRingSlots], empty[kRingSlots], want).
  static constexpr int kRingOff = kFlagOff + 16;
  static constexpr int kRingBarOff = kRingOff + kRingSlots * 32;
  // Ring of merge requests (TMA kernel, merge on helper warps, decode_merge_in_kernel.cuh): 4 int4
  // descriptors, then full[4] and empty[4].
  static constexpr int kMergeRingOff = (kRingBarOff + (2 * kRingSlots + 1) * 8 + 15) / 16 * 16;
  // TMA: the dynamic shared memory base is only 16-byte aligned for sure; the kernel rounds it
  // up to 1024, so ask for the slack.
  static constexpr int kSmemBytes = kMergeRingOff + 4 * 16 + 8 * 8 + (kTma ? 1024 : 0);
  static constexpr int kConsumerWarps = 4;
  static constexpr int kProducerThreads = 128;
  static constexpr int kThreads = 32 * kConsumerWarps + kProducerThreads;
  // Tail bins are claimed (decode_bin_ring.cuh) only with the TMA producer, whose second warp
  // runs the scheduler; the cp.async producer needs all four warps for its copies (a ninth warp
  // would cap the kernel at 168 registers: 3 warps on one sub-partition's 16 K registers), so
  // there every CTA runs the tail bins C + blockIdx.x, 2 C + blockIdx.x, ... in a fixed order.
  // The producer asks for the next bin this many tiles before the end of the current one: the
  // claim, the bin's table reads and its first page-id read (~3 dependent global round trips,
  // ~3 us cold) then overlap the bin's last tiles (~0.6 us per FP8 tile, ~1 us per BF16 tile).
  static constexpr int kWantTiles = kFp8Kv ? 6 : 4;
  static_assert(kStageBytes % 16 == 0 && kMergeOff % 16 == 0 && kBarOff % 8 == 0 && kRingOff % 16 == 0,
                "alignment");
  static_assert(!kTma || (kStageBytes % 1024 == 0 && kVOff % 1024 == 0), "TMA swizzle needs 1024-byte tiles");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// Physical head dim d of column n (0..7) of the P V B fragments' n-tile nt (tile_v_frags).
template <bool kFp8Kv>
__device__ __forceinline__ int v_col(int nt, int n) {
  if constexpr (kFp8Kv) {
    // FP8 V fragments are built so that n-tile 4u + r, column c holds d = 32u + 4c + r.
    return 32 * (nt >> 2) + 4 * n + (nt & 3);
  } else {
    return 8 * nt + n;
  }
}

// Physical head-dim column of accumulator element e (0, 1) of n-tile nt held by lane quad j.
template <bool kFp8Kv>
__device__ __forceinline__ int out_col(int nt, int j, int e) {
  return v_col<kFp8Kv>(nt, 2 * j + e);
}

}  // namespace hpc::attn
