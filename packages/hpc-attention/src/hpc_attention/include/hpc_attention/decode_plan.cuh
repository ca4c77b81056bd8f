// Decode planner: builds the task map of the persistent decode kernel on the device, from the
// device-side KV lengths, so a step needs no host sync and replays under a CUDA graph.
//
// Work unit: an item = (request b, KV head h), item = b * Hkv + h, cut into 64-token tiles.
// Dynamic mode: the items' tiles are laid end to end (request order, then head order) and the
// line is cut into nb = min(C, max(1, total / min_tiles)) bins whose boundaries are
// start(c) = floor(c * total / nb): every bin holds floor or ceil of total / nb tiles (the
// budget), at least min_tiles unless the whole batch has fewer. A bin is one persistent CTA's
// work; an item that crosses bin boundaries becomes several tasks (parts) that write partial
// outputs + log-sum-exp into slots (slot_meta[slot] = {first slot, parts} of the item), merged
// later by the combine kernel or by the decode kernel itself; an item that fits one
// bin writes its final output directly. Static mode (the split-KV baseline): every item is
// cut into `static_splits` equal parts and tasks go to bins round robin.
//
// The plain-Python twin (hpc_attention/planner.py) implements the same arithmetic; the tests
// compare the two table by table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

constexpr int kPlanWarps = kPlanThreads / 32;
constexpr int kPlanThreadsLog2 = 9;
static_assert(kPlanThreads == 1 << kPlanThreadsLog2 && kPlanWarps <= 32, "the planner's scans assume 512 threads");

// Bins whose first task's (request, first tile) the plan keeps in shared memory for the first
// page ids (write_first_pages); bins beyond it (never with the default workspaces: 3 x the SM
// count) are read back from the global tables.
constexpr int kFirstPageSmemBins = 2048;

struct PlanShared {
  // One buffer per block scan of a plan (pass 1, charged items, task counts): a scan has a single
  // barrier, so a warp may start writing the next scan's buffer while others still read this one.
  int4 scan[3][kPlanWarps];
  int2 first[kFirstPageSmemBins];  // {request, first tile} of each non-empty bin's first task; x = -1: empty
};

__device__ __forceinline__ PlanShared& plan_shared() {
  __shared__ PlanShared s;
  return s;
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
      const int b = t4.x / p.num_kv_heads;
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

// a / b for a >= 0, b > 0: a 32-bit division whenever a fits (a 64-bit division is a long
// inlined routine, and every instruction of this one-CTA kernel is fetched cold after an L2
// flush: the planner measured ~50 % of its stall cycles on instruction fetch).
__device__ __forceinline__ long long div_nonneg(long long a, int b) {
  return a <= 0x7fffffffll ? static_cast<long long>(static_cast<unsigned>(a) / static_cast<unsigned>(b)) : a / b;
}

__device__ __forceinline__ int static_chunk(int n, int splits) { return (n + splits - 1) / splits; }
__device__ __forceinline__ int item_parts_static(int n, int splits) {
  if (n == 0) return 0;
  const int chunk = static_chunk(n, splits);
  return (n + chunk - 1) / chunk;
}

// ---- dynamic plan, version 4 ------------------------------------------------------------
// Same tables as before (the Python twin is unchanged). The common plan (no claimable tail, a
// line of < 2^31 units, (line + 1) * nb + line < 2^32) runs plan_fast: 32-bit arithmetic, the two
// divisors of the line (its length and the bin count) turned into reciprocals once, so every
// bin_of / start is a multiply-high and one correction instead of a ~15-instruction division, and
// the task count of an item is bin_of(last tile) - bin_of(first tile) + 1 (no serial walk over
// the bins). Tails and wider lines run plan_dynamic_general (out of line, 64-bit, the walk).

// n / d for 0 < d < 2^31 and any 32-bit n, from m = floor((2^32 - 1) / d) computed once per
// divisor: q = umulhi(n, m) is floor(n / d) or one less (m * d > 2^32 - 1 - d, so n * m / 2^32 >
// n / d - 1), and one remainder check makes it exact. 4 instructions per division.
struct FastDiv {
  unsigned d, m;
  __device__ __forceinline__ void init(unsigned divisor) {
    d = divisor;
    m = 0xffffffffu / divisor;
  }
  __device__ __forceinline__ unsigned operator()(unsigned n) const {
    const unsigned q = __umulhi(n, m);
    return n - q * d >= d ? q + 1 : q;
  }
};

// The line [0, line) cut into nb bins, bin c = [start(c), start(c + 1)), start(c) = floor(c * line / nb).
struct FastLine {
  unsigned line, nb;
  FastDiv by_line, by_nb;
  // The bin holding unit x < line: ceil((x + 1) * nb / line) - 1 = floor((x * nb + nb - 1) / line).
  __device__ __forceinline__ unsigned bin_of(unsigned x) const { return by_line(x * nb + nb - 1); }
  __device__ __forceinline__ unsigned start(unsigned c) const { return by_nb(c * line); }
  // start(c) >= x, without the division: floor(c * line / nb) >= x  <=>  c * line >= x * nb.
  __device__ __forceinline__ bool starts_at_or_after(unsigned c, unsigned x) const { return c * line >= x * nb; }
};

constexpr int kPlanWalkMax = 24;  // a request spanning more bins than about this is written by its warp

// One item of a long request, written by its whole warp (part q by lane q, q + 32, ...): the
// item's fixed cost is [s0, s), its tiles [s, e) of the line L (FastLine or Line<T>); its tasks,
// slots and combine entry go at t_ / s_ / c_ (advanced past them, the same in every lane), and
// the bins that start inside it point at their first task.
template <typename T, typename LineT>
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
      note_first(static_cast<int>(c), bb, t4.y);
    }
  }
  if (parts > 1) {
    if (lane == 0) p.combine[c_] = make_int4(item, s_, parts, 0);
    ++c_;
    s_ += parts;
  }
  t_ += parts;
}

