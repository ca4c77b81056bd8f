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
//
// Files: decode_plan_common.cuh (shared state, scans, first pages, the long-request writer),
// decode_plan_fast.cuh (the common dynamic plan), decode_plan_rows.cuh (the same plan for one-head
// batches of up to 256 requests, without block scans), decode_plan_aligned.cuh (the common
// head-major plan: every head's stretch cut alike), decode_plan_general.cuh (tails, wide lines),
// decode_plan_static.cuh (static mode); this file
// holds the three kernels (decode_plan_kernel, decode_plan_aligned_kernel, decode_plan_rows_kernel) and the
// launcher that picks one on the host (plan_kernel_for).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_common.cuh"
#include "hpc_attention/decode_plan_fast.cuh"
#include "hpc_attention/decode_plan_aligned.cuh"
#include "hpc_attention/decode_plan_rows.cuh"
#include "hpc_attention/decode_plan_general.cuh"
#include "hpc_attention/decode_plan_static.cuh"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

// A tail (claimable bins) is planned only by the general plan.
__host__ __device__ inline bool plan_has_tail(const DecodePlanParams& p) {
  return p.tail_percent > 0 && p.tail_bin > 0 && p.max_tail_bins > 0;
}

// The aligned head-major plan is tried (decode_plan_kernel says when it applies; it needs the line
// cut into a multiple of Hkv bins, set_line_order's cut_to_heads).
__host__ __device__ inline bool plan_may_align(const DecodePlanParams& p) {
  return p.line_heads > 1 && p.static_splits <= 0 && !plan_has_tail(p) && p.batch > kPlanThreads &&
         p.cut_bins % p.line_heads == 0;
}

// The aligned head-major row plan applies: the aligned plan may apply (plan_may_align: head-major, dynamic,
// no tail, B x Hkv > kPlanThreads), at most kRowMax * 32 real requests, and a line of all heads that cannot
// leave the fast plan's 32-bit range (as plan_rows_applies). Whether the line is aligned after all (nb ==
// cut_bins) depends on the lengths: the kernel falls back to the one-CTA head-major plan when not.
__host__ __device__ inline bool plan_rows_aligned_applies(const DecodePlanParams& p) {
  if (!plan_may_align(p) || p.line_batch > kRowMax * 32) return false;
  return plan_rows_line_fits(p, static_cast<long long>(p.line_batch) * p.line_heads);
}

// CTAs of the plan's grid. Why more than one: the aligned plan's time at 64/8 batch 256 is mostly
// the heads' table copies leaving one SM (~41 KB of tables against ~5 KB at 8/1; a build writing
// one head of four read 6.3 us against 7.3). So up to kPlanMaxCtas CTAs each plan the
// whole line (same inputs, same arithmetic, same values) and write only their own heads' copies;
// CTA 0 writes the totals. Every other plan, and the aligned plan's fallback, runs on CTA 0 alone
// (the others exit). One CTA when the first-page pass would read bins back from the global tables
// (more bins than kFirstPageSmemBins), which other CTAs write.
constexpr int kPlanMaxCtas = 16;
inline int plan_ctas(const DecodePlanParams& p) {
  if (!plan_may_align(p) || p.num_bins + p.max_tail_bins > kFirstPageSmemBins) return 1;
  return p.line_heads < kPlanMaxCtas ? p.line_heads : kPlanMaxCtas;
}

