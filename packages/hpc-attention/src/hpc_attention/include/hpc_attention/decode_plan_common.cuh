// Pieces shared by the decode planner's plans (decode_plan.cuh): the block's shared state, the
// first-page table, the block scans, small integer helpers and the warp writer of one item of a
// long request.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"

namespace hpc::attn {

constexpr int kPlanWarps = kPlanThreads / 32;
constexpr int kPlanThreadsLog2 = 9;
static_assert(kPlanThreads == 1 << kPlanThreadsLog2 && kPlanWarps <= 32, "the planner's scans assume 512 threads");

// The items a planner thread owns: requests [r0, r1) (`chunk` per thread, block-uniform) and
// heads [h0, h1) of each. With split_heads and fewer requests than threads, 2^k threads share one
// request (sub: this thread's index among them; the largest power of two <= heads with
// B * 2^k <= kPlanThreads: shifts instead of the divisions a general split needs) and split its
// heads; else a thread owns whole requests. Thread order is item order either way, so the block
// scans keep the tasks in item order. Why split heads: the per-item work is serial per thread and
// dominated the 64/8-head plan time.
struct PlanWork {
  int k, sub, chunk, r0, r1, h0, h1;
};
__device__ __forceinline__ PlanWork plan_work(int batch, int heads, bool split_heads) {
  PlanWork w;
  w.k = 0;
  if (split_heads && batch <= kPlanThreads) {
    const int k_heads = 31 - __clz(heads);                                // floor(log2(heads))
    const int k_threads = kPlanThreadsLog2 - (32 - __clz(batch - 1));    // 9 - ceil(log2(B))
    w.k = max(0, min(k_heads, k_threads));
  }
  const int tid = threadIdx.x;
  w.sub = tid & ((1 << w.k) - 1);
  w.chunk = w.k > 0 ? 1 : (batch + kPlanThreads - 1) >> kPlanThreadsLog2;
  w.r0 = min(batch, (tid >> w.k) * w.chunk);
  w.r1 = min(batch, w.r0 + w.chunk);
  w.h0 = (w.sub * heads) >> w.k;
  w.h1 = ((w.sub + 1) * heads) >> w.k;
  return w;
}

// Bins whose first task's (request, first tile) the plan keeps in shared memory for the first
// page ids (write_first_pages); bins beyond it (never with the default workspaces: 3 x the SM
// count) are read back from the global tables.
constexpr int kFirstPageSmemBins = 2048;

struct PlanShared {
  // One buffer per block scan of a plan (pass 1, charged items, task counts): a scan has a single
  // barrier, so a warp may start writing the next scan's buffer while others still read this one.
  int4 scan[3][kPlanWarps];
  int2 first[kFirstPageSmemBins];  // {request, first tile} of each non-empty bin's first task; x = -1: empty
  int param_sink[32];              // touch_param_lines' loaded words (never read)
  int rows_aligned;                // the aligned row plan's test, for the warps without a row (1: aligned)
};

__device__ __forceinline__ PlanShared& plan_shared() {
  __shared__ PlanShared s;
  return s;
}

// Why: after the benchmarks' L2 flush (and in serving, after a step that streamed the KV cache) the
// parameter block's constant lines are in DRAM, and ptxas places some c[0x0][...] loads (the cut's bin
// count, table pointers) after the lengths have landed, where a line's first touch is one more dependent
// round trip. One lane per 16 bytes of the block (the block starts at c[0x0][0x210]: 16-byte steps meet
// every line whatever its size) loads a word at entry, so every line's miss overlaps the first; the
// words go to a volatile shared sink, or ptxas drops the loads with the unread stores. Measured on the
// row kernel (scripts/plan_probe.cu, H200): 5.06-5.09 us against 5.20 without. Call from a warp with
// nothing else to do at entry (it waits for the lines).
__device__ __forceinline__ void touch_param_lines(const DecodePlanParams& p) {
  constexpr int kSteps = static_cast<int>((sizeof(DecodePlanParams) + 15) / 16);
  static_assert(kSteps <= 32, "one warp's lanes cover the parameter block");
  const int lane = threadIdx.x & 31;
  if (lane < kSteps) {
    reinterpret_cast<volatile int*>(plan_shared().param_sink)[lane] = reinterpret_cast<const int*>(&p)[lane * 4];
  }
}

// No bin has a first task yet (write_first_pages reads x = -1 as empty): threads [0, threads) of the CTA,
// before a barrier that orders this before note_first (the plan's first block scan; the row plan's named
// barrier over its row warps).
__device__ __forceinline__ void init_first_pages(const DecodePlanParams& p, int threads = kPlanThreads) {
  if (p.page_table == nullptr) return;
  const int ns = min(p.num_bins + p.max_tail_bins, kFirstPageSmemBins);
#pragma unroll 1
  for (int c = threadIdx.x; c < ns; c += threads) plan_shared().first[c].x = -1;
}

// Beside every bin_first write: what write_first_pages needs, without reading the tables back.
__device__ __forceinline__ void note_first(int c, int b, int tile) {
  if (c < kFirstPageSmemBins) plan_shared().first[c] = make_int2(b, tile);
}

// Bins from kFirstPageSmemBins on (only for workspaces with that many bins): from the global
// tables, as the plan wrote them (read through L2, __ldcg: this kernel wrote them).
__device__ __noinline__ void write_first_pages_global(const DecodePlanParams& p) {
  const int nbins = p.num_bins + p.max_tail_bins;
#pragma unroll 1
  for (int c = kFirstPageSmemBins + threadIdx.x; c < nbins; c += kPlanThreads) {
    if (__ldcg(p.bin_start + c) < __ldcg(p.bin_start + c + 1)) {
      const int4 t4 = __ldcg(p.bin_first + c);
      const int b = t4.x / (p.line_heads > 1 ? p.line_heads : p.num_kv_heads);
      p.bin_first_page[c] = p.page_table[b * p.page_table_stride + ((t4.y * kTileTokens) >> p.page_size_log2)];
    }
  }
}

// With a page table: bin_first_page[c] = the page id of the first tile of each non-empty bin's
// first task, in one pass after a block barrier that follows every bin_first write (a page-table
// read beside each bin_first write made the threads that write several bins wait one DRAM round
// trip per bin: `ours_plan` 13-22 us instead of 7-9 on the long-request cases, H200 run 2 of
// 827f151). The (request, tile) of each bin comes from shared memory (note_first), so the pass is
// one page-table read per bin, not two dependent reads of bin_start / bin_first from L2 first.
// Entries of empty bins are not written.
__device__ __forceinline__ void write_first_pages(const DecodePlanParams& p) {
  __syncthreads();
  const int nbins = p.num_bins + p.max_tail_bins;
  const int ns = min(nbins, kFirstPageSmemBins);
  const PlanShared& sh = plan_shared();
#pragma unroll 1
  for (int c = threadIdx.x; c < ns; c += kPlanThreads) {
    const int2 f = sh.first[c];
    if (f.x >= 0) {
      p.bin_first_page[c] = p.page_table[f.x * p.page_table_stride + ((f.y * kTileTokens) >> p.page_size_log2)];
    }
  }
  if (nbins > kFirstPageSmemBins) write_first_pages_global(p);
}

// Block-wide exclusive scan of v[0..S) (v gets the prefixes, tot the block totals) with a single
// barrier: each warp scans its lanes, lane 31 posts the warp's sums, and after the barrier every
// warp scans the kPlanWarps posted sums itself (instead of warp 0 alone between two more
// barriers, and a third before the buffer may be reused: the old scan was 3 barriers, the plan
// ran 3 of them). kReduce: v[S] is also summed and v[S + 1] maxed over the block (into tot[S],
// tot[S + 1]; values >= 0). buf: this scan's own PlanShared::scan buffer.
template <int S, bool kReduce>
__device__ __forceinline__ void block_scan(int (&v)[4], int (&tot)[4], int4* buf) {
  static_assert(S >= 1 && S + (kReduce ? 2 : 0) <= 4, "at most 4 values per scan");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inc[4] = {v[0], v[1], v[2], v[3]};
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const int t = __shfl_up_sync(0xffffffffu, inc[i], o);
      if (lane >= o) inc[i] += t;
    }
  }
  if constexpr (kReduce) {
    inc[S] = __reduce_add_sync(0xffffffffu, v[S]);
    inc[S + 1] = __reduce_max_sync(0xffffffffu, v[S + 1]);
  }
  if (lane == 31) buf[warp] = make_int4(inc[0], inc[1], inc[2], inc[3]);
  __syncthreads();
  const int4 x = lane < kPlanWarps ? buf[lane] : make_int4(0, 0, 0, 0);
  int w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int o = 1; o < kPlanWarps; o <<= 1) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const int t = __shfl_up_sync(0xffffffffu, w[i], o);
      if (lane >= o) w[i] += t;
    }
  }
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int base = __shfl_sync(0xffffffffu, w[i], (warp + 31) & 31);
    tot[i] = __shfl_sync(0xffffffffu, w[i], kPlanWarps - 1);
    v[i] = (warp > 0 ? base : 0) + inc[i] - v[i];
  }
  if constexpr (kReduce) {
    tot[S] = __reduce_add_sync(0xffffffffu, w[S]);
    tot[S + 1] = __reduce_max_sync(0xffffffffu, w[S + 1]);
  }
}

