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

// With a page table: bin_first_page[c] = the page id of the first tile of each non-empty bin's
// first task, in one pass after every bin_start / bin_first write of the block (a page-table read
// beside each bin_first write made the threads that write several bins wait one DRAM round trip
// per bin: `ours_plan` 13-22 us instead of 7-9 on the long-request cases, H200 run 2 of 827f151).
// Every entry of bin_start is written by the plan (the twin test compares the whole table); the
// tables are read through L2 (__ldcg): they were written by this kernel.
__device__ __forceinline__ void write_first_pages(const DecodePlanParams& p) {
  __syncthreads();
  const int nbins = p.num_bins + p.max_tail_bins;
  for (int c = threadIdx.x; c < nbins; c += blockDim.x) {
    if (__ldcg(p.bin_start + c) < __ldcg(p.bin_start + c + 1)) {
      const int4 t4 = __ldcg(p.bin_first + c);
      const int b = t4.x / p.num_kv_heads;
      p.bin_first_page[c] = p.page_table[b * p.page_table_stride + ((t4.y * kTileTokens) >> p.page_size_log2)];
    }
  }
}

struct Scan3 {
  int a, b, c;
};

// Inclusive scan over the warp of (a, b, c) (Hillis-Steele with shuffles).
__device__ __forceinline__ Scan3 warp_inclusive_scan(Scan3 v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, v.a, o);
    const int b = __shfl_up_sync(0xffffffffu, v.b, o);
    const int c = __shfl_up_sync(0xffffffffu, v.c, o);
    if (lane >= o) {
      v.a += a;
      v.b += b;
      v.c += c;
    }
  }
  return v;
}

// Exclusive scan over the block of (a, b, c); `total` gets the block sums. Any block size that
// is a multiple of 32, up to 1024.
__device__ __forceinline__ Scan3 block_exclusive_scan(Scan3 v, Scan3& total) {
  __shared__ Scan3 warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const Scan3 inc = warp_inclusive_scan(v, lane);
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    const Scan3 w = warp_inclusive_scan(lane < nwarps ? warp_sums[lane] : Scan3{0, 0, 0}, lane);
    warp_sums[lane] = w;
  }
  __syncthreads();
  const Scan3 base = warp > 0 ? warp_sums[warp - 1] : Scan3{0, 0, 0};
  total = warp_sums[nwarps - 1];
  __syncthreads();  // warp_sums may be reused by the next call
  return Scan3{base.a + inc.a - v.a, base.b + inc.b - v.b, base.c + inc.c - v.c};
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

// ---- dynamic plan, version 3 ------------------------------------------------------------
// Same tables as before (the Python twin is unchanged); the work is organised for latency:
// one thread per request (lengths kept in registers), all 32-bit arithmetic whenever the line
// fits (64-bit division is a software routine), and instead of two divisions per item the
// bins are walked incrementally from one division per request: start(c + 1) = start(c) + q0 +
// carry, where carry comes from the running remainder of c * total mod nb. A request whose
// items span many bins (a long context) is written by its whole warp, one piece per lane.

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

constexpr int kPlanWalkMax = 24;  // a request spanning more bin boundaries is written by its warp

