// The head-major dynamic plan when every head's stretch of the line is cut alike: see
// decode_plan.cuh for the plan, decode_plan_fast.cuh for the arithmetic it shares.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_common.cuh"
#include "hpc_attention/decode_plan_fast.cuh"

namespace hpc::attn {

// The first of the heads that CTA c of the aligned plans' grid writes (the heads split evenly over the CTAs):
// CTA c writes [cta_first_head(H, c), cta_first_head(H, c + 1)).
__device__ __forceinline__ int cta_first_head(int H, unsigned c) {
  return static_cast<int>(c) * H / static_cast<int>(gridDim.x);
}

// Why a plan of its own: the head-major line (set_line_order) is Hkv copies of one stretch (head
// h's items are the requests in order with the same tiles and fixed costs for every h), so
// line = Hkv * line1. When the bin count nb is a multiple of Hkv (always once the batch fills the
// cut_bins bins, which set_line_order rounds down to a multiple of Hkv),
// start(h * nb1 + j) = floor((h * nb1 + j) * Hkv * line1 / nb) = h * line1 + start(j), nb1 = nb / Hkv:
// head h's stretch is cut as head 0's, shifted by h * nb1 bins, and its tasks, slots and combine
// entries sit h times head 0's counts further on. So one thread owns a real request again, plans
// its head-0 item once (length, tiles, charge test, parts) and writes the Hkv copies; with a
// grid of several CTAs (plan_ctas), each CTA plans alike and writes its own heads' copies. The general
// head-major plan works on a virtual batch of B x Hkv one-head requests and repeats that work per
// head (ncu, 64/8 batch 256: 27.6 K warp instructions against 20.1 K for the request-major line).
// Same tables as the general plan: the Python twin plans every head, and its property test checks
// the shift structure this plan relies on (test_planner_props.check_head_copies). Used only when
// B x Hkv exceeds the planner's threads (decode_plan_kernel says why).

// Head h's copies of what a head-0 item's writer produced: offsets per head.
struct AlignedHeads {
  int heads, batch;  // Hkv, real B
  int nb1;           // bins per head stretch
  unsigned line1;    // units per head stretch
  int tasks1, slots1, comb1;  // head 0's totals
};

// Bins wholly inside an item's fixed cost [s0, s) (head-0 positions), for heads [h0, h1): empty,
// they start at the item's first task. Rare (see write_nested_bins).
__device__ __noinline__ void write_nested_bins_aligned(const DecodePlanParams& p, const FastLine L,
                                                       const AlignedHeads A, int h0, int h1, unsigned s0,
                                                       unsigned first, int task) {
  for (unsigned c = L.bin_of(s0); c < first; ++c) {
    if (!L.starts_at_or_after(c, s0)) continue;
    for (int h = h0; h < h1; ++h) p.bin_start[h * A.nb1 + static_cast<int>(c)] = h * A.tasks1 + task;
  }
}

// A request whose item spans many bins, written by the whole warp head by head (one part per
// lane, write_item_by_warp on the global line), heads [ch0, ch1) (this CTA's); lane src's request
// is written. Returns src's head-0 task / slot / combine counters after it.
__device__ __noinline__ int4 write_long_request_aligned(const DecodePlanParams& p, const FastLine L,
                                                        const AlignedHeads A, int src, int b, int len, int n,
                                                        unsigned pos, unsigned ovh, int task, int slot, int comb,
                                                        int ch0, int ch1) {
  const int bb = __shfl_sync(0xffffffffu, b, src);
  const int ll = __shfl_sync(0xffffffffu, len, src);
  const unsigned nn = __shfl_sync(0xffffffffu, n, src);
  const unsigned s0 = __shfl_sync(0xffffffffu, pos, src);
  const unsigned oo = __shfl_sync(0xffffffffu, ovh, src);
  const int t0 = __shfl_sync(0xffffffffu, task, src);
  const int sl0 = __shfl_sync(0xffffffffu, slot, src);
  const int c0 = __shfl_sync(0xffffffffu, comb, src);
  int4 after = make_int4(t0, sl0, c0, 0);
  for (int h = ch0; h < ch1; ++h) {
    int t_ = h * A.tasks1 + t0, s_ = h * A.slots1 + sl0, c_ = h * A.comb1 + c0;
    const unsigned hs0 = h * A.line1 + s0;
    // line request h * B + bb: write_item_by_warp's head-major line_request turns it back into bb
    write_item_by_warp<true, unsigned>(p, L, bb * A.heads + h, h * A.batch + bb, ll, hs0, hs0 + oo, hs0 + oo + nn,
                                       t_, s_, c_);
    after = make_int4(t_ - h * A.tasks1, s_ - h * A.slots1, c_ - h * A.comb1, 0);  // the same for every h
  }
  return after;
}

// Heads [h0, h1)'s copies of request b's head-0 item (len tokens, n tiles, ovh_b charged units from line position
// pos), written by this thread (an item that is not long): an empty item's combine entries, or its tasks,
// slots, combine entries and the bin entries it opens. task / slot / comb: head 0's counters before it.
// Returns the item's parts (0 when empty). Pass 3 of the aligned plan and of the aligned row plan.
__device__ __forceinline__ int write_item_copies(const DecodePlanParams& p, const FastLine& L, const AlignedHeads& A,
                                                 bool nest, int b, int len, int n, unsigned pos, unsigned ovh_b,
                                                 int h0, int h1, int task, int slot, int comb) {
  const int H = A.heads;
  if (n == 0) {
#pragma unroll 1
    for (int h = h0; h < h1; ++h) p.combine[h * A.comb1 + comb] = make_int4(b * H + h, 0, 0, 0);
    return 0;
  }
  const unsigned s = pos + ovh_b, e = s + n;
  const unsigned first = L.bin_of(s), last = L.bin_of(e - 1);
  const int parts = static_cast<int>(last - first) + 1;
  const bool split = parts > 1;
  if (nest && ovh_b > 0) write_nested_bins_aligned(p, L, A, h0, h1, pos, first, task);
  for_each_part(L, pos, s, e, len, first, last, [&](int q, unsigned c, int tile, int token_end, bool opens) {
#pragma unroll 1
    for (int h = h0; h < h1; ++h) {
      const int hs = h * A.slots1 + slot;  // head h's first slot of this item
      const int4 t4 = make_int4(b * H + h, tile, token_end, split ? hs + q : -1);
      const int t = h * A.tasks1 + task + q;
      p.tasks[t] = t4;
      if (split) p.slot_meta[hs + q] = make_int2(hs, parts);
      if (opens) {
        const int hc = h * A.nb1 + static_cast<int>(c);
        p.bin_start[hc] = t;
        p.bin_first[hc] = t4;
        note_first(hc, b, tile);
      }
    }
  });
  if (split) {
#pragma unroll 1
    for (int h = h0; h < h1; ++h) p.combine[h * A.comb1 + comb] = make_int4(b * H + h, h * A.slots1 + slot, parts, 0);
  }
  return parts;
}

// The aligned head-major plan (see above) for a dynamic plan without claimable tail. by_floor:
// the reciprocal of the work floor. Returns false, block-uniform and with nothing written to the
// tables, when the plan is not aligned (fewer bins than cut_bins: only lines shorter than cut_bins
// floors) or not a fast plan (line >= 2^31 units); the caller then runs the general plan
// (after a barrier: this plan's scans used the shared scan buffers).
__device__ __forceinline__ bool plan_head_major_aligned(const DecodePlanParams& p, const FastDiv& by_floor) {
  const int H = p.line_heads, B = p.line_batch;
  const int lane = threadIdx.x & 31;
  // Work per thread (plan_work over the real requests, heads split): the per-request plan is
  // computed by each of the request's threads alike, and each writes the copies of its heads (one
  // thread writing all Hkv copies of the 128K request's ~8 parts made the 64/8 1x128K+31x4K plan
  // 7.6 -> 11.3 us). Only the request's last thread carries its values into the scans, so all of
  // them get the request's exclusive prefixes.
  // This CTA's heads [ch0, ch1) (the grid's CTAs split the heads, plan_ctas), then its threads split
  // those.
  const int ch0 = cta_first_head(H, blockIdx.x), ch1 = cta_first_head(H, blockIdx.x + 1);
  const PlanWork w = plan_work(B, ch1 - ch0, true);
  const int chunk = w.chunk, r0 = w.r0, r1 = w.r1, h0 = ch0 + w.h0, h1 = ch0 + w.h1, sub = w.sub;
  const int mine = sub == (1 << w.k) - 1 ? 1 : 0;  // this thread's values go into the scans
  PlanShared& sh = plan_shared();

  // Pass 1 over head 0's stretch: tiles, non-empty items, clamped lengths (block sum), longest
  // request (block max).
  int v[4] = {0, 0, 0, 0};
  int len0 = 0;
#pragma unroll 1
  for (int b = r0; b < r1; ++b) {
    const int raw = p.kv_lens[b];
    const int len = clamp_len(p, raw);
    if (b == r0) len0 = len;
    const int n = tiles_of(len);
    v[0] += n * mine;
    v[1] += n > 0 ? mine : 0;
    v[2] += (raw < 0 || raw > p.max_len) ? mine : 0;
    v[3] = max(v[3], n);
  }
  int tot[4];
  block_scan<2, true>(v, tot, sh.scan[0]);
  const long long total_ll = static_cast<long long>(H) * tot[0];
  if (total_ll > 0x7fffffffll) return false;
  const unsigned total = static_cast<unsigned>(total_ll);
  const int nb0 = bins_for(by_floor, total, p.cut_bins);
  const ItemCharge charge = make_charge(p, nb0, total, tot[3]);
  // real requests: the request-major reads
  const int2 charged = charged_units<false>(p, r0, r1, mine, len0, charge, tot[3], v[1], tot[1]);
  const long long line1_ll = tot[0] + static_cast<long long>(charged.y);
  const long long line_ll = line1_ll * H;
  if (line_ll > 0x7fffffffll) return false;
  const unsigned line = static_cast<unsigned>(line_ll);
  const int nb = bins_for(by_floor, line, p.cut_bins);
  // Aligned: nb a multiple of Hkv. Tested as nb == cut_bins (a multiple of Hkv when num_bins >= Hkv,
  // set_line_order) instead of nb % Hkv: a division less on the critical path; lines shorter than
  // cut_bins floors (tiny plans) take the general plan.
  if ((line_ll + 1) * nb + line_ll >= 0xFFFFFFFFll || nb != p.cut_bins || p.num_bins < H) return false;

  auto length = [&](int b) { return b == r0 ? len0 : clamp_len(p, p.kv_lens[b]); };
  FastCut cut;
  cut.init(line, static_cast<unsigned>(nb));
  const FastLine& L = cut.L;
  const unsigned budget = cut.budget, long_units = cut.long_units;
  const bool nest = cut.nests(charge.ovh);
  const unsigned line0 = static_cast<unsigned>(v[0]) + static_cast<unsigned>(charged.x);

  // Pass 2: head 0's tasks, slots and combine entries of my requests.
  int cnt[4] = {0, 0, 0, 0};
  count_requests(cnt, L, r0, r1, line0, 1, mine, length, charge);
  int tot2[4];
  block_scan<3, false>(cnt, tot2, sh.scan[2]);
  AlignedHeads A;
  A.heads = H;
  A.batch = B;
  A.nb1 = nb / H;
  A.line1 = static_cast<unsigned>(line1_ll);
  A.tasks1 = tot2[0];
  A.slots1 = tot2[1];
  A.comb1 = tot2[2];
  const int num_tasks = H * A.tasks1;

  if (blockIdx.x == 0) {
    close_unused_bins(p, nb, num_tasks);
    write_totals(p, {num_tasks, H * A.comb1, static_cast<int>(budget), static_cast<int>(total), H * A.slots1, nb,
                     tot[2], 0});
  }

  // Pass 3: write this CTA's heads' copies. Loop bounds are warp-uniform (chunk iterations) for the ballots.
  int task = cnt[0], slot = cnt[1], comb = cnt[2];
  unsigned pos = line0;
#pragma unroll 1
  for (int i = 0; i < chunk; ++i) {
    const int b = r0 + i;
    const bool valid = b < r1;
    const int len = valid ? length(b) : 0;
    const int n = tiles_of(len);
    const unsigned ovh_b = charge(n);
    const unsigned units = n > 0 ? n + ovh_b : 0;
    const bool is_long = units > long_units;
    if (valid && !is_long) {
      const int parts = write_item_copies(p, L, A, nest, b, len, n, pos, ovh_b, h0, h1, task, slot, comb);
      task += parts;
      if (parts != 1) ++comb;  // an empty item's entry, or a split one's
      if (parts > 1) slot += parts;
    }
    // one flag per request (its threads share a warp); the warp writes all its heads
    unsigned mask = __ballot_sync(0xffffffffu, valid && n > 0 && is_long && sub == 0);
    while (mask) {
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      const int4 r = write_long_request_aligned(p, L, A, src, b, len, n, pos, ovh_b, task, slot, comb, ch0, ch1);
      if (lane == src) {
        task = r.x;
        slot = r.y;
        comb = r.z;
      }
    }
    pos += units;
  }
  return true;
}

}  // namespace hpc::attn