// Warp-level pieces of the scans above, for plans that cross warps without a block scan
// (decode_plan_rows.cuh): the warp's sum, and an exclusive scan over its lanes.
__device__ __forceinline__ int warp_sum(int v) { return __reduce_add_sync(0xffffffffu, v); }

__device__ __forceinline__ int warp_exclusive_scan(int v) {
  const int lane = threadIdx.x & 31;
  int inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += t;
  }
  return inc - v;
}

// a / b for a >= 0, b > 0: a 32-bit division whenever a fits (a 64-bit division is a long
// inlined routine, and every instruction of this one-CTA kernel is fetched cold after an L2
// flush: the planner measured ~50 % of its stall cycles on instruction fetch).
__device__ __forceinline__ long long div_nonneg(long long a, int b) {
  return a <= 0x7fffffffll ? static_cast<long long>(static_cast<unsigned>(a) / static_cast<unsigned>(b)) : a / b;
}

// A request's KV length as every plan uses it: clamped into [0, max_len] (lengths come from the
// device and are not validated under graph capture), and its number of 64-token tiles.
__device__ __forceinline__ int clamp_len(const DecodePlanParams& p, int raw) {
  return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw);
}
__host__ __device__ __forceinline__ int tiles_of(int len) { return (len + kTileTokens - 1) / kTileTokens; }