template <typename T>
__device__ __forceinline__ T shfl_t(T v, int src) {
  if constexpr (sizeof(T) == 8) {
    return static_cast<T>(__shfl_sync(0xffffffffu, static_cast<unsigned long long>(v), src));
  } else {
    return static_cast<T>(__shfl_sync(0xffffffffu, static_cast<unsigned>(v), src));
  }
}

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
template <typename T>
__device__ __forceinline__ void plan_dynamic(const DecodePlanParams& p, int r0, int r1, int h0, int h1, int chunk,
                                             int len0, long long line0, long long total_ll, long long total_tiles,
                                             long long nb0, long long nb, int clamped_total, long long ne,
                                             int tail_bin) {
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
  // Owned bins over [0, x1), tail bins over [x1, total_ll).
  const long long x1 = total_ll - ne * tail_bin;
  Line<T> L;
  L.total = static_cast<T>(x1);
  L.nb = static_cast<T>(nb);
  L.q0 = x1 > 0 ? L.total / L.nb : 0;
  L.rr = x1 > 0 ? L.total - L.q0 * L.nb : 0;
  L.tb = static_cast<T>(tail_bin > 0 ? tail_bin : 1);
  L.ne = static_cast<T>(ne);

  // Pass 2: tasks, slots and combine entries of my requests.
  Scan3 cnt{0, 0, 0};
  {
    T pos = static_cast<T>(line0);  // line position of my first request
    for (int b = r0; b < r1; ++b) {
      const int n = tiles(length(b));
      if (n == 0) {
        cnt.c += nh;
        continue;
      }
      const T ovh = cost_of(n);
      const T span = static_cast<T>(n) + ovh;  // one item on the line
      const T S = pos, E = S + span * nh;
      const T bS = L.bin_of(S), bE = L.bin_of(E - 1);
      if (bE - bS <= static_cast<T>(kPlanWalkMax)) {
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
          cnt.a += parts;
          if (parts > 1) {
            cnt.b += parts;
            cnt.c += 1;
          }
        }
      } else {
        for (int h = 0; h < nh; ++h) {
          const T s = S + static_cast<T>(h) * span + ovh;
          const int parts = static_cast<int>(L.bin_of(s + n - 1) - L.bin_of(s)) + 1;
          cnt.a += parts;
          if (parts > 1) {
            cnt.b += parts;
            cnt.c += 1;
          }
        }
      }
      pos = E;
    }
  }
  Scan3 tot2;
  const Scan3 pre2 = block_exclusive_scan(cnt, tot2);
  const int num_tasks = tot2.a;

  // Pass 3: write. Loop bounds are warp-uniform (chunk iterations) for the ballots.
  int task = pre2.a, slot = pre2.b, comb = pre2.c;
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
      is_long = L.bin_of(E - 1) - bS > static_cast<T>(kPlanWalkMax);
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
      const T SS = shfl_t(S, src);
      const T ovh = cost_of(nn);
      const T sp = static_cast<T>(nn) + ovh;
      const int hh0 = __shfl_sync(0xffffffffu, h0, src), hh1 = __shfl_sync(0xffffffffu, h1, src);
      int t_ = __shfl_sync(0xffffffffu, task, src);
      int s_ = __shfl_sync(0xffffffffu, slot, src);
      int c_ = __shfl_sync(0xffffffffu, comb, src);
      for (int h = hh0; h < hh1; ++h) {
        const int item = bb * hkv + h;
        const T s0 = SS + static_cast<T>(h - hh0) * sp, s = s0 + ovh, e = s + nn;
        const T first = L.bin_of(s);
        const int parts = static_cast<int>(L.bin_of(e - 1) - first) + 1;
        if (lane == 0) {  // bins wholly inside the fixed cost: empty, they start at the first task
          for (T c = L.bin_of(s0); c < first; ++c) {
            if (L.start(c) >= s0) p.bin_start[c] = t_;
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
          }
        }
        if (parts > 1) {
          if (lane == 0) p.combine[c_] = make_int4(item, s_, parts, 0);
          ++c_;
          s_ += parts;
        }
        t_ += parts;
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
  for (int c = threadIdx.x; c <= C; c += blockDim.x) {
    if (c >= nb_used) p.bin_start[c] = num_tasks;
  }
  if (threadIdx.x == 0) {
    p.counters[kNumTasks] = num_tasks;
    p.counters[kNumCombine] = tot2.c;
    p.counters[kBudget] = x1 > 0 ? static_cast<int>(div_nonneg(x1 + nb - 1, static_cast<int>(nb))) : 0;
    p.counters[kTotalTiles] = static_cast<int>(total_tiles);
    p.counters[kNumSlots] = tot2.b;
    p.counters[kNumBinsUsed] = nb_used;
    p.counters[kNumClamped] = clamped_total;
    p.counters[kNumTailBins] = static_cast<int>(ne);
  }
}

