// Merge of split items inside the decode kernel (heuristics.MERGE): the last
// part of an item to finish merges all parts in the fixed part order (see decode.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/sm90_primitives.cuh"
#include "hpc_attention/split_merge.cuh"

namespace hpc::attn {

// Rows each merging helper thread loads together (merge_split_task): the helpers' 64 threads hold 4 rows per pass,
// so G = 8 takes two passes of dependent L2 round trips with 1 row and one with 2. 2 measured 0.17-0.18 us faster
// than 1 on average over the 24 benchmark cases in two processes. Every output bit is the same either way.
constexpr int kMergeHelperRows = 2;

// ---- merge of split items inside the decode kernel (merge mode) ----------------------------
// Called by the 128 consumer threads together (uniform control flow, named barrier 1).

// Arrival of this CTA on `ctr`, which completes at `need` arrivals. Returns true (in every
// consumer thread) when this arrival is the last one; the counter is then put back to zero.
// Release/acquire through one thread (the split-K semaphore pattern): the named barrier orders
// the 128 threads' partial writes before thread 0's GPU-scope acq_rel fence, whose release is
// cumulative over them; the atomic is the synchronising access; on the last arrival the same
// fence acquires the other parts' writes, and the second barrier hands them to every thread
// (the partials are read with ld.cg, past the non-coherent L1). (An SC fence in every thread
// before the barrier instead cost the arrival 1-4 us more in the TMA kernel.)
// kThreads / kBar: the threads that arrive together (the 128 consumer threads on named barrier 1,
// or the merge helpers of the TMA kernel, see below) and their named barrier; tid = 0 .. kThreads-1.
// known_last (thread 0's; last_by_peek, the arrival peek below): this part is already known to be the last and has
// acquired the others' writes; it does not arrive (it zeroed the counter) and the barriers only hand its own
// partial's writes to the merging threads.
template <int kThreads = 128, int kBar = 1>
__device__ __forceinline__ bool arrive_last(int* ctr, int need, volatile int* flag, int tid, bool known_last = false) {
  named_barrier(kBar, kThreads);
  if (tid == 0) {
    int last = 1;
    if (!known_last) {
      fence_acq_rel_gpu();  // release: every consumer thread's writes (ordered by the barrier)
      const int old = atomicAdd(ctr, 1);
      last = old == need - 1 ? 1 : 0;
      if (last) atomicExch(ctr, 0);  // every arrival of this call is in: zero for the next call
      fence_acq_rel_gpu();  // acquire: the other arrivals' writes before the merge reads them
    }
    *flag = last;
  }
  named_barrier(kBar, kThreads);
  return *flag != 0;
}

// ---- the arrival peek ------------------------------------------------------------------------------
// A part reads its counter a little before its partial is ready (the consumers as their last
// tile starts, a group's merger at level 2 before its level-1 pass). If every other part had arrived by then, this
// part is the last whatever happens next (only P parts arrive): before its own stores, thread 0 acquires (fence after
// the load that saw the others' atomics) and zeroes the counter, and the part merges without arriving, so neither
// arrive_last's release fence (which waits for the part's own partial stores) nor its atomic round trip lies between
// the part's last tile and its merge. Otherwise the part arrives. Same counters, same bits. (Arriving as the last tile
// starts, with two counts per counter word, arrivals and publications, measured 0.4 us slower at 8/1 on average and
// up to 1 us on the two-level items: the last arrival then often waited for another part's publication.)

// Thread 0, before this CTA writes the partial it will arrive with: `seen` is the counter as read earlier (-1: not
// read). True if the other need - 1 parts had all arrived: the arrivals' writes are acquired and the counter zeroed.
__device__ __forceinline__ bool last_by_peek(int* ctr, int seen, int need) {
  if (seen != need - 1) return false;
  fence_acq_rel_gpu();  // acquire: the load read the other arrivals' release atomics
  st_relaxed_gpu(ctr, 0);
  return true;
}

// The level-1 (or one-level) counter of the part in slot `slot` of a split item with meta {first slot f, parts P},
// and the arrivals it needs (see merge_split_task).
struct MergeCounter {
  int index, need;
};
__device__ __forceinline__ MergeCounter level1_counter(int slot, int2 meta) {
  const int f = meta.x, P = meta.y;
  if (P <= kWarpParts) return {f, P};
  const int g = (slot - f) & (kMergeGroups - 1);
  return {f + 1 + g, (P - g + kMergeGroups - 1) / kMergeGroups};
}

// Task of slot `slot` of split item (b, h) with meta = {first slot f, parts P} has written its
// partial: arrive, and if last merge (thread t: rows t / 16 + k kThreads / 16, columns 8 (t % 16)
// .. + 7; kRows of its rows at a time, their loads together). Per output element the arithmetic
// depends on neither kThreads nor kRows.
// known_last (the arrival peek, thread 0's): the part is known to be the last of its level-1 counter (last_by_peek
// before its stores). A group's merger peeks at level 2 before its level-1 pass.
template <int kThreads = 128, int kBar = 1, int kRows = 1>
__device__ __forceinline__ void merge_split_task(const DecodeParams& p, int b, int h, int G, int slot, int2 meta,
                                                 volatile int* flag, int tid, bool known_last = false) {
  constexpr int kRowStep = kThreads / 16;
  constexpr int kPassRows = kRows * kRowStep;  // rows of one pass over the threads
  const float kNegInf = -__int_as_float(0x7f800000);
  const int f = meta.x, P = meta.y;
  const int g = (slot - f) & (kMergeGroups - 1);
  const bool grouped = P > kWarpParts;
  const MergeCounter c1 = level1_counter(slot, meta);
  if (!arrive_last<kThreads, kBar>(p.merge_counts + c1.index, c1.need, flag, tid, known_last)) return;
  const int col = 8 * (tid & 15);
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + b * p.out_stride_b + h * G * p.out_stride_h + col;
  const long long first_row = static_cast<long long>(f) * G;
  // This thread's rows of the pass starting at row0: row0 + r kRowStep, r < rows (the return value).
  auto pass_rows = [&](int row0, long long (&fr)[kRows]) {
    int rows = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      fr[r] = first_row + row0 + r * kRowStep;
      rows += row0 + r * kRowStep < G ? 1 : 0;
    }
    return rows;
  };
  // One pass of a merge: this thread's rows over parts q_begin, q_begin + step, ... < q_end.
  // (A merge group's parts, step kMergeGroups, in batches of kGroupBatch; the one-level parts in batches of
  // kCombineBatch: split_merge.cuh.)
  auto merge_pass = [&](int row0, int q_begin, int step, int q_end, long long (&fr)[kRows], float (&m)[kRows],
                        float (&l)[kRows], float4 (&acc)[kRows][2]) {
    const int rows = pass_rows(row0, fr);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = kNegInf;
      l[r] = 0.f;
      acc[r][0] = acc[r][1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (step == kMergeGroups) {
      merge_parts_rows<kRows, 2, true, kGroupBatch>(p.partial_o, p.partial_lse, fr, rows, G, q_begin, q_end, step,
                                                    col, m, l, acc);
    } else if (wide_one_level(q_end)) {  // (level 2's 8 group partials never: q_end = 8 there)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {  // one row at a time: kRows x 12 parts' loads would not fit the registers
        if (r < rows) {
          merge_parts<2, true, kWideBatch>(p.partial_o, p.partial_lse, fr[r], G, q_begin, q_end, step, col, m[r], l[r],
                                           acc[r]);
        }
      }
    } else {
      merge_parts_rows<kRows, 2, true>(p.partial_o, p.partial_lse, fr, rows, G, q_begin, q_end, step, col, m, l, acc);
    }
    return rows;
  };
  long long fr[kRows];
  float m[kRows], l[kRows];
  float4 acc[kRows][2];
  // Level 1 (more than kWarpParts parts): group g (parts g, g + 8, ...) into part g's slot f + g (the partial_o
  // columns a thread writes are those it alone read: part g is in its first batch), as a partial of its own (its lse
  // once the row's 16 lanes have read part g's), and the last group merges the 8 group partials at slots f .. f + 7
  // as a one-level item of 8 parts through the one-level loop below, whose code is warm from the call's other merges
  // (a level-2 fold of its own ran cold). (Level 1 through that loop as well made the one-level merges 0.15-0.5 us
  // slower on 8/1 64x4K and 64x0.5K in two processes.)
  int q_end = P;
  if (grouped) {
    // The arrival peek: read the level-2 counter now (its round trip under this pass's loads) and, if the other groups
    // are all in, acquire before this thread's first store.
    int seen2 = -1;
    bool known_last2 = false;
    if (tid == 0) seen2 = ld_relaxed_gpu(p.merge_counts + f);
    for (int row0 = tid >> 4; row0 < G; row0 += kPassRows) {
      const int rows = merge_pass(row0, g, kMergeGroups, P, fr, m, l, acc);
      if (tid == 0 && row0 == 0) known_last2 = last_by_peek(p.merge_counts + f, seen2, kMergeGroups);
      __syncwarp(0xffffu << (tid & 16));  // the row's half warp read part g's lse
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) continue;
        const long long sr = fr[r] + static_cast<long long>(g) * G;
        float4* dst = reinterpret_cast<float4*>(p.partial_o + sr * 128 + col);
        float lse;
        float4 o[2];
        group_as_part<2>(m[r], l[r], acc[r], lse, o);
        dst[0] = o[0];
        dst[1] = o[1];
        if ((tid & 15) == 0) p.partial_lse[sr] = lse;
      }
    }
    if (!arrive_last<kThreads, kBar>(p.merge_counts + f, kMergeGroups, flag, tid, known_last2)) return;
    q_end = kMergeGroups;
  }
  // One level: parts 0 .. q_end - 1 into the output (the item's P parts, or level 2's 8 group partials).
  for (int row0 = tid >> 4; row0 < G; row0 += kPassRows) {
    const int rows = merge_pass(row0, 0, 1, q_end, fr, m, l, acc);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r < rows) store_bf16_row<2>(out + (row0 + r * kRowStep) * p.out_stride_h, acc[r], 1.f / l[r]);
  }
}