// A request whose items span many bins (a long context), written by the whole warp (one part
// per lane), out of line: rare, and the common path stays one compact stretch of code. Every
// lane passes its own values; lane `src`'s request is written; returns src's task / slot /
// combine counters after it.
__device__ __noinline__ int4 write_long_request(const DecodePlanParams& p, const FastLine L, int src, int b, int len,
                                               int n, unsigned S, unsigned ovh, int h0, int h1, int task, int slot,
                                               int comb) {
  const int hkv = p.num_kv_heads;
  const int bb = __shfl_sync(0xffffffffu, b, src);
  const int ll = __shfl_sync(0xffffffffu, len, src);
  const unsigned nn = __shfl_sync(0xffffffffu, n, src);
  const unsigned SS = __shfl_sync(0xffffffffu, S, src);
  const unsigned oo = __shfl_sync(0xffffffffu, ovh, src);
  const int hh0 = __shfl_sync(0xffffffffu, h0, src), hh1 = __shfl_sync(0xffffffffu, h1, src);
  int t_ = __shfl_sync(0xffffffffu, task, src);
  int s_ = __shfl_sync(0xffffffffu, slot, src);
  int c_ = __shfl_sync(0xffffffffu, comb, src);
  unsigned s0 = SS;
  for (int h = hh0; h < hh1; ++h, s0 += nn + oo) {
    write_item_by_warp<unsigned>(p, L, bb * hkv + h, bb, ll, s0, s0 + oo, s0 + oo + nn, t_, s_, c_);
  }
  return make_int4(t_, s_, c_, 0);
}

// Bins wholly inside an item's fixed cost [s0, s) are empty and start at the item's first task.
// Only possible when a bin is no longer than the fixed cost (never with the default costs and
// floors at batch sizes that fill the bins), so out of the common path.
__device__ __noinline__ void write_nested_bins(const DecodePlanParams& p, const FastLine L, unsigned s0, unsigned first,
                                               int task) {
  for (unsigned c = L.bin_of(s0); c < first; ++c) {
    if (L.starts_at_or_after(c, s0)) p.bin_start[c] = task;
  }
}

