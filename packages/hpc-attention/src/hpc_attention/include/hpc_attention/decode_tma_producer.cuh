// TMA producer of the decode kernel (heuristics.PRODUCER): one warp streams each
// 64-token K/V tile with a few tensor-map copies instead of 128 producer threads issuing 16-byte
// cp.async copies (see decode.cuh for the kernel and decode_producer.cuh for the
// cp.async producer it replaces).
//
// Why: with the math skipped, FP8 KV streamed at only 2.3-3.1 TB/s against 3.7 for BF16. The
// cp.async producer pays per 16 bytes one instruction, plus per row a page-id load and per
// thread an mbarrier arrival, so an FP8 tile (half the bytes of a BF16 tile) costs the producer
// as much as a BF16 tile. Here a tile costs 2 (FP8) or 4 (BF16) copies when pages hold >= 64
// tokens, 64 / page_size times that for smaller pages, one expect_tx arrival, and one page-id
// load per 32 pages (a warp-wide window of page-table entries, read ahead of the tiles).
//
// The KV cache [num_pages, page_size, Hkv, 128] is a 4-D tensor (dim, head, token in page,
// page) whose page coordinate comes from the page table: a box is (128 bytes of dim, 1 head,
// min(page_size, 64) tokens, 1 page). Page ids are clamped into [0, num_pages) as in the
// cp.async producer, so a bad table never faults; boxes of pages wholly past the length are not
// issued (their rows may hold anything: NaN pages are never read), rows past the length inside
// the last page are read and masked by the consumers (scores to -inf, V to zero). The task's G
// query rows ride on the first tile's barrier as plain bulk copies (bytes counted in the same
// expect_tx), so the full barrier expects exactly one arrival per phase.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_bin_ring.cuh"
#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_config.cuh"
#include "hpc_attention/sm90_primitives.cuh"

