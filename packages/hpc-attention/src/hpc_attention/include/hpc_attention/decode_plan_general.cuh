// The decode planner's general dynamic plan (claimable tail bins, lines of 2^32 units and more),
// out of line: see decode_plan.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_common.cuh"

namespace hpc::attn {

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
// `ovh` units of fixed cost [s0, s) (fewer with cost_cap: ItemCharge) and then its n tiles
// [s, s + n); bins cut that line, so a bin of many short items gets fewer of them. Charged =
// non-empty and no longer than the tiles-only budget (n * nb0 <= total tiles, nb0 = the bin count
// of the plan without costs):
// longer items are split into parts anyway, every bin then pays about one task, and a charge at
// the item's start would only move tiles away from the bins that hold the starts (measured:
// 64x0.5K 8/1 lost its 4-tiles-per-bin alignment and ran ~2 us slower). A bin that starts inside
// an item's fixed cost begins at the item's first task; one lying wholly inside it is empty.
// This thread owns heads [h0, h1) of requests [r0, r1) (see decode_plan_kernel); `chunk` is the
// block-uniform number of requests per thread.
template <bool kHM>
__device__ __noinline__ void plan_dynamic_general(const DecodePlanParams& p, int r0, int r1, int h0, int h1,
                                                  int chunk, int len0, long long line0, long long total_ll,
                                                  long long total_tiles, ItemCharge charge, int clamped_total) {
  using T = unsigned long long;
  constexpr int kWalkMax = kPlanWalkMax;
  const int nh = h1 - h0;
  auto cost_of = [&](int n) { return static_cast<T>(charge(n)); };  // fixed cost units of an item of n tiles
  const int lane = threadIdx.x & 31;
  auto length = [&](int b) { return b == r0 ? len0 : clamp_len(p, line_len<kHM>(p, b)); };
  auto tiles = tiles_of;
  const int floor_tiles = p.min_tiles > 0 ? p.min_tiles : 1;
  long long nb = div_nonneg(total_ll, floor_tiles);
  nb = nb < 1 ? 1 : (nb > p.cut_bins ? p.cut_bins : nb);
  // Claimable tail: only when every owned bin is used (otherwise CTAs are idle anyway).
  // T = tail_percent % of the line (at most what leaves every owned bin its floor) in ne bins of
  // tb >= tail_bin units, ne <= max_tail_bins.
  long long ne = 0, tail_bin = 1;
  if (p.tail_percent > 0 && p.tail_bin > 0 && p.max_tail_bins > 0 && nb == p.cut_bins) {
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
          count_parts(cnt, parts, 1);
        }
      } else {
        for (int h = 0; h < nh; ++h) {
          const T s = S + static_cast<T>(h) * span + ovh;
          const int parts = static_cast<int>(L.bin_of(s + n - 1) - L.bin_of(s)) + 1;
          count_parts(cnt, parts, 1);
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
      for (int h = h0; h < h1; ++h) p.combine[comb++] = make_int4(line_item<kHM>(p, b, h), 0, 0, 0);
    } else if (valid && !is_long) {
      BinWalk<T> w;
      w.init(L, bS);
      for (int h = h0; h < h1; ++h) {
        const int item = line_item<kHM>(p, b, h);
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
            note_first(static_cast<int>(w.c), line_request<kHM>(p, b), t4.y);
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
        write_item_by_warp<kHM, T>(p, L, line_item<kHM>(p, bb, h), bb, ll, s0, s, s + nn, t_, s_, c_);
      }
      if (lane == src) {
        task = t_;
        slot = s_;
        comb = c_;
      }
    }
    pos = E;
  }

  const int nb_used = total_ll > 0 ? static_cast<int>(nb + ne) : 0;
  close_unused_bins(p, nb_used, num_tasks);
  write_totals(p, {num_tasks, tot2[2], x1 > 0 ? static_cast<int>(div_nonneg(x1 + nb - 1, static_cast<int>(nb))) : 0,
                   static_cast<int>(total_tiles), tot2[1], nb_used, clamped_total, static_cast<int>(ne)});
}

}  // namespace hpc::attn