// The common dynamic plan (see above). This thread owns heads [h0, h1) of requests [r0, r1);
// `chunk` is the block-uniform number of requests per thread; line0 = where my first request
// starts on the line; an item of n tiles is charged `ovh` units iff 1 <= n and n * nb0 <= total_tiles
// (n <= total_tiles / nb0 without that division).
__device__ __forceinline__ void plan_fast(const DecodePlanParams& p, int r0, int r1, int h0, int h1, int chunk,
                                          int len0, unsigned line0, unsigned line, unsigned nb, unsigned ovh,
                                          unsigned nb0, int total_tiles, int clamped) {
  const int hkv = p.num_kv_heads;
  const int nh = h1 - h0;
  const int lane = threadIdx.x & 31;
  auto length = [&](int b) {
    if (b == r0) return len0;
    const int raw = p.kv_lens[b];
    return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw);
  };
  auto tiles = [&](int len) { return (len + kTileTokens - 1) / kTileTokens; };
  auto cost_of = [&](int n) {
    return n > 0 && static_cast<unsigned long long>(n) * nb0 <= static_cast<unsigned>(total_tiles) ? ovh : 0u;
  };
  FastLine L;
  L.line = line;
  L.nb = nb;
  L.by_line.init(line > 0 ? line : 1);
  L.by_nb.init(nb);
  const unsigned q0 = L.by_nb(line);  // the shortest bin
  const unsigned budget = q0 + (line - q0 * nb != 0 ? 1 : 0);
  // A bin can lie wholly inside an item's fixed cost only if it is no longer than the cost.
  const bool nest = ovh >= q0 && ovh > 0;
  // A request of at most kPlanWalkMax shortest bins' worth of units spans at most kPlanWalkMax + 2
  // bins: its thread writes it; longer ones go to write_long_request.
  const unsigned long_units = static_cast<unsigned>(
      min(static_cast<unsigned long long>(q0) * kPlanWalkMax, static_cast<unsigned long long>(line)));

  // Pass 2: tasks, slots and combine entries of my requests.
  int cnt[4] = {0, 0, 0, 0};
  {
    unsigned pos = line0;
#pragma unroll 1
    for (int b = r0; b < r1; ++b) {
      const int n = tiles(length(b));
      if (n == 0) {
        cnt[2] += nh;
        continue;
      }
      const unsigned ovh_b = cost_of(n), span = n + ovh_b;
      unsigned s = pos + ovh_b;
#pragma unroll 1
      for (int h = 0; h < nh; ++h, s += span) {
        const int parts = static_cast<int>(L.bin_of(s + n - 1) - L.bin_of(s)) + 1;
        cnt[0] += parts;
        if (parts > 1) {
          cnt[1] += parts;
          cnt[2] += 1;
        }
      }
      pos += span * nh;
    }
  }
  int tot[4];
  block_scan<3, false>(cnt, tot, plan_shared().scan[2]);
  const int num_tasks = tot[0];

  // Counters and the bin_start entries of unused bins first (they need only the totals).
  const int C = p.num_bins + p.max_tail_bins;
  const int nb_used = line > 0 ? static_cast<int>(nb) : 0;
#pragma unroll 1
  for (int c = threadIdx.x; c <= C; c += kPlanThreads) {
    if (c >= nb_used) p.bin_start[c] = num_tasks;
  }
  if (threadIdx.x == 0) {
    p.counters[kNumTasks] = num_tasks;
    p.counters[kNumCombine] = tot[2];
    p.counters[kBudget] = line > 0 ? static_cast<int>(budget) : 0;
    p.counters[kTotalTiles] = total_tiles;
    p.counters[kNumSlots] = tot[1];
    p.counters[kNumBinsUsed] = nb_used;
    p.counters[kNumClamped] = clamped;
    p.counters[kNumTailBins] = 0;
  }

  // Pass 3: write. Loop bounds are warp-uniform (chunk iterations) for the ballots.
  int task = cnt[0], slot = cnt[1], comb = cnt[2];
  unsigned pos = line0;
#pragma unroll 1
  for (int i = 0; i < chunk; ++i) {
    const int b = r0 + i;
    const bool valid = b < r1;
    const int len = valid ? length(b) : 0;
    const int n = tiles(len);
    const unsigned ovh_b = cost_of(n), span = n + ovh_b;
    const unsigned units = n > 0 ? span * nh : 0;
    const bool is_long = units > long_units;
    if (valid && n == 0) {
#pragma unroll 1
      for (int h = h0; h < h1; ++h) p.combine[comb++] = make_int4(b * hkv + h, 0, 0, 0);
    } else if (valid && !is_long) {
      unsigned s0 = pos;
#pragma unroll 1
      for (int h = h0; h < h1; ++h, s0 += span) {
        const int item = b * hkv + h;
        const unsigned s = s0 + ovh_b, e = s + n;
        unsigned c = L.bin_of(s);
        const unsigned last = L.bin_of(e - 1);
        const int parts = static_cast<int>(last - c) + 1;
        const bool split = parts > 1;
        if (nest && ovh_b > 0) write_nested_bins(p, L, s0, c, task);
        // The first part starts at the item's first tile; it opens its bin unless an earlier
        // item has tiles there (the bin starts before my fixed cost).
        bool opens = L.starts_at_or_after(c, s0);
        int tile = 0;
        for (int q = 0;; ++q) {
          const bool last_part = c == last;
          // A part that ends at a bin boundary < e: (ce - s) * 64 < len; the last part ends at len.
          const unsigned ce = last_part ? e : L.start(c + 1);
          const int4 t4 = make_int4(item, tile, last_part ? len : static_cast<int>(ce - s) * kTileTokens,
                                    split ? slot + q : -1);
          p.tasks[task] = t4;
          if (split) p.slot_meta[slot + q] = make_int2(slot, parts);
          if (opens) {
            p.bin_start[c] = task;
            p.bin_first[c] = t4;
            note_first(static_cast<int>(c), b, tile);
          }
          ++task;
          if (last_part) break;
          tile = static_cast<int>(ce - s);
          ++c;
          opens = true;  // a later part starts its bin inside my tiles
        }
        if (split) {
          p.combine[comb++] = make_int4(item, slot, parts, 0);
          slot += parts;
        }
      }
    }
    unsigned mask = __ballot_sync(0xffffffffu, valid && n > 0 && is_long);
    while (mask) {
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      const int4 r = write_long_request(p, L, src, b, len, n, pos, ovh_b, h0, h1, task, slot, comb);
      if (lane == src) {
        task = r.x;
        slot = r.y;
        comb = r.z;
      }
    }
    pos += units;
  }
}