// The line's request v as (real request, head): v itself and head h on the request-major line;
// on the head-major line (set_line_order) v = head * B + request, split with the precomputed
// reciprocal of B (a multiply-high and one correction, as FastDiv).
__device__ __forceinline__ int2 line_request_head(const DecodePlanParams& p, int v) {
  unsigned q = __umulhi(static_cast<unsigned>(v), p.line_batch_magic);
  int r = v - static_cast<int>(q) * p.line_batch;
  if (r >= p.line_batch) {
    r -= p.line_batch;
    ++q;
  }
  return make_int2(r, static_cast<int>(q));
}
// kHM: the plan's line order as a template parameter of the planner kernel (true iff
// p.line_heads > 1, see plan_kernel_for), so the request-major plans (every plan at one KV head)
// carry no line-order branch in their per-request loops.
// The real request of line request v (page-table row, KV length).
template <bool kHM>
__device__ __forceinline__ int line_request(const DecodePlanParams& p, int v) {
  if constexpr (kHM) {
    return line_request_head(p, v).x;
  } else {
    return v;
  }
}
// The item id (request * Hkv + head) of head h of line request v.
template <bool kHM>
__device__ __forceinline__ int line_item(const DecodePlanParams& p, int v, int h) {
  if constexpr (kHM) {
    const int2 rh = line_request_head(p, v);
    return rh.x * p.line_heads + rh.y;
  } else {
    return v * p.num_kv_heads + h;
  }
}
// The raw KV length of line request v.
template <bool kHM>
__device__ __forceinline__ int line_len(const DecodePlanParams& p, int v) { return p.kv_lens[line_request<kHM>(p, v)]; }