// Lines of 2^32 units and more (never in practice): out of line, so the common 32-bit plan
// stays one compact stretch of code.
__device__ __noinline__ void plan_dynamic_wide(const DecodePlanParams& p, int r0, int r1, int h0, int h1, int chunk,
                                               int len0, long long line0, long long line, long long total,
                                               long long nb0, long long nb, int clamped, long long ne, int tb) {
  plan_dynamic<unsigned long long>(p, r0, r1, h0, h1, chunk, len0, line0, line, total, nb0, nb, clamped, ne, tb);
}

__device__ __noinline__ void plan_static(const DecodePlanParams& p, int r0, int r1, long long total, int clamped);

__global__ void __launch_bounds__(kPlanThreads) decode_plan_kernel(const __grid_constant__ DecodePlanParams p) {
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();  // the decode kernel waits for our completion anyway
  const int tid = threadIdx.x;
  const int hkv = p.num_kv_heads;
  const bool dynamic = p.static_splits <= 0;
  // Work per thread: a chunk of requests with all their heads, or, for a dynamic plan of fewer
  // requests than threads, one request and a contiguous range of its heads (tpr threads per
  // request): the per-item walk is serial per thread and dominated the 64/8-head plan time.
  // Thread order is item order either way, so the scans below keep the tasks in item order.
  const int tpr = dynamic ? max(1, min(hkv, static_cast<int>(blockDim.x) / p.batch)) : 1;
  int chunk, r0, r1, h0 = 0, h1 = hkv;
  if (tpr > 1) {
    const int b = tid / tpr, sub = tid - b * tpr;
    chunk = 1;
    r0 = min(p.batch, b);
    r1 = min(p.batch, b + 1);
    h0 = sub * hkv / tpr;
    h1 = (sub + 1) * hkv / tpr;
  } else {
    chunk = (p.batch + blockDim.x - 1) / blockDim.x;
    r0 = min(p.batch, tid * chunk);
    r1 = min(p.batch, r0 + chunk);
  }
  const int nh = h1 - h0;
  auto clamp_len = [&](int raw) { return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw); };
  auto length = [&](int b) { return clamp_len(p.kv_lens[b]); };
  auto tiles = [&](int len) { return (len + kTileTokens - 1) / kTileTokens; };

  // Pass 1: tiles of my items (a request's tiles, once per head), clamped lengths, non-empty items.
  Scan3 mine{0, 0, 0};
  int len0 = 0;
  for (int b = r0; b < r1; ++b) {
    const int raw = p.kv_lens[b];
    const int len = clamp_len(raw);
    if (b == r0) len0 = len;
    mine.a += tiles(len) * nh;
    mine.b += (h0 == 0 && (raw < 0 || raw > p.max_len)) ? 1 : 0;
  }
  Scan3 tot1;
  const Scan3 pre1 = block_exclusive_scan(mine, tot1);
  const long long total = tot1.a;
  if (dynamic) {
    // The work line: tiles plus task_cost units per charged item (see plan_dynamic); charged
    // items are counted against the tiles-only bin count nb0, so that needs one more scan.
    const long long ovh = p.task_cost > 0 ? p.task_cost : 0;
    const int floor_tiles = p.min_tiles > 0 ? p.min_tiles : 1;
    long long nb0 = div_nonneg(total, floor_tiles);
    nb0 = nb0 < 1 ? 1 : (nb0 > p.num_bins ? p.num_bins : nb0);
    Scan3 pre_c{0, 0, 0}, tot_c{0, 0, 0};
    if (ovh > 0) {  // block-uniform
      Scan3 charged{0, 0, 0};
      for (int b = r0; b < r1; ++b) {
        const int n = tiles(b == r0 ? len0 : length(b));
        charged.a += n > 0 && static_cast<long long>(n) * nb0 <= total ? nh : 0;
      }
      pre_c = block_exclusive_scan(charged, tot_c);
    }
    const long long line = total + ovh * tot_c.a;
    const long long line0 = static_cast<long long>(pre1.a) + ovh * pre_c.a;
    long long nb = div_nonneg(line, floor_tiles);
    nb = nb < 1 ? 1 : (nb > p.num_bins ? p.num_bins : nb);
    // Claimable tail: only when every owned bin is used (otherwise CTAs are idle anyway).
    // T = tail_percent % of the line (at most what leaves every owned bin its floor) in ne bins of
    // tb >= tail_bin units, ne <= max_tail_bins.
    long long ne = 0, tb = 1;
    if (p.tail_percent > 0 && p.tail_bin > 0 && p.max_tail_bins > 0 && nb == p.num_bins) {
      long long tail = div_nonneg(line * p.tail_percent, 100);
      tail = min(tail, line - nb * floor_tiles);  // negative when the line is short of nb floors
      if (tail > 0) {
        tb = div_nonneg(tail + p.max_tail_bins - 1, p.max_tail_bins);
        tb = tb < p.tail_bin ? p.tail_bin : tb;
        ne = div_nonneg(tail, static_cast<int>(tb));
      }
    }
    if ((line + 1) * nb + line < 0xFFFFFFFFll) {
      plan_dynamic<unsigned>(p, r0, r1, h0, h1, chunk, len0, line0, line, total, nb0, nb, tot1.b, ne,
                             static_cast<int>(tb));
    } else {
      plan_dynamic_wide(p, r0, r1, h0, h1, chunk, len0, line0, line, total, nb0, nb, tot1.b, ne, static_cast<int>(tb));
    }
  } else {
    plan_static(p, r0, r1, total, tot1.b);
  }
  if (p.page_table != nullptr) write_first_pages(p);  // block-uniform
}