// ---- dynamic plan, general (claimable tail bins, lines of 2^32 units and more) -------------
// 64-bit arithmetic, out of line. One thread per request (or per head range), and the bins are
// walked incrementally from one division per request: start(c + 1) = start(c) + q0 + carry,
// where carry comes from the running remainder of c * total mod nb. A request whose items span
// many bins is written by its whole warp, one piece per lane.

// The line cut into bins: nb owned bins over [0, total) (bin c = [c * total / nb, (c + 1) * total / nb)),
// then ne claimable tail bins of tb units each over [total, total + ne * tb) (DecodePlanParams).
template <typename T>
struct Line {
  T total, nb, q0, rr;
  T tb, ne;
  __device__ __forceinline__ T start(T c) const { return c <= nb ? c * total / nb : total + (c - nb) * tb; }
  __device__ __forceinline__ T bin_of(T x) const {
    return x < total ? ((x + 1) * nb + total - 1) / total - 1 : nb + (x - total) / tb;
  }
  __device__ __forceinline__ bool starts_at_or_after(T c, T x) const { return start(c) >= x; }
};

// Walk over the bins: bin c = [cs, ce); remn = ((c + 1) * total) mod nb.
template <typename T>
struct BinWalk {
  T c, cs, ce, remn;
  __device__ __forceinline__ void init(const Line<T>& L, T c0) {
    c = c0;
    cs = L.start(c0);
    if (c0 >= L.nb) {  // a tail bin
      ce = cs + L.tb;
      remn = 0;
      return;
    }
    const T rem = c0 * L.total - cs * L.nb;
    const T r2 = rem + L.rr;
    const bool carry = r2 >= L.nb;
    ce = cs + L.q0 + (carry ? 1 : 0);
    remn = carry ? r2 - L.nb : r2;
  }
  __device__ __forceinline__ void advance(const Line<T>& L) {
    ++c;
    cs = ce;
    if (c >= L.nb) {  // tail bins (the incremental walk left bin nb - 1 at ce = start(nb) = total)
      ce = cs + L.tb;
      return;
    }
    const T r2 = remn + L.rr;
    const bool carry = r2 >= L.nb;
    ce = cs + L.q0 + (carry ? 1 : 0);
    remn = carry ? r2 - L.nb : r2;
  }
};