// Every plan but the aligned and the row plan: one CTA over the whole line (pass 1 and its block
// scan, then the fast, general or static plan), after the kernel's prologue (first-page init,
// by_floor, pdl_wait). w = plan_work(batch, num_kv_heads, dynamic), computed before pdl_wait.
template <bool kHM>
__device__ __forceinline__ void plan_one_cta(const DecodePlanParams& p, const FastDiv& by_floor, const PlanWork& w) {
  const bool dynamic = p.static_splits <= 0;
  const int chunk = w.chunk, r0 = w.r0, r1 = w.r1, h0 = w.h0, h1 = w.h1;
  const int nh = h1 - h0;
  PlanShared& sh = plan_shared();
  const bool tail = plan_has_tail(p);
  auto tiles = tiles_of;

  // Pass 1: tiles of my items (a request's tiles, once per head), non-empty items, clamped
  // lengths (block sum) and the longest request in tiles (block max).
  int v[4] = {0, 0, 0, 0};
  int len0 = 0;
#pragma unroll 1
  for (int b = r0; b < r1; ++b) {
    const int raw = line_len<kHM>(p, b);
    const int len = clamp_len(p, raw);
    if (b == r0) len0 = len;
    const int n = tiles(len);
    v[0] += n * nh;
    v[1] += n > 0 ? nh : 0;
    // (each request once: head 0's copy on the head-major line)
    v[2] += (h0 == 0 && (!kHM || b < p.line_batch) && (raw < 0 || raw > p.max_len)) ? 1 : 0;
    v[3] = max(v[3], n);
  }
  int tot[4];
  block_scan<2, true>(v, tot, sh.scan[0]);
  const int total = tot[0];
  if (dynamic) {
    // The work line: tiles plus each item's charge (ItemCharge; see plan_dynamic_general);
    // charged = non-empty and n * nb0 <= total, i.e. n <= total / nb0 (charged_units). Both bin
    // counts divide by floor_tiles: one reciprocal (FastDiv) serves the two; the charge threshold
    // is tested as a product (no third division).
    const int nb0 = bins_for(by_floor, static_cast<unsigned>(total), p.cut_bins);
    const ItemCharge charge = make_charge(p, nb0, total, tot[3]);
    const int2 charged = charged_units<kHM>(p, r0, r1, nh, len0, charge, tot[3], v[1], tot[1]);
    const long long line = total + static_cast<long long>(charged.y);
    const long long line0 = v[0] + static_cast<long long>(charged.x);
    bool fast = !tail && line <= 0x7fffffffll;
    int nb = 1;
    if (fast) {
      nb = bins_for(by_floor, static_cast<unsigned>(line), p.cut_bins);
      fast = (line + 1) * nb + line < 0xFFFFFFFFll;
    }
    if (fast) {
      plan_fast<kHM>(p, r0, r1, h0, h1, chunk, len0, static_cast<unsigned>(line0), static_cast<unsigned>(line),
                static_cast<unsigned>(nb), charge, total, tot[2]);
    } else {
      plan_dynamic_general<kHM>(p, r0, r1, h0, h1, chunk, len0, line0, line, total, charge, tot[2]);
    }
  } else {
    plan_static(p, r0, r1, total, tot[2]);
  }
  if (p.page_table != nullptr) write_first_pages(p);  // block-uniform
}

// Every plan kernel's entry after its own prologue: the work floor's reciprocal (parameters only, so
// before the lengths load, off the critical path: it followed the first scan once, ~0.05-0.1 us of
// dependent latency), then the PDL wait (the decode kernel waits for our completion anyway,
// so its launch is released at once).
__device__ __forceinline__ FastDiv plan_pdl_entry(const DecodePlanParams& p) {
  FastDiv by_floor;
  by_floor.init(p.min_tiles > 0 ? p.min_tiles : 1);
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  return by_floor;
}

// minBlocksPerSM = 1 spelled out: with only the thread count, ptxas 13.0 sometimes settles on 64
// registers and spills (160-byte stack, 216 bytes in plan_dynamic_general) after unrelated edits
// of the out-of-line plans; with it the kernel takes 108-112 registers and no spill.
template <bool kHM>
__global__ void __launch_bounds__(kPlanThreads, 1) decode_plan_kernel(const __grid_constant__ DecodePlanParams p) {
  // Work per thread (plan_work): dynamic plans split a request's heads over threads when there are
  // fewer requests than threads. Only parameters are read before pdl_wait.
  const PlanWork w = plan_work(p.batch, p.num_kv_heads, p.static_splits <= 0);
  init_first_pages(p);
  const FastDiv by_floor = plan_pdl_entry(p);
  if (blockIdx.x != 0) return;  // one CTA (plan_ctas); only the aligned kernel uses a grid
  plan_one_cta<kHM>(p, by_floor, w);
}

// The aligned kernel's fallback when the line is not aligned after all (a test of the lengths:
// lines shorter than cut_bins floors): the head-major plan on one CTA, out of line so the aligned
// path stays compact.
__device__ __noinline__ void plan_head_major_unaligned(const DecodePlanParams& p, const FastDiv& by_floor) {
  plan_one_cta<true>(p, by_floor, plan_work(p.batch, p.num_kv_heads, true));
}

