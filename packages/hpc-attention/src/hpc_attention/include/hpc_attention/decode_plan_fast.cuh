// The decode planner's common dynamic plan (32-bit line, no claimable tail): see decode_plan.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_common.cuh"

namespace hpc::attn {

// ---- dynamic plan ---------------------------------------------------------------------------
// The common plan (no claimable tail, a
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

// The bins a line of `units` is cut into: units / work floor, at least 1, at most cut_bins.
__device__ __forceinline__ int bins_for(const FastDiv& by_floor, unsigned units, int cut_bins) {
  const int nb = static_cast<int>(by_floor(units));
  return nb < 1 ? 1 : (nb > cut_bins ? cut_bins : nb);
}

// The line [0, line) cut into nb bins, bin c = [start(c), start(c + 1)), start(c) = floor(c * line / nb).
struct FastLine {
  unsigned line, nb;
  FastDiv by_line, by_nb;
  // The bin holding unit x < line: ceil((x + 1) * nb / line) - 1 = floor((x * nb + nb - 1) / line).
  __device__ __forceinline__ unsigned bin_of(unsigned x) const { return by_line(x * nb + nb - 1); }
  // The number of bins (tasks) an item of tiles [s, s + n), n >= 1, spans.
  __device__ __forceinline__ int parts(unsigned s, unsigned n) const {
    return static_cast<int>(bin_of(s + n - 1) - bin_of(s)) + 1;
  }
  __device__ __forceinline__ unsigned start(unsigned c) const { return by_nb(c * line); }
  // start(c) >= x, without the division: floor(c * line / nb) >= x  <=>  c * line >= x * nb.
  __device__ __forceinline__ bool starts_at_or_after(unsigned c, unsigned x) const { return c * line >= x * nb; }
};

// A fast plan's cut of the line and what follows from it: the shortest bin q0, the budget (the
// longest bin) and long_units, the most units an item may have and still be written by its own
// thread (kPlanWalkMax shortest bins' worth spans at most kPlanWalkMax + 2 bins; longer items go
// to the warp writers).
struct FastCut {
  FastLine L;
  unsigned q0, budget, long_units;
  __device__ __forceinline__ void init(unsigned line, unsigned nb) {
    L.line = line;
    L.nb = nb;
    L.by_line.init(line > 0 ? line : 1);
    L.by_nb.init(nb);
    q0 = L.by_nb(line);
    budget = q0 + (line - q0 * nb != 0 ? 1 : 0);
    long_units = static_cast<unsigned>(
        min(static_cast<unsigned long long>(q0) * kPlanWalkMax, static_cast<unsigned long long>(line)));
  }
  // Whether a bin can lie wholly inside an item's fixed cost of ovh units: only if it is no
  // longer than the cost.
  __device__ __forceinline__ bool nests(unsigned ovh) const { return ovh > 0 && ovh >= q0; }
};

// The parts of an item whose fixed cost is [s0, s) and tiles [s, e) (len tokens) on line L,
// bins first = bin_of(s) .. last = bin_of(e - 1): fn(q, c, tile, token_end, opens) for part q in
// bin c, starting at the item's tile `tile` and ending at token_end (a part that ends at a bin
// boundary < e ends at (ce - s) * 64 < len, the last part at len). opens: the part starts bin c,
// i.e. no earlier item has tiles there (the first part only when the bin starts at or after my
// fixed cost; every later part starts its bin inside my tiles).
template <typename Fn>
__device__ __forceinline__ void for_each_part(const FastLine& L, unsigned s0, unsigned s, unsigned e, int len,
                                              unsigned first, unsigned last, Fn&& fn) {
  unsigned c = first;
  bool opens = L.starts_at_or_after(c, s0);
  int tile = 0;
  for (int q = 0;; ++q) {
    const bool last_part = c == last;
    const unsigned ce = last_part ? e : L.start(c + 1);
    fn(q, c, tile, last_part ? len : static_cast<int>(ce - s) * kTileTokens, opens);
    if (last_part) break;
    tile = static_cast<int>(ce - s);
    ++c;
    opens = true;
  }
}

// A request whose items span many bins (a long context), written by the whole warp (one part
// per lane), out of line: rare, and the common path stays one compact stretch of code. Every
// lane passes its own values; lane `src`'s request is written; returns src's task / slot /
// combine counters after it.
// Pass 2 of the fast plans over requests [r0, r1) laid from line position pos: each non-empty
// request as `heads` consecutive items of cost_of(n) + n units (cost_of: the plan's ItemCharge), each
// item's parts counted `weight` times (count_parts), an empty request as `heads` combine entries. The fast plan counts its
// thread's heads (weight 1); the aligned plan head 0 alone, weighted by whether this thread's
// counts go into the scan.
template <typename LengthFn, typename CostFn>
__device__ __forceinline__ void count_requests(int (&cnt)[4], const FastLine& L, int r0, int r1, unsigned pos,
                                               int heads, int weight, LengthFn length, CostFn cost_of) {
#pragma unroll 1
  for (int b = r0; b < r1; ++b) {
    const int n = tiles_of(length(b));
    if (n == 0) {
      cnt[2] += heads * weight;
      continue;
    }
    const unsigned ovh_b = cost_of(n), span = n + ovh_b;
    unsigned s = pos + ovh_b;
#pragma unroll 1
    for (int h = 0; h < heads; ++h, s += span) count_parts(cnt, L.parts(s, n), weight);
    pos += span * heads;
  }
}

template <bool kHM>
__device__ __noinline__ int4 write_long_request(const DecodePlanParams& p, const FastLine L, int src, int b, int len,
                                               int n, unsigned S, unsigned ovh, int h0, int h1, int task, int slot,
                                               int comb) {
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
    write_item_by_warp<kHM, unsigned>(p, L, line_item<kHM>(p, bb, h), bb, ll, s0, s0 + oo, s0 + oo + nn, t_, s_, c_);
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

// Pass 3 of the common dynamic plan: write the tasks, slots, combine entries and bin entries of
// this thread's items. This thread owns heads [h0, h1) of requests [r0, r1); `chunk` is the
// block-uniform number of requests per thread (loop bounds are warp-uniform for the ballots);
// line0 = where my first request starts on the line; task / slot / comb = the entries of the items
// before mine (the counting pass's exclusive prefixes); an item of n tiles is charged charge(n) units.
template <bool kHM>
__device__ __forceinline__ void plan_fast_write(const DecodePlanParams& p, const FastCut& cut, int r0, int r1, int h0,
                                                int h1, int chunk, int len0, unsigned line0, const ItemCharge& charge,
                                                int task, int slot, int comb) {
  const int nh = h1 - h0;
  const int lane = threadIdx.x & 31;
  auto length = [&](int b) { return b == r0 ? len0 : clamp_len(p, line_len<kHM>(p, b)); };
  auto tiles = tiles_of;
  const FastLine& L = cut.L;
  const unsigned long_units = cut.long_units;
  const bool nest = cut.nests(charge.ovh);
  unsigned pos = line0;
#pragma unroll 1
  for (int i = 0; i < chunk; ++i) {
    const int b = r0 + i;
    const bool valid = b < r1;
    const int len = valid ? length(b) : 0;
    const int n = tiles(len);
    const unsigned ovh_b = charge(n), span = n + ovh_b;
    const unsigned units = n > 0 ? span * nh : 0;
    const bool is_long = units > long_units;
    if (valid && n == 0) {
#pragma unroll 1
      for (int h = h0; h < h1; ++h) p.combine[comb++] = make_int4(line_item<kHM>(p, b, h), 0, 0, 0);
    } else if (valid && !is_long) {
      unsigned s0 = pos;
#pragma unroll 1
      for (int h = h0; h < h1; ++h, s0 += span) {
        const int item = line_item<kHM>(p, b, h);
        const unsigned s = s0 + ovh_b, e = s + n;
        const unsigned first = L.bin_of(s), last = L.bin_of(e - 1);
        const int parts = static_cast<int>(last - first) + 1;
        const bool split = parts > 1;
        if (nest && ovh_b > 0) write_nested_bins(p, L, s0, first, task);
        for_each_part(L, s0, s, e, len, first, last, [&](int q, unsigned c, int tile, int token_end, bool opens) {
          const int4 t4 = make_int4(item, tile, token_end, split ? slot + q : -1);
          p.tasks[task + q] = t4;
          if (split) p.slot_meta[slot + q] = make_int2(slot, parts);
          if (opens) {
            p.bin_start[c] = task + q;
            p.bin_first[c] = t4;
            note_first(static_cast<int>(c), line_request<kHM>(p, b), tile);
          }
        });
        task += parts;
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
      const int4 r = write_long_request<kHM>(p, L, src, b, len, n, pos, ovh_b, h0, h1, task, slot, comb);
      if (lane == src) {
        task = r.x;
        slot = r.y;
        comb = r.z;
      }
    }
    pos += units;
  }
}

// The common dynamic plan (see above): pass 2 (counts and their block scan), the totals, then
// pass 3 (plan_fast_write). Arguments as plan_fast_write's; line = the line's length, nb its bins.
template <bool kHM>
__device__ __forceinline__ void plan_fast(const DecodePlanParams& p, int r0, int r1, int h0, int h1, int chunk,
                                          int len0, unsigned line0, unsigned line, unsigned nb,
                                          const ItemCharge& charge, int total_tiles, int clamped) {
  const int nh = h1 - h0;
  auto length = [&](int b) { return b == r0 ? len0 : clamp_len(p, line_len<kHM>(p, b)); };
  FastCut cut;
  cut.init(line, nb);

  // Pass 2: tasks, slots and combine entries of my requests.
  int cnt[4] = {0, 0, 0, 0};
  count_requests(cnt, cut.L, r0, r1, line0, nh, 1, length, charge);
  int tot[4];
  block_scan<3, false>(cnt, tot, plan_shared().scan[2]);
  const int num_tasks = tot[0];

  // Counters and the bin_start entries of unused bins first (they need only the totals).
  const int nb_used = line > 0 ? static_cast<int>(nb) : 0;
  close_unused_bins(p, nb_used, num_tasks);
  write_totals(p, {num_tasks, tot[2], line > 0 ? static_cast<int>(cut.budget) : 0, total_tiles, tot[1], nb_used,
                   clamped, 0});

  // Pass 3: write.
  plan_fast_write<kHM>(p, cut, r0, r1, h0, h1, chunk, len0, line0, charge, cnt[0], cnt[1], cnt[2]);
}

}  // namespace hpc::attn