// Fixed cost per item (DecodePlanParams::task_cost): the line holds, for each charged item,
// `ovh` units of fixed cost [s0, s) and then its n tiles [s, s + n); bins cut that line, so a
// bin of many short items gets fewer of them. Charged = non-empty and no longer than the
// tiles-only budget (n * nb0 <= total tiles, nb0 = the bin count of the plan without costs):
// longer items are split into parts anyway, every bin then pays about one task, and a charge at
// the item's start would only move tiles away from the bins that hold the starts (measured:
// 64x0.5K 8/1 lost its 4-tiles-per-bin alignment and ran ~2 us slower). A bin that starts inside
// an item's fixed cost begins at the item's first task; one lying wholly inside it is empty.
// This thread owns heads [h0, h1) of requests [r0, r1) (see decode_plan_kernel); `chunk` is the
// block-uniform number of requests per thread.
__device__ __noinline__ void plan_dynamic_general(const DecodePlanParams& p, int r0, int r1, int h0, int h1,
                                                  int chunk, int len0, long long line0, long long total_ll,
                                                  long long total_tiles, long long nb0, int clamped_total) {
  using T = unsigned long long;
  constexpr int kWalkMax = kPlanWalkMax;
  const int hkv = p.num_kv_heads;
  const int nh = h1 - h0;
  const T task_cost = static_cast<T>(p.task_cost > 0 ? p.task_cost : 0);
  auto cost_of = [&](int n) {  // fixed cost units of an item of n tiles (see above)
    return n > 0 && static_cast<long long>(n) * nb0 <= total_tiles ? task_cost : T(0);
  };
  const int lane = threadIdx.x & 31;
  auto length = [&](int b) {
    if (b == r0) return len0;
    const int raw = p.kv_lens[b];
    return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw);
  };
  auto tiles = [&](int len) { return (len + kTileTokens - 1) / kTileTokens; };
  const int floor_tiles = p.min_tiles > 0 ? p.min_tiles : 1;
  long long nb = div_nonneg(total_ll, floor_tiles);
  nb = nb < 1 ? 1 : (nb > p.num_bins ? p.num_bins : nb);
  // Claimable tail: only when every owned bin is used (otherwise CTAs are idle anyway).
  // T = tail_percent % of the line (at most what leaves every owned bin its floor) in ne bins of
  // tb >= tail_bin units, ne <= max_tail_bins.
  long long ne = 0, tail_bin = 1;
  if (p.tail_percent > 0 && p.tail_bin > 0 && p.max_tail_bins > 0 && nb == p.num_bins) {
    long long tail = div_nonneg(total_ll * p.tail_percent, 100);
    tail = min(tail, total_ll - nb * floor_tiles);  // negative when the line is short of nb floors
    if (tail > 0) {
      tail_bin = div_nonneg(tail + p.max_tail_bins - 1, p.max_tail_bins);
      tail_bin = tail_bin < p.tail_bin ? p.tail_bin : tail_bin;
      ne = div_nonneg(tail, static_cast<int>(tail_bin));
    }
  }
  // Owned bins over [0, x1), tail bins over [x1, total_ll).
  const long long x1 = total_ll - ne * tail_bin;
  Line<T> L;
  L.total = static_cast<T>(x1);
  L.nb = static_cast<T>(nb);
  L.q0 = x1 > 0 ? L.total / L.nb : 0;
  L.rr = x1 > 0 ? L.total - L.q0 * L.nb : 0;
  L.tb = static_cast<T>(tail_bin);
  L.ne = static_cast<T>(ne);

  // Pass 2: tasks, slots and combine entries of my requests.
  int cnt[4] = {0, 0, 0, 0};
  {
    T pos = static_cast<T>(line0);  // line position of my first request
    for (int b = r0; b < r1; ++b) {
      const int n = tiles(length(b));
      if (n == 0) {
        cnt[2] += nh;
        continue;
      }
      const T ovh = cost_of(n);
      const T span = static_cast<T>(n) + ovh;  // one item on the line
      const T S = pos, E = S + span * nh;
      const T bS = L.bin_of(S), bE = L.bin_of(E - 1);
      if (bE - bS <= static_cast<T>(kWalkMax)) {
        BinWalk<T> w;
        w.init(L, bS);
        for (int h = 0; h < nh; ++h) {
          const T s = S + static_cast<T>(h) * span + ovh, e = s + n;
          while (w.ce <= s) w.advance(L);
          int parts = 1;
          while (w.ce < e) {
            w.advance(L);
            ++parts;
          }
          cnt[0] += parts;
          if (parts > 1) {
            cnt[1] += parts;
            cnt[2] += 1;
          }
        }
      } else {
        for (int h = 0; h < nh; ++h) {
          const T s = S + static_cast<T>(h) * span + ovh;
          const int parts = static_cast<int>(L.bin_of(s + n - 1) - L.bin_of(s)) + 1;
          cnt[0] += parts;
          if (parts > 1) {
            cnt[1] += parts;
            cnt[2] += 1;
          }
        }
      }
      pos = E;
    }
  }
  int tot2[4];
  block_scan<3, false>(cnt, tot2, plan_shared().scan[2]);
  const int num_tasks = tot2[0];

  // Pass 3: write. Loop bounds are warp-uniform (chunk iterations) for the ballots.
  int task = cnt[0], slot = cnt[1], comb = cnt[2];
  T pos = static_cast<T>(line0);
  for (int i = 0; i < chunk; ++i) {
    const int b = r0 + i;
    const bool valid = b < r1;
    const int len = valid ? length(b) : 0;
    const int n = tiles(len);
    const T ovh = cost_of(n);
    const T span = static_cast<T>(n) + ovh;
    const T S = pos, E = S + (n > 0 ? span * nh : 0);
    bool is_long = false;
    T bS = 0;
    if (n > 0) {
      bS = L.bin_of(S);
      is_long = L.bin_of(E - 1) - bS > static_cast<T>(kWalkMax);
    }
    if (valid && n == 0) {
      for (int h = h0; h < h1; ++h) p.combine[comb++] = make_int4(b * hkv + h, 0, 0, 0);
    } else if (valid && !is_long) {
      BinWalk<T> w;
      w.init(L, bS);
      for (int h = h0; h < h1; ++h) {
        const int item = b * hkv + h;
        const T s0 = S + static_cast<T>(h - h0) * span, s = s0 + ovh, e = s + n;
        while (w.ce <= s) {  // bins wholly inside my fixed cost: empty, they start at my task
          if (w.cs >= s0) p.bin_start[w.c] = task;
          w.advance(L);
        }
        const bool split = w.ce < e;
        int q = 0;
        while (true) {
          const T gb = s > w.cs ? s : w.cs;
          const T ge = e < w.ce ? e : w.ce;
          const int token_end = min(len, static_cast<int>(ge - s) * kTileTokens);
          const int4 t4 = make_int4(item, static_cast<int>(gb - s), token_end, split ? slot + q : -1);
          p.tasks[task] = t4;
          if (w.cs >= s0) {  // no earlier item has tiles in this bin: the bin starts here
            p.bin_start[w.c] = task;
            p.bin_first[w.c] = t4;
            note_first(static_cast<int>(w.c), b, t4.y);
          }
          ++task;
          ++q;
          if (w.ce < e) {
            w.advance(L);
          } else {
            break;
          }
        }
        if (split) {
          p.combine[comb++] = make_int4(item, slot, q, 0);
          for (int k = 0; k < q; ++k) p.slot_meta[slot + k] = make_int2(slot, q);
          slot += q;
        }
      }
    }
    unsigned mask = __ballot_sync(0xffffffffu, valid && is_long);
    while (mask) {
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      const int bb = __shfl_sync(0xffffffffu, b, src);
      const int nn = __shfl_sync(0xffffffffu, n, src);
      const int ll = __shfl_sync(0xffffffffu, len, src);
      const T SS = static_cast<T>(__shfl_sync(0xffffffffu, static_cast<unsigned long long>(S), src));
      const T ovh = cost_of(nn);
      const T sp = static_cast<T>(nn) + ovh;
      const int hh0 = __shfl_sync(0xffffffffu, h0, src), hh1 = __shfl_sync(0xffffffffu, h1, src);
      int t_ = __shfl_sync(0xffffffffu, task, src);
      int s_ = __shfl_sync(0xffffffffu, slot, src);
      int c_ = __shfl_sync(0xffffffffu, comb, src);
      for (int h = hh0; h < hh1; ++h) {
        const T s0 = SS + static_cast<T>(h - hh0) * sp, s = s0 + ovh;
        write_item_by_warp<T>(p, L, bb * hkv + h, bb, ll, s0, s, s + nn, t_, s_, c_);
      }
      if (lane == src) {
        task = t_;
        slot = s_;
        comb = c_;
      }
    }
    pos = E;
  }

  const int C = p.num_bins + p.max_tail_bins;
  const int nb_used = total_ll > 0 ? static_cast<int>(nb + ne) : 0;
  for (int c = threadIdx.x; c <= C; c += kPlanThreads) {
    if (c >= nb_used) p.bin_start[c] = num_tasks;
  }
  if (threadIdx.x == 0) {
    p.counters[kNumTasks] = num_tasks;
    p.counters[kNumCombine] = tot2[2];
    p.counters[kBudget] = x1 > 0 ? static_cast<int>(div_nonneg(x1 + nb - 1, static_cast<int>(nb))) : 0;
    p.counters[kTotalTiles] = static_cast<int>(total_tiles);
    p.counters[kNumSlots] = tot2[1];
    p.counters[kNumBinsUsed] = nb_used;
    p.counters[kNumClamped] = clamped_total;
    p.counters[kNumTailBins] = static_cast<int>(ne);
  }
}

