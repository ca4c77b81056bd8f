// The common dynamic plans of a small batch without block-wide scans: the request-major line at one KV
// head, and the aligned head-major line (several KV heads; decode_plan_aligned.cuh says why one head's
// stretch plans them all). See decode_plan.cuh for the plan, decode_plan_fast.cuh for the arithmetic and
// pass 3 it shares.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_aligned.cuh"
#include "hpc_attention/decode_plan_common.cuh"
#include "hpc_attention/decode_plan_fast.cuh"
#include "hpc_common/sm90.cuh"

namespace hpc::attn {

// Why a plan of its own: at batch 256 and one KV head the plan is one CTA's dependent chain, and
// its per-warp timeline (H200) put ~1.5 us of it between the KV lengths
// landing and the stores: two block scans (pass 1's totals, then pass 2's counts, each a warp scan,
// a barrier and a second warp scan) with the bin arithmetic between them, not instruction fetch
// (the same steps with the code warm in the L2 took as long). Here every warp reads all B <=
// kRowMax * 32 lengths (lane l holds requests 32 k + l, "row" k), so the totals that fix the cut
// (tiles, charged items, the line) come from a per-lane sum and one warp reduction each, the same
// in every warp and without a barrier; warp w owns row w (one request per lane, as plan_work gives
// one per thread): its line positions are the warp-reduced spans of rows < w plus a scan of its own
// row. Only the task / slot / combine counts still cross warps: one named barrier over the active
// warps, after which each warp sums the rows before it. Same tables as plan_fast (the twin and the
// GPU tests compare them). The same form serves aligned head-major lines (64/8 at batch 256:
// 5.73-5.86 us against 6.21-6.59 by block scans). The number of warps running pass 1 and the cut
// was measured both ways there (H200): 16 warps +0.65 us, warp 0 alone handing the cut over
// +1.1 us; the row warps, one per row, stay.
constexpr int kRowMax = 8;

// The row plan applies: dynamic, request-major, one KV head, no claimable tail, B <= kRowMax * 32,
// and a line that cannot leave the fast plan's 32-bit range whatever the lengths (every request
// clamped to max_len, every item charged), so the decision needs only parameters (block-uniform,
// made before any length is read; the launcher picks decode_plan_rows_kernel by it on the host).
// The line of `items` items stays in the fast plan's 32-bit range whatever the lengths (every item clamped
// to max_len and charged its fixed cost).
__host__ __device__ inline bool plan_rows_line_fits(const DecodePlanParams& p, long long items) {
  const long long bound = items * (tiles_of(p.max_len) + (p.task_cost > 0 ? p.task_cost : 0));
  return bound <= 0x7fffffffll && (bound + 1) * p.cut_bins + bound < 0xFFFFFFFFll;
}
__host__ __device__ inline bool plan_rows_applies(const DecodePlanParams& p, bool tail) {
  if (p.static_splits > 0 || tail || p.line_heads > 1 || p.num_kv_heads != 1 || p.batch > kRowMax * 32) return false;
  return plan_rows_line_fits(p, p.batch);
}

// Pass 3 of the aligned row plan: this thread's request b (len tokens, n tiles, ovh_b charged units, at
// head-0 line position pos), copied to this CTA's heads [h0, h1) (A: the head stretches' offsets); a long
// item by its warp. The aligned plan's writer (plan_head_major_aligned) for one request per thread.
__device__ __forceinline__ void write_rows_aligned(const DecodePlanParams& p, const FastCut& cut, const AlignedHeads& A,
                                                   bool mine, int b, int len, int n, unsigned pos, unsigned ovh_b,
                                                   unsigned ovh, int h0, int h1, int task, int slot, int comb) {
  const bool is_long = n > 0 && n + ovh_b > cut.long_units;
  if (mine && !is_long) write_item_copies(p, cut.L, A, cut.nests(ovh), b, len, n, pos, ovh_b, h0, h1, task, slot, comb);
  unsigned mask = __ballot_sync(0xffffffffu, mine && is_long);
  while (mask) {  // rare: an item over more than ~kPlanWalkMax bins, written by the warp
    const int src = __ffs(mask) - 1;
    mask &= mask - 1;
    write_long_request_aligned(p, cut.L, A, src, b, len, n, pos, ovh_b, task, slot, comb, h0, h1);
  }
}

// The row plan: plan_rows_applies (kAligned false) or plan_rows_aligned_applies (kAligned true) holds.
// kAligned: the lengths are the real requests' (line_batch of them), the cut is of the whole line (Hkv
// head stretches of head 0's line), each CTA writes its heads' copies (the heads split over the grid as
// plan_head_major_aligned splits them) and CTA 0 the totals. Returns false, block-uniform and with no
// table written, when the aligned line turns out not aligned (nb < cut_bins): the row warps test it and
// post it to the others (shared memory, named barrier 2), so every warp returns and the caller's fallback
// has the whole CTA. kAligned false: always true; warps past the last row return at once.
template <bool kAligned>
__device__ __forceinline__ bool plan_fast_rows(const DecodePlanParams& p, const FastDiv& by_floor) {
  const int B = kAligned ? p.line_batch : p.batch, rows = (B + 31) >> 5;
  const int H = kAligned ? p.line_heads : 1;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (w >= rows) {
    if constexpr (kAligned) {
      // The warps without a row wait for the row warps' alignment test (barrier 2, which the row warps
      // pass without waiting). Why not run the test themselves: pass 1 on all 16 warps made the 64/8
      // plan 5.89-5.92 us against 5.22-5.28 on the row warps alone (H200, scripts/plan64_probe.cu).
      hpc::sm90::named_barrier(2, kPlanThreads);
      return plan_shared().rows_aligned != 0;
    }
    return true;
  }
  // Parameters only, before the lengths land: this CTA's heads and the bins per head stretch.
  const int ch0 = kAligned ? cta_first_head(H, blockIdx.x) : 0, ch1 = kAligned ? cta_first_head(H, blockIdx.x + 1) : 1;
  const int nb1 = kAligned ? p.cut_bins / H : 0;

  // Pass 1 (every active warp alike): lengths, tiles, clamped flags of all requests.
  int raw[kRowMax];
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) raw[k] = k < rows && 32 * k + lane < B ? p.kv_lens[32 * k + lane] : 0;
  // By the row warps, with the lengths already in flight; their barrier below orders it before note_first.
  // (kAligned: the kernel's init_first_pages over the whole CTA, before the PDL wait.) The page-table test
  // repeated here keeps the row kernel's SASS as measured (the same instructions in the same order).
  if (!kAligned && p.page_table != nullptr) init_first_pages(p, rows * 32);
  int n[kRowMax];
  int lane_tiles = 0, lane_clamped = 0, lane_longest = 0;
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) {
    n[k] = tiles_of(clamp_len(p, raw[k]));
    lane_tiles += n[k];
    lane_longest = max(lane_longest, n[k]);
    lane_clamped += raw[k] < 0 || raw[k] > p.max_len ? 1 : 0;  // 0 outside the batch
  }
  // total: the tiles of every item (kAligned: Hkv x head 0's, which plan_rows_aligned_applies keeps
  // below 2^31).
  const int tiles1 = warp_sum(lane_tiles), total = tiles1 * H;
  const int clamped = warp_sum(lane_clamped);
  // Each item's charge (ItemCharge, as plan_fast's; the longest request warp-reduced, so the cap's
  // rare division is a warp-uniform branch) and each request's span on the line; my line position =
  // the spans of the rows before mine + a scan of my row.
  const unsigned nb0 = static_cast<unsigned>(bins_for(by_floor, static_cast<unsigned>(total), p.cut_bins));
  const ItemCharge charge =
      make_charge(p, nb0, static_cast<unsigned>(total), __reduce_max_sync(0xffffffffu, lane_longest));
  int lane_charge = 0, lane_before = 0, my_len = 0, my_n = 0;
  unsigned my_ovh = 0;
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) {
    const unsigned ck = charge(n[k]);
    lane_charge += static_cast<int>(ck);
    const int span = n[k] + static_cast<int>(ck);
    if (k < w) lane_before += span;
    if (k == w) {  // unrolled selects: no dynamic register indexing
      my_len = clamp_len(p, raw[k]);
      my_n = n[k];
      my_ovh = ck;
    }
  }
  // line1: one head's stretch (the whole line when kAligned is false).
  const unsigned line1 = static_cast<unsigned>(tiles1) + static_cast<unsigned>(warp_sum(lane_charge));
  const unsigned line = line1 * static_cast<unsigned>(H);
  const unsigned line0 = static_cast<unsigned>(warp_sum(lane_before) + warp_exclusive_scan(my_n + static_cast<int>(my_ovh)));
  const unsigned nb = static_cast<unsigned>(bins_for(by_floor, line, p.cut_bins));
  if constexpr (kAligned) {
    // Aligned iff the line fills the cut_bins bins (a multiple of Hkv, set_line_order), as
    // plan_head_major_aligned tests it; every row warp finds the same, thread 0 posts it for the others.
    const bool aligned = static_cast<int>(nb) == p.cut_bins && p.num_bins >= H;
    if (threadIdx.x == 0) plan_shared().rows_aligned = aligned ? 1 : 0;
    hpc::sm90::named_barrier_arrive(2, kPlanThreads);
    if (!aligned) return false;
  }
  FastCut cut;
  cut.init(line, nb);

  // Pass 2: my request's tasks, slots and combine entries (count_parts); row sums to the other
  // warps through shared memory, one barrier over the active warps.
  const int b = w * 32 + lane;
  int cnt[4] = {0, 0, 0, 0};
  if (b < B) {
    if (my_n == 0) {
      cnt[2] = 1;
    } else {
      count_parts(cnt, cut.L.parts(line0 + my_ovh, static_cast<unsigned>(my_n)), 1);
    }
  }
  int4* row_sums = plan_shared().scan[2];
  const int r_tasks = warp_sum(cnt[0]), r_slots = warp_sum(cnt[1]), r_comb = warp_sum(cnt[2]);
  if (lane == 0) row_sums[w] = make_int4(r_tasks, r_slots, r_comb, 0);
  const int e_tasks = warp_exclusive_scan(cnt[0]), e_slots = warp_exclusive_scan(cnt[1]),
            e_comb = warp_exclusive_scan(cnt[2]);
  // One row warp: __syncwarp orders its lanes' row_sums writes (a one-warp bar.sync 1, 32 made
  // compute-sanitizer racecheck report the later first[] hand-off across the CTA barrier, H200 451a2cd).
  if (rows == 1) {
    __syncwarp();
  } else {
    hpc::sm90::named_barrier(1, rows * 32);
  }
  const int4 r = lane < rows ? row_sums[lane] : make_int4(0, 0, 0, 0);
  const bool before = lane < w;
  const int task = warp_sum(before ? r.x : 0) + e_tasks, slot = warp_sum(before ? r.y : 0) + e_slots,
            comb = warp_sum(before ? r.z : 0) + e_comb;
  const int num_tasks = warp_sum(r.x), num_slots = warp_sum(r.y), num_comb = warp_sum(r.z);

  const int nb_used = line > 0 ? static_cast<int>(nb) : 0;
  if (!kAligned || blockIdx.x == 0) {  // num_tasks etc. are head 0's: times H for all heads
    close_unused_bins(p, nb_used, H * num_tasks, rows * 32);
    write_totals(p, {H * num_tasks, H * num_comb, line > 0 ? static_cast<int>(cut.budget) : 0, total, H * num_slots,
                     nb_used, clamped, 0});
  }
  // Pass 3: one request per thread.
  const bool mine = b < B;
  if constexpr (kAligned) {
    const AlignedHeads A{H, B, nb1, line1, num_tasks, num_slots, num_comb};
    write_rows_aligned(p, cut, A, mine, b, my_len, my_n, line0, my_ovh, charge.ovh, ch0, ch1, task, slot, comb);
  } else {  // plan_fast's writer
    plan_fast_write<false>(p, cut, mine ? b : B, mine ? b + 1 : B, 0, 1, 1, my_len, line0, charge, task, slot, comb);
  }
  return true;
}

}  // namespace hpc::attn