__device__ __forceinline__ int static_chunk(int n, int splits) { return (n + splits - 1) / splits; }
__device__ __forceinline__ int item_parts_static(int n, int splits) {
  if (n == 0) return 0;
  const int chunk = static_chunk(n, splits);
  return (n + chunk - 1) / chunk;
}

// The fixed cost charged to an item of n tiles on the work line (decode_plan_general.cuh says why
// items are charged): ovh units iff 1 <= n and n * nb0 <= total tiles (n <= q_t = total / nb0, the
// tiles-only budget; tested as a product, no division), and with p.cost_cap at most q_t - n, so the
// charge never makes an item whose tiles fit one bin longer than that budget. Why the cap: without it
// many equal short items whose tiles fill the budget exactly (8/1 64x0.5K FP8: 8 tiles + 4 units on a
// budget of 8) are each cut in two for the charge's sake, and every cut costs a split merge at the
// call's end (heuristics.TASK_COST_CAP). cap = q_t when some item may reach it (make_charge), else
// 0xffffffff: every charged item then takes ovh, and the division is not made.
struct ItemCharge {
  unsigned ovh, nb0, total, cap;
  __device__ __forceinline__ unsigned operator()(int n) const {
    if (n <= 0 || static_cast<unsigned long long>(n) * nb0 > total) return 0u;
    const unsigned room = cap - static_cast<unsigned>(n);  // >= 0: n <= q_t when charged
    return room < ovh ? room : ovh;
  }
  // Some item may be charged less than ovh (make_charge found the cap may bind).
  __device__ __forceinline__ bool capped() const { return cap != 0xffffffffu; }
};

// The plan's charge rule. longest: the longest request in tiles (any value at least the longest of the
// items this thread charges gives the same charges; only whether the division is made depends on it).
// Block- or warp-uniform in every plan, so the division is a uniform branch: the row plan's first form,
// each lane with its own longest, read ~0.2 us slower at batch 256.
__device__ __forceinline__ ItemCharge make_charge(const DecodePlanParams& p, unsigned nb0, unsigned total,
                                                  int longest) {
  ItemCharge c;
  c.ovh = p.task_cost > 0 ? static_cast<unsigned>(p.task_cost) : 0u;
  c.nb0 = nb0;
  c.total = total;
  const bool may_bind = p.cost_cap != 0 && c.ovh > 0 &&
                        (static_cast<unsigned long long>(longest) + c.ovh) * nb0 > total;
  c.cap = may_bind ? total / nb0 : 0xffffffffu;
  return c;
}

// Charge units {before this thread, in the block} when they are not every non-empty item's ovh: one
// more block scan; out of line (rare: batches with a request longer than the tiles-only budget, i.e.
// long-context mixes, or with cost_cap short items that fill it).
template <bool kHM>
__device__ __noinline__ int2 count_charged(const DecodePlanParams& p, int r0, int r1, int nh, int len0,
                                           ItemCharge charge) {
  int w[4] = {0, 0, 0, 0};
#pragma unroll 1
  for (int b = r0; b < r1; ++b) {
    const int n = tiles_of(b == r0 ? len0 : clamp_len(p, line_len<kHM>(p, b)));
    w[0] += static_cast<int>(charge(n)) * nh;
  }
  int t[4];
  block_scan<1, false>(w, t, plan_shared().scan[1]);
  return make_int2(w[0], t[0]);
}

// Charge units {before this thread, in the block} (block-uniform branch): when every non-empty item
// takes the whole ovh (no request longer than the tiles-only budget, and no capped charge: longest +
// ovh fits it, the usual case) pass 1's counts of the non-empty items serve; otherwise count_charged
// scans once more. `weight`: the items each of this thread's requests stands for (its heads, or 0 for
// a thread whose request another thread counts).
template <bool kHM>
__device__ __forceinline__ int2 charged_units(const DecodePlanParams& p, int r0, int r1, int weight, int len0,
                                              const ItemCharge& charge, int longest, int pre_nonempty,
                                              int nonempty) {
  if (charge.ovh > 0 &&
      (static_cast<unsigned long long>(longest) * charge.nb0 > charge.total || charge.capped())) {
    return count_charged<kHM>(p, r0, r1, weight, len0, charge);
  }
  return make_int2(static_cast<int>(charge.ovh) * pre_nonempty, static_cast<int>(charge.ovh) * nonempty);
}