// ---- merge by helper warps (TMA kernel, merge == 2) -----------------------------------------
// The consumers' arrival above stalls all four consumer warps for a GPU-scope fence and an
// atomic round trip (~2-3 us per split task), and the last part merges before the consumers
// go on: at 8/1 heads the in-kernel merge measured 3-6 us per call over the decode alone with
// the TMA producer, 9 us with 20 % claimable tail bins. The TMA kernel has two idle
// producer warps: the consumers hand each split task over to them through a shared-memory ring
// (descriptor + one mbarrier arrival per consumer thread, release at CTA scope after its partial
// writes) and go on at once; the helpers acquire, arrive at GPU scope and merge, with the same
// arithmetic and order as above (identical bits). A descriptor with item -1 ends the service. (One arrival per
// consumer warp after a __syncwarp instead of 128 measured null.)
// The split part that is its bin's last task is arrived and merged by the consumers (128 threads, named barrier 1,
// the cp.async kernel's path) instead of being handed to the helpers: at the call's end the hand-over (consumers'
// ring arrival, the helpers' wait and barrier) would sit between the part's stores and its arrival. Same bits (the
// arithmetic does not depend on the threads).

constexpr int kMergeRingSlots = 4;
constexpr int kMergeHelperThreads = 64;
constexpr int kMergeHelperBar = 2;