namespace hpc::attn {

template <bool kFp8Kv, bool kFp8Q, bool kEarly>
__device__ __forceinline__ void producer_tma_warp(const DecodeParams& p, uint8_t* smem, uint64_t* full,
                                                  uint64_t* empty, const BinRing& ring, int t_begin, int t_end,
                                                  int4 first_task, int first_page) {
  using Cfg = DecodeConfig<kFp8Kv, kFp8Q, true>;
  constexpr int kHalves = Cfg::kRowBytes / 128;  // 128-byte boxes per row: 2 (BF16), 1 (FP8)
  constexpr int kQElem = kFp8Q ? 1 : 2;
  const int lane = threadIdx.x & 31;
  const uint64_t policy = kv_l2_evict_first();
  const int ps_log2 = p.page_size_log2;
  const int box_log2 = min(ps_log2, 6);  // rows per box: min(page_size, 64)
  const int page_mask = (1 << ps_log2) - 1;
  // Copy `lane` of a tile: K or V (bit 0), 64-dim half (BF16), box of sub-page s (pages < 64).
  const int my_kv = lane & 1, my_half = (lane >> 1) & (kHalves - 1), my_sub = lane / (2 * kHalves);
  const void* my_map = my_kv ? static_cast<const void*>(&p.v_map) : static_cast<const void*>(&p.k_map);
  const int my_dst = (my_kv ? Cfg::kVOff : Cfg::kKOff) + my_half * Cfg::kHalfBytes + (my_sub << box_log2) * 128;
  if (lane < 2) tma_prefetch_map(my_map);
  int stage = 0;
  uint32_t phase = 0;
  // The G query rows of item (b, h) into ring slot `st`, completing on its full barrier.
  auto copy_q_rows = [&](int st, int b, int h) {
    if (lane < p.group) {
      const char* q = static_cast<const char*>(p.q) + (b * p.q_stride_b + (h * p.group + lane) * p.q_stride_h) * kQElem;
      bulk_load(smem + st * Cfg::kStageBytes + Cfg::kQOff + lane * Cfg::kQPitch, q, Cfg::kQRowBytes, &full[st], policy);
    }
  };
  // Tile `tile` of item (b, h) (`nsub` boxes per K / V half, pages from `page`) into ring slot `stage`, with the
  // task's Q rows on its first tile (defer_q, the early loads: their bytes counted, their copy left to the caller).
  auto issue_tile = [&](int b, int h, int tile, int nsub, int page, bool with_q, bool defer_q) {
    page = page < 0 ? 0 : (page >= p.num_pages ? p.num_pages - 1 : page);
    const int ncopy = 2 * kHalves * nsub;
    const uint32_t bytes = ncopy * (128u << box_log2) + (with_q ? p.group * Cfg::kQRowBytes : 0);
    mbar_wait(&empty[stage], phase ^ 1);
    uint8_t* sb = smem + stage * Cfg::kStageBytes;
    if (lane == 0) mbar_arrive_expect_tx(&full[stage], bytes);
    __syncwarp();
    if (lane < ncopy) {
      tma_load_4d(sb + my_dst, my_map, &full[stage], my_half * 64, h, (tile * Cfg::kTile) & page_mask, page, policy);
    }
    if (with_q && !defer_q) copy_q_rows(stage, b, h);
    if (++stage == Cfg::kStages) {
      stage = 0;
      phase ^= 1;
    }
  };
  // Early KV loads (DecodeParams::early_kv_tokens; kEarly): before griddepcontrol.wait, the own bin's first
  // task's tiles that end >= early_kv_tokens tokens before the task's end, at most kEarlyTiles (never more than a lap
  // of the ring: its empty barriers pass without the consumers, which wait for the Q rows, so a second lap would
  // deadlock) and within one window of 32 page ids. Their Q rows are counted in the first tile's expect_tx and copied
  // after the wait. Returns the tiles issued; the loop below goes on from there. Kept out of the loop, whose code is
  // then the plain call's (a check inside it measured +2-9 us on the static split's long tasks, run of b61145d).
  int early_win = -(1 << 30), early_id = 0;  // the early loads' page-id window, handed to the loop's first task
  auto early_tiles_then_wait = [&]() {
    constexpr int kEarlyTiles = kEarlyTilesMax;
    static_assert(kEarlyTiles > 0 && kEarlyTiles < Cfg::kStages, "early KV loads: less than one lap of the ring");
    const int4 task = first_task;
    const int pages_per_tile = ps_log2 >= 6 ? 1 : Cfg::kTile >> ps_log2;
    const int safe_tiles = t_begin < t_end ? (task.z - p.early_kv_tokens) / Cfg::kTile - task.y : 0;
    const int n = max(0, min(min(kEarlyTiles, 32 / pages_per_tile), safe_tiles));
    const int b = task.x / p.num_kv_heads, h = task.x - b * p.num_kv_heads;
    if (n > 0) {
      const int32_t* pt = p.page_table + b * p.page_table_stride;
      const int n_pages = (task.z + page_mask) >> ps_log2;
      const int win = (task.y * Cfg::kTile) >> ps_log2;
      int my_id = 0;
      if (win + lane < n_pages) my_id = __ldg(pt + win + lane);
      early_win = win;
      early_id = my_id;
      const int nsub = (Cfg::kTile + (1 << box_log2) - 1) >> box_log2;  // whole tiles only
      for (int i = 0; i < n; ++i) {
        const int tile = task.y + i, first = (tile * Cfg::kTile) >> ps_log2;
        int page;
        if (first_page >= 0) {
          page = first_page;
          first_page = -1;
        } else {
          page = __shfl_sync(0xffffffffu, my_id, (first + my_sub - win) & 31);
        }
        issue_tile(b, h, tile, nsub, page, i == 0, true);
      }
    }
    pdl_wait_here(p);
    if (n > 0) copy_q_rows(0, b, h);  // the deferred Q rows, into the first early tile's stage
    return n;
  };
  int skip = 0;
  if constexpr (kEarly) skip = early_tiles_then_wait();
  // Own bin, then the claimed tail bins (decode_bin_ring.cuh).
  for (int claimed = 0;; ++claimed) {
  bool asked = false;  // asked the scheduler for the next bin
  int4 next = first_task;  // the bin's first task (prologue or ring)
  for (int t = t_begin; t < t_end; ++t) {
    const int4 task = next;
    // t is the position in the bin's run order (task_in_run)
    if (t + 1 < t_end) next = task_in_run(p, t_begin, t_end, t + 1);  // in flight while this task streams
    const int b = task.x / p.num_kv_heads, h = task.x - b * p.num_kv_heads;
    const int32_t* pt = p.page_table + b * p.page_table_stride;
    const int n_pages = (task.z + page_mask) >> ps_log2;  // table entries inside the length
    const int tile_end = (task.z + Cfg::kTile - 1) / Cfg::kTile;
    // Lane l holds the id of page win + l (the first task after early loads: their window, so the page table is not
    // read again before its next tile; plain kernels: the same code, early_win is always the sentinel).
    int win = early_win, my_id = early_id;
    early_win = -(1 << 30);
    const int tile0 = task.y + skip;
    skip = 0;
    for (int tile = tile0; tile < tile_end; ++tile) {
      const int valid = min(Cfg::kTile, task.z - tile * Cfg::kTile);
      if (!asked && t + 1 == t_end && tile_end - tile <= Cfg::kWantTiles) {
        asked = true;
        if (lane == 0) mbar_arrive(ring.want);
      }
      const int first = (tile * Cfg::kTile) >> ps_log2;            // first page of the tile
      const int nsub = (valid + (1 << box_log2) - 1) >> box_log2;  // boxes per K / V half
      if (first + nsub > win + 32) {  // the tile's pages are not all in the window: reload it
        win = first;
        const int idx = win + lane;
        my_id = 0;  // raw id, clamped after the shuffle: nothing waits for the load before its first use
        if (idx < n_pages) my_id = __ldg(pt + idx);
      }
      int page;
      if (first_page >= 0) {  // the own bin's first tile, one page (>= 64 tokens): id from the plan,
        page = first_page;    // the window's load above is awaited only at the next tile
        first_page = -1;
      } else {
        page = __shfl_sync(0xffffffffu, my_id, (first + my_sub - win) & 31);
      }
      issue_tile(b, h, tile, nsub, page, tile == task.y, false);
    }
  }
  if (!asked && lane == 0) mbar_arrive(ring.want);  // empty bin
  if (!ring_next(ring, claimed, t_begin, t_end, first_task)) break;
  }
}

}  // namespace hpc::attn
