// The common dynamic plan of a small request-major batch without block-wide scans: see
// decode_plan.cuh for the plan, decode_plan_fast.cuh for the arithmetic and pass 3 it shares.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_common.cuh"
#include "hpc_attention/decode_plan_fast.cuh"
#include "hpc_attention/decode_plan_timeline.cuh"
#include "hpc_common/sm90.cuh"

namespace hpc::attn {

// Why a plan of its own: at batch 256 and one KV head the plan is one CTA's dependent chain, and
// its per-warp timeline (scripts/timeline_plan.py, H200) put ~1.5 us of it between the KV lengths
// landing and the stores: two block scans (pass 1's totals, then pass 2's counts, each a warp scan,
// a barrier and a second warp scan) with the bin arithmetic between them, not instruction fetch
// (the same steps with the code warm in the L2 took as long). Here every warp reads all B <=
// kRowMax * 32 lengths (lane l holds requests 32 k + l, "row" k), so the totals that fix the cut
// (tiles, charged items, the line) come from a per-lane sum and one warp reduction each, the same
// in every warp and without a barrier; warp w owns row w (one request per lane, as plan_work gives
// one per thread): its line positions are the warp-reduced spans of rows < w plus a scan of its own
// row. Only the task / slot / combine counts still cross warps: one named barrier over the active
// warps, after which each warp sums the rows before it. Same tables as plan_fast (the twin and the
// GPU tests compare them).
constexpr int kRowMax = 8;

// The row plan applies: dynamic, request-major, one KV head, no claimable tail, B <= kRowMax * 32,
// and a line that cannot leave the fast plan's 32-bit range whatever the lengths (every request
// clamped to max_len, every item charged), so the decision needs only parameters (block-uniform,
// made before any length is read; the launcher picks decode_plan_rows_kernel by it on the host).
__host__ __device__ inline bool plan_rows_applies(const DecodePlanParams& p, bool tail) {
  if (p.static_splits > 0 || tail || p.line_heads > 1 || p.num_kv_heads != 1 || p.batch > kRowMax * 32) return false;
  const long long bound = static_cast<long long>(p.batch) * (tiles_of(p.max_len) + (p.task_cost > 0 ? p.task_cost : 0));
  return bound <= 0x7fffffffll && (bound + 1) * p.cut_bins + bound < 0xFFFFFFFFll;
}

// The totals warp's part of plan_fast_rows: the barrier, the row sums, the counters (lane k writes
// counter k) and the unused bins' entries.
__device__ __forceinline__ void plan_rows_totals(const DecodePlanParams& p, const int4* row_sums, int rows, unsigned line,
                                                 unsigned nb, unsigned budget, int total, int clamped) {
  const int lane = threadIdx.x & 31;
  hpc::sm90::named_barrier(1, (rows + 1) * 32);
  const int4 r = lane < rows ? row_sums[lane] : make_int4(0, 0, 0, 0);
  const int num_tasks = warp_sum(r.x), num_slots = warp_sum(r.y), num_comb = warp_sum(r.z);
  plan_tl(p, kPtScan2, num_tasks);
  const int nb_used = line > 0 ? static_cast<int>(nb) : 0;
  const int C = p.num_bins + p.max_tail_bins;
#pragma unroll 1
  for (int c = nb_used + lane; c <= C; c += 32) p.bin_start[c] = num_tasks;
  const PlanTotals t{num_tasks, num_comb, line > 0 ? static_cast<int>(budget) : 0, total, num_slots, nb_used, clamped, 0};
  if (lane < kNumCounters) p.counters[lane] = counter_value(t, lane);
}

// The row plan (plan_rows_applies holds). Warp `rows` (the first without a row) is the totals warp: it
// runs pass 1 and the cut as the row warps do, meets them at the barrier, and writes the counters and
// the unused bins' entries, so the row warps go from the barrier straight to pass 3. Later warps return.
__device__ __forceinline__ void plan_fast_rows(const DecodePlanParams& p, const FastDiv& by_floor) {
  const int B = p.batch, rows = (B + 31) >> 5;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  static_assert(kRowMax < kPlanWarps - 1, "the totals warp is neither a row warp nor the touch warp");
  if (w > rows) return;
  const bool totals_warp = w == rows;
  const unsigned ovh = p.task_cost > 0 ? p.task_cost : 0;

  // Pass 1 (every active warp alike): lengths, tiles, clamped flags of all requests.
  int raw[kRowMax];
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) raw[k] = k < rows && 32 * k + lane < B ? p.kv_lens[32 * k + lane] : 0;
  if (p.page_table != nullptr) {
    // No bin has a first task yet (write_first_pages): by the plan's warps, whose barrier below orders
    // this before note_first, and with the lengths already in flight.
    const int ns = min(p.num_bins + p.max_tail_bins, kFirstPageSmemBins);
#pragma unroll 1
    for (int c = threadIdx.x; c < ns; c += rows * 32) plan_shared().first[c].x = -1;
  }
  int n[kRowMax];
  int lane_tiles = 0, lane_clamped = 0;
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) {
    n[k] = tiles_of(clamp_len(p, raw[k]));
    lane_tiles += n[k];
    lane_clamped += raw[k] < 0 || raw[k] > p.max_len ? 1 : 0;  // 0 outside the batch
  }
  plan_tl(p, kPtLens, lane_tiles);
  const int total = warp_sum(lane_tiles);
  const int clamped = warp_sum(lane_clamped);
  // Charged items (item_charged, as plan_fast's cost_of) and each request's span on the
  // line; my line position = the spans of the rows before mine + a scan of my row.
  const unsigned nb0 = static_cast<unsigned>(bins_for(by_floor, static_cast<unsigned>(total), p.cut_bins));
  int lane_charged = 0, lane_before = 0, my_len = 0, my_n = 0;
  unsigned my_ovh = 0;
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) {
    const bool charged = item_charged(n[k], nb0, static_cast<unsigned>(total));
    lane_charged += charged ? 1 : 0;
    const int span = n[k] + (charged ? static_cast<int>(ovh) : 0);
    if (k < w) lane_before += span;
    if (k == w) {  // unrolled selects: no dynamic register indexing
      my_len = clamp_len(p, raw[k]);
      my_n = n[k];
      my_ovh = charged ? ovh : 0u;
    }
  }
  const unsigned line = static_cast<unsigned>(total) + ovh * static_cast<unsigned>(warp_sum(lane_charged));
  const unsigned line0 = static_cast<unsigned>(warp_sum(lane_before) + warp_exclusive_scan(my_n + static_cast<int>(my_ovh)));
  plan_tl(p, kPtScan1, static_cast<int>(line0));
  const unsigned nb = static_cast<unsigned>(bins_for(by_floor, line, p.cut_bins));
  FastCut cut;
  cut.init(line, nb);

  // Pass 2: my request's tasks, slots and combine entries (count_parts); row sums to the other
  // warps through shared memory, one barrier over the active warps.
  int4* row_sums = plan_shared().scan[2];
  if (totals_warp) {
    plan_rows_totals(p, row_sums, rows, line, nb, cut.budget, total, clamped);
    return;
  }
  const int b = w * 32 + lane;
  int cnt[4] = {0, 0, 0, 0};
  if (b < B) {
    if (my_n == 0) {
      cnt[2] = 1;
    } else {
      count_parts(cnt, cut.L.parts(line0 + my_ovh, static_cast<unsigned>(my_n)), 1);
    }
  }
  const int r_tasks = warp_sum(cnt[0]), r_slots = warp_sum(cnt[1]), r_comb = warp_sum(cnt[2]);
  if (lane == 0) row_sums[w] = make_int4(r_tasks, r_slots, r_comb, 0);
  const int e_tasks = warp_exclusive_scan(cnt[0]), e_slots = warp_exclusive_scan(cnt[1]),
            e_comb = warp_exclusive_scan(cnt[2]);
  hpc::sm90::named_barrier(1, (rows + 1) * 32);
  const int4 r = lane < w ? row_sums[lane] : make_int4(0, 0, 0, 0);  // the rows before mine
  const int task = warp_sum(r.x) + e_tasks, slot = warp_sum(r.y) + e_slots, comb = warp_sum(r.z) + e_comb;
  plan_tl(p, kPtScan2, task);

  // Pass 3: plan_fast's writer with one request per thread.
  const bool mine = b < B;
  plan_fast_write<false>(p, cut, mine ? b : B, mine ? b + 1 : B, 0, 1, 1, my_len, line0, ovh, nb0, total, task, slot,
                         comb);
}

}  // namespace hpc::attn