__device__ __noinline__ void plan_static(const DecodePlanParams& p, int r0, int r1, long long total, int clamped);

// Charged items (1 <= n, n * nb0 <= total) when some request is longer than total / nb0: {my prefix, block total},
// one more block scan; out of line (rare: only batches with a request longer than the
// tiles-only budget, i.e. long-context mixes).
__device__ __noinline__ int2 count_charged(const DecodePlanParams& p, int r0, int r1, int nh, int len0, unsigned nb0,
                                         unsigned total) {
  int w[4] = {0, 0, 0, 0};
#pragma unroll 1
  for (int b = r0; b < r1; ++b) {
    int len = len0;
    if (b != r0) {
      const int raw = p.kv_lens[b];
      len = raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw);
    }
    const int n = (len + kTileTokens - 1) / kTileTokens;
    w[0] += n > 0 && static_cast<unsigned long long>(n) * nb0 <= total ? nh : 0;
  }
  int t[4];
  block_scan<1, false>(w, t, plan_shared().scan[1]);
  return make_int2(w[0], t[0]);
}


__global__ void __launch_bounds__(kPlanThreads) decode_plan_kernel(const __grid_constant__ DecodePlanParams p) {
  const int tid = threadIdx.x;
  const int hkv = p.num_kv_heads;
  const bool dynamic = p.static_splits <= 0;
  // Work per thread: a chunk of requests with all their heads, or, for a dynamic plan of fewer
  // requests than threads, one request and a contiguous range of its heads (tpr = 2^k threads per
  // request, the largest power of two <= Hkv with B * tpr <= kPlanThreads: shifts instead of the
  // divisions a general tpr needs; the most heads per thread is the same for power-of-two Hkv):
  // the per-item work is serial per thread and dominated the 64/8-head plan time. Thread order is
  // item order either way, so the scans below keep the tasks in item order. Only parameters are
  // read before pdl_wait.
  int k = 0;
  if (dynamic && p.batch <= kPlanThreads) {
    const int k_heads = 31 - __clz(hkv);                                  // floor(log2(Hkv)); -1 if 0
    const int k_threads = kPlanThreadsLog2 - (32 - __clz(p.batch - 1));  // 9 - ceil(log2(B))
    k = max(0, min(k_heads, k_threads));
  }
  int chunk, r0, r1, h0 = 0, h1 = hkv;
  if (k > 0) {
    const int b = tid >> k, sub = tid & ((1 << k) - 1);
    chunk = 1;
    r0 = min(p.batch, b);
    r1 = min(p.batch, b + 1);
    h0 = (sub * hkv) >> k;
    h1 = ((sub + 1) * hkv) >> k;
  } else {
    chunk = (p.batch + kPlanThreads - 1) >> kPlanThreadsLog2;
    r0 = min(p.batch, tid * chunk);
    r1 = min(p.batch, r0 + chunk);
  }
  const int nh = h1 - h0;
  PlanShared& sh = plan_shared();
  if (p.page_table != nullptr) {  // no bin has a first task yet (the first scan's barrier orders this)
    const int ns = min(p.num_bins + p.max_tail_bins, kFirstPageSmemBins);
#pragma unroll 1
    for (int c = tid; c < ns; c += kPlanThreads) sh.first[c].x = -1;
  }
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();  // the decode kernel waits for our completion anyway
  auto clamp_len = [&](int raw) { return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw); };
  auto tiles = [&](int len) { return (len + kTileTokens - 1) / kTileTokens; };

  // Pass 1: tiles of my items (a request's tiles, once per head), non-empty items, clamped
  // lengths (block sum) and the longest request in tiles (block max).
  int v[4] = {0, 0, 0, 0};
  int len0 = 0;