// Static mode (the split-KV baseline), out of line like the wide plan.
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
  Scan3 cnt{0, 0, 0};
  for (int b = r0; b < r1; ++b) {
    const int n = tiles(length(b));
    const int parts = item_parts_static(n, p.static_splits);
    cnt.a += parts * hkv;
    cnt.b += parts > 1 ? parts * hkv : 0;
    cnt.c += (parts > 1 || parts == 0) ? hkv : 0;
  }
  Scan3 tot2;
  const Scan3 pre2 = block_exclusive_scan(cnt, tot2);
  const int num_tasks = tot2.a;
  const int C = p.num_bins;
  // Task k goes to bin k % C at position base(k % C) + k / C.
  const int per_bin = num_tasks / C, extra = num_tasks % C;
  auto static_base = [&](int c) { return c * per_bin + min(c, extra); };
  int task = pre2.a, slot = pre2.b, comb = pre2.c;
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
        if (task < C) p.bin_first[task] = t4;  // task k < C is the first of bin k
        if (parts > 1) p.slot_meta[slot + q] = make_int2(slot, parts);
        ++task;
      }
      if (parts > 1) slot += parts;
    }
  }
  const int nb_used = min(num_tasks, C);
  for (int c = tid; c <= C + p.max_tail_bins; c += blockDim.x) p.bin_start[c] = c <= C ? static_base(c) : num_tasks;
  if (tid == 0) {
    p.counters[kNumTasks] = num_tasks;
    p.counters[kNumCombine] = tot2.c;
    p.counters[kBudget] = 0;
    p.counters[kTotalTiles] = static_cast<int>(total);
    p.counters[kNumSlots] = tot2.b;
    p.counters[kNumBinsUsed] = nb_used;
    p.counters[kNumClamped] = clamped;
    p.counters[kNumTailBins] = 0;
  }
}

inline cudaError_t launch_decode_plan(const DecodePlanParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(decode_plan_kernel, dim3(1), dim3(kPlanThreads), 0, stream, pdl, p);
}

}  // namespace hpc::attn