// Head-major lines that may be aligned (plan_may_align: more virtual requests than planner threads,
// the line cut into a multiple of Hkv bins): the aligned plan (decode_plan_aligned.cuh) on a grid of
// plan_ctas(p) CTAs, in a kernel of its own. Why (H200, batch 256 at 64/8, same
// process, same tables): 5.93-5.99 us as a kernel of its own against 6.22 as
// the branch of decode_plan_kernel it was, 5.88-5.94 with touch_param_lines.
// The body of both aligned kernels: kRows, the row plan over head 0's stretch (decode_plan_rows.cuh), else
// the block-scan aligned plan; either returns false in every CTA when the line is not aligned after all.
template <bool kRows>
__device__ __forceinline__ void plan_aligned_grid(const DecodePlanParams& p) {
  if (threadIdx.x >> 5 == kPlanWarps - 1) touch_param_lines(p);  // never a row warp (kRowMax < kPlanWarps - 1)
  init_first_pages(p);
  const FastDiv by_floor = plan_pdl_entry(p);
  if (kRows ? plan_fast_rows<true>(p, by_floor) : plan_head_major_aligned(p, by_floor)) {
    if (p.page_table != nullptr) write_first_pages(p);  // block-uniform; this CTA's bins only
    return;
  }
  if (blockIdx.x != 0) return;  // the same test failed in every CTA: the fallback is CTA 0's
  __syncthreads();              // the fallback reuses the scan buffers
  plan_head_major_unaligned(p, by_floor);
}

__global__ void __launch_bounds__(kPlanThreads, 1) decode_plan_aligned_kernel(const __grid_constant__ DecodePlanParams p) {
  plan_aligned_grid<false>(p);
}

// Small one-head dynamic batches (plan_rows_applies): the row plan (decode_plan_rows.cuh) in a kernel
// of its own. Why not a branch of decode_plan_kernel: the same plan, tables and
// launch read 5.40-5.58 us there against 4.94-5.05 us as a kernel of its own (batch 256, H200, same
// process). Not cold code (the code warmed by a batch-1
// plan read as a spin kernel did); where ptxas placed the parameter loads of the larger kernel may be
// part of it (the touch that would have told was dropped by ptxas in that measurement; see
// touch_param_lines, which this kernel now uses).
__global__ void __launch_bounds__(kPlanThreads, 1) decode_plan_rows_kernel(const __grid_constant__ DecodePlanParams p) {
  // The last warp never holds a row (kRowMax * 32 <= kPlanThreads / 2): it warms the parameter lines.
  static_assert(kRowMax < kPlanWarps, "an idle warp touches the parameter lines");
  if (threadIdx.x >> 5 == kPlanWarps - 1) touch_param_lines(p);
  plan_fast_rows<false>(p, plan_pdl_entry(p));
  if (p.page_table != nullptr) write_first_pages(p);  // block-uniform; every warp is still here
}

// Aligned head-major lines of at most kRowMax * 32 real requests (plan_rows_aligned_applies: e.g. 64/8 at
// batch 256): the row plan over head 0's stretch, each CTA of the grid writing its heads' copies; the
// one-CTA head-major plan when the line is not aligned after all. Why: the aligned kernel's two block
// scans over a thread per request on all 16 warps (plan_head_major_aligned) against the row plan's warp
// sums on the row warps alone: 64/8 batch 256, H200, same process: 5.22-5.28 us
// against 5.79-5.92 (the row plan with the other warps also running its pass 1, to
// test alignment themselves, read 5.89-5.92).
__global__ void __launch_bounds__(kPlanThreads, 1) decode_plan_rows_aligned_kernel(
    const __grid_constant__ DecodePlanParams p) {
  plan_aligned_grid<true>(p);
}

using PlanKernel = void (*)(DecodePlanParams);

// The kernel for p: head-major lines (set_line_order, p.line_heads > 1) aligned or not, the row plan, or
// the rest.
inline PlanKernel plan_kernel_for(const DecodePlanParams& p) {
  if (p.line_heads > 1) {
    if (plan_rows_aligned_applies(p)) return decode_plan_rows_aligned_kernel;
    return plan_may_align(p) ? decode_plan_aligned_kernel : decode_plan_kernel<true>;
  }
  if (plan_rows_applies(p, plan_has_tail(p))) return decode_plan_rows_kernel;
  return decode_plan_kernel<false>;
}

inline cudaError_t launch_decode_plan(const DecodePlanParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(plan_kernel_for(p), dim3(plan_ctas(p)), dim3(kPlanThreads), 0, stream, pdl, p);
}

}  // namespace hpc::attn