#pragma unroll 1
  for (int b = r0; b < r1; ++b) {
    const int raw = p.kv_lens[b];
    const int len = clamp_len(raw);
    if (b == r0) len0 = len;
    const int n = tiles(len);
    v[0] += n * nh;
    v[1] += n > 0 ? nh : 0;
    v[2] += (h0 == 0 && (raw < 0 || raw > p.max_len)) ? 1 : 0;
    v[3] = max(v[3], n);
  }
  int tot[4];
  block_scan<2, true>(v, tot, sh.scan[0]);
  const int total = tot[0];
  if (dynamic) {
    // The work line: tiles plus task_cost units per charged item (see plan_dynamic_general);
    // charged = non-empty and n * nb0 <= total, i.e. n <= thr = total / nb0. When no request is
    // longer than thr (the usual case) every non-empty item is charged and pass 1's count of them
    // serves; otherwise one more scan counts the charged ones.
    // Both bin counts divide by floor_tiles: one reciprocal (FastDiv) serves the two. The charge
    // threshold n <= total / nb0 is tested as n * nb0 <= total (no third division).
    const unsigned ovh = p.task_cost > 0 ? p.task_cost : 0;
    FastDiv by_floor;
    by_floor.init(p.min_tiles > 0 ? p.min_tiles : 1);
    int nb0 = static_cast<int>(by_floor(static_cast<unsigned>(total)));
    nb0 = nb0 < 1 ? 1 : (nb0 > p.num_bins ? p.num_bins : nb0);
    int pre_charged = v[1], charged = tot[1];
    if (ovh > 0 && static_cast<unsigned long long>(tot[3]) * static_cast<unsigned>(nb0) > static_cast<unsigned>(total)) {
      // block-uniform: some request is longer than the tiles-only budget
      const int2 c = count_charged(p, r0, r1, nh, len0, nb0, total);
      pre_charged = c.x;
      charged = c.y;
    }
    const long long line = total + static_cast<long long>(ovh) * charged;
    const long long line0 = v[0] + static_cast<long long>(ovh) * pre_charged;
    const bool tail = p.tail_percent > 0 && p.tail_bin > 0 && p.max_tail_bins > 0;
    bool fast = !tail && line <= 0x7fffffffll;
    int nb = 1;
    if (fast) {
      nb = static_cast<int>(by_floor(static_cast<unsigned>(line)));
      nb = nb < 1 ? 1 : (nb > p.num_bins ? p.num_bins : nb);
      fast = (line + 1) * nb + line < 0xFFFFFFFFll;
    }
    if (fast) {
      plan_fast(p, r0, r1, h0, h1, chunk, len0, static_cast<unsigned>(line0), static_cast<unsigned>(line),
                static_cast<unsigned>(nb), ovh, nb0, total, tot[2]);
    } else {
      plan_dynamic_general(p, r0, r1, h0, h1, chunk, len0, line0, line, total, nb0, tot[2]);
    }
  } else {
    plan_static(p, r0, r1, total, tot[2]);
  }
  if (p.page_table != nullptr) write_first_pages(p);  // block-uniform
}