struct MergeRing {
  int4* desc;      // [kMergeRingSlots]: {item or -1, slot, first slot, parts}
  uint64_t* full;  // [kMergeRingSlots], 128 arrivals (every consumer thread, after its writes)
  uint64_t* empty; // [kMergeRingSlots], 1 arrival (the helpers took the descriptor)
};

// Consumer side, all 128 consumer threads; k = this CTA's request count so far.
__device__ __forceinline__ void merge_request(const MergeRing& r, int k, int4 desc) {
  const int s = k % kMergeRingSlots;
  if (threadIdx.x == 0) {
    mbar_wait(&r.empty[s], ((k / kMergeRingSlots) & 1) ^ 1);
    r.desc[s] = desc;
  }
  mbar_arrive(&r.full[s]);  // release (CTA scope): this thread's partial writes (and the descriptor)
}

// Helper side: kMergeHelperThreads threads, tid = 0 .. kMergeHelperThreads - 1.
__device__ __forceinline__ void merge_helpers(const DecodeParams& p, const MergeRing& r, volatile int* flag,
                                              int tid) {
  for (int k = 0;; ++k) {
    const int s = k % kMergeRingSlots;
    mbar_wait(&r.full[s], (k / kMergeRingSlots) & 1);  // acquire: the consumers' partial writes
    const int4 d = r.desc[s];
    named_barrier(kMergeHelperBar, kMergeHelperThreads);  // everyone has the descriptor
    if (tid == 0) mbar_arrive(&r.empty[s]);
    if (d.x < 0) break;
    const int b = d.x / p.num_kv_heads, h = d.x - b * p.num_kv_heads;
    merge_split_task<kMergeHelperThreads, kMergeHelperBar, kMergeHelperRows>(p, b, h, p.group, d.y,
                                                                             make_int2(d.z, d.w), flag, tid);
  }
}

}  // namespace hpc::attn