// Pass 2 of every dynamic plan: an item of `parts` tasks, counted `weight` times, adds its tasks
// and, when split, its slots and one combine entry.
__device__ __forceinline__ void count_parts(int (&cnt)[4], int parts, int weight) {
  cnt[0] += parts * weight;
  if (parts > 1) {
    cnt[1] += parts * weight;
    cnt[2] += weight;
  }
}

// The plan's totals (PlanCounter), written by thread 0; every plan writes them once its counting
// pass is scanned.
struct PlanTotals {
  int tasks, combine, budget, total_tiles, slots, bins_used, clamped, tail_bins;
};
__device__ __forceinline__ void write_totals(const DecodePlanParams& p, const PlanTotals& t) {
  if (threadIdx.x != 0) return;
  p.counters[kNumTasks] = t.tasks;
  p.counters[kNumCombine] = t.combine;
  p.counters[kBudget] = t.budget;
  p.counters[kTotalTiles] = t.total_tiles;
  p.counters[kNumSlots] = t.slots;
  p.counters[kNumBinsUsed] = t.bins_used;
  p.counters[kNumClamped] = t.clamped;
  p.counters[kNumTailBins] = t.tail_bins;
}

// Dynamic plans: the bins from bins_used on hold no task; their bin_start entries (and the table's
// end entry) are the task count. threads: how many of the block's first threads share the loop.
__device__ __forceinline__ void close_unused_bins(const DecodePlanParams& p, int bins_used, int num_tasks,
                                                  int threads = kPlanThreads) {
  const int C = p.num_bins + p.max_tail_bins;
#pragma unroll 1
  for (int c = threadIdx.x; c <= C; c += threads) {
    if (c >= bins_used) p.bin_start[c] = num_tasks;
  }
}

constexpr int kPlanWalkMax = 24;  // a request spanning more bins than about this is written by its warp

// One item of a long request, written by its whole warp (part q by lane q, q + 32, ...): the
// item's fixed cost is [s0, s), its tiles [s, e) of the line L (FastLine or Line<T>); its tasks,
// slots and combine entry go at t_ / s_ / c_ (advanced past them, the same in every lane), and
// the bins that start inside it point at their first task.
template <bool kHM, typename T, typename LineT>
__device__ __forceinline__ void write_item_by_warp(const DecodePlanParams& p, const LineT& L, int item, int bb, int ll,
                                                   T s0, T s, T e, int& t_, int& s_, int& c_) {
  const int lane = threadIdx.x & 31;
  const T first = L.bin_of(s);
  const int parts = static_cast<int>(L.bin_of(e - 1) - first) + 1;
  if (lane == 0) {  // bins wholly inside the fixed cost: empty, they start at the first task
    for (T c = L.bin_of(s0); c < first; ++c) {
      if (L.starts_at_or_after(c, s0)) p.bin_start[c] = t_;
    }
  }
  for (int q = lane; q < parts; q += 32) {
    const T c = first + q;
    const T cs = L.start(c), ce = L.start(c + 1);
    const T gb = s > cs ? s : cs;
    const T ge = e < ce ? e : ce;
    const int token_end = min(ll, static_cast<int>(ge - s) * kTileTokens);
    const int4 t4 = make_int4(item, static_cast<int>(gb - s), token_end, parts > 1 ? s_ + q : -1);
    p.tasks[t_ + q] = t4;
    if (parts > 1) p.slot_meta[s_ + q] = make_int2(s_, parts);
    if (cs >= s0) {
      p.bin_start[c] = t_ + q;
      p.bin_first[c] = t4;
      note_first(static_cast<int>(c), line_request<kHM>(p, bb), t4.y);
    }
  }
  if (parts > 1) {
    if (lane == 0) p.combine[c_] = make_int4(item, s_, parts, 0);
    ++c_;
    s_ += parts;
  }
  t_ += parts;
}

}  // namespace hpc::attn