// Static mode (the split-KV baseline), out of line like the general dynamic plan.
__device__ __noinline__ void plan_static(const DecodePlanParams& p, int r0, int r1, long long total, int clamped) {
  const int tid = threadIdx.x;
  const int hkv = p.num_kv_heads;
  auto length = [&](int b) {
    const int raw = p.kv_lens[b];
    return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw);
  };
  auto tiles = [&](int len) { return (len + kTileTokens - 1) / kTileTokens; };

  // Static mode (the split-KV baseline): every item in `static_splits` equal parts, tasks
  // dealt to the bins round robin.
  int cnt[4] = {0, 0, 0, 0};
  for (int b = r0; b < r1; ++b) {
    const int n = tiles(length(b));
    const int parts = item_parts_static(n, p.static_splits);
    cnt[0] += parts * hkv;
    cnt[1] += parts > 1 ? parts * hkv : 0;
    cnt[2] += (parts > 1 || parts == 0) ? hkv : 0;
  }
  int tot2[4];
  block_scan<3, false>(cnt, tot2, plan_shared().scan[2]);
  const int num_tasks = tot2[0];
  const int C = p.num_bins;
  // Task k goes to bin k % C at position base(k % C) + k / C.
  const int per_bin = num_tasks / C, extra = num_tasks % C;
  auto static_base = [&](int c) { return c * per_bin + min(c, extra); };
  int task = cnt[0], slot = cnt[1], comb = cnt[2];
  for (int b = r0; b < r1; ++b) {
    const int len = length(b);
    const int n = tiles(len);
    const int parts = item_parts_static(n, p.static_splits);
    const int ch = n > 0 ? static_chunk(n, p.static_splits) : 0;
    for (int h = 0; h < hkv; ++h) {
      const int item = b * hkv + h;
      if (parts != 1) p.combine[comb++] = make_int4(item, parts > 1 ? slot : 0, parts, 0);
      for (int q = 0; q < parts; ++q) {
        const int tb = q * ch, te = min(n, tb + ch);
        const int pos = static_base(task % C) + task / C;
        const int4 t4 = make_int4(item, tb, min(len, te * kTileTokens), parts > 1 ? slot + q : -1);
        p.tasks[pos] = t4;
        if (task < C) {  // task k < C is the first of bin k
          p.bin_first[task] = t4;
          note_first(task, b, tb);
        }
        if (parts > 1) p.slot_meta[slot + q] = make_int2(slot, parts);
        ++task;
      }
      if (parts > 1) slot += parts;
    }
  }
  const int nb_used = min(num_tasks, C);
  for (int c = tid; c <= C + p.max_tail_bins; c += kPlanThreads) p.bin_start[c] = c <= C ? static_base(c) : num_tasks;
  if (tid == 0) {
    p.counters[kNumTasks] = num_tasks;
    p.counters[kNumCombine] = tot2[2];
    p.counters[kBudget] = 0;
    p.counters[kTotalTiles] = static_cast<int>(total);
    p.counters[kNumSlots] = tot2[1];
    p.counters[kNumBinsUsed] = nb_used;
    p.counters[kNumClamped] = clamped;
    p.counters[kNumTailBins] = 0;
  }
}

inline cudaError_t launch_decode_plan(const DecodePlanParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(decode_plan_kernel, dim3(1), dim3(kPlanThreads), 0, stream, pdl, p);
}

}  // namespace hpc::attn
