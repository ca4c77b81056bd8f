// Per-CTA timeline of the paged decode kernel (diagnostics only; scripts/timeline_decode.py).
//
// Why: at 8/1 heads a fit over the cases gives ~11 us of fixed cost per call beside the bytes at
// ~4 TB/s, and ncu says SMs hold no CTA for 15-17 % of the kernel; neither says where in a CTA's
// life the time goes (start chain, streaming rate, merges, end skew). With
// PagedDecodeParams::timeline set, each CTA writes kTimelineSlots 64-bit words at
// timeline[blockIdx.x * kTimelineSlots + slot]: %globaltimer stamps (ns, one clock for all SMs)
// of the events below, plus counts. The recording code exists only in the diagnostics build of
// the extension (HPC_ATTN_TIMELINE=1, `_ext.load_timeline()`, used whenever
// paged_decode.DIAG["timeline"] is set): the library's kernels are compiled without it, so
// they carry no stamp, branch or register for it (the first version tested a null pointer at
// every site; its kernels were ~150-200 SASS instructions longer). On, the
// kernel only stores (stamps) and keeps counts in registers: a global read-modify-write per task
// (the first version) stalled the consumers ~1-2 us per task after the L2 flush and skewed the
// timeline it measured. The buffer must be zero before the call (the script zeroes it in the graph).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_common/sm90.cuh"

namespace hpc::attn {

#ifndef HPC_ATTN_TIMELINE
#define HPC_ATTN_TIMELINE 0
#endif
// Whether this translation unit records the timeline at all (see above).
constexpr bool kTimelineBuild = HPC_ATTN_TIMELINE != 0;

constexpr int kTimelineSlots = 34;

// The timeline is recorded in this call: the diagnostics build and a buffer given.
__device__ __forceinline__ bool tl_on(const PagedDecodeParams& p) { return kTimelineBuild && p.timeline != nullptr; }

enum TimelineSlot : int {
  kTlEntry = 0,        // thread 0, first instruction
  kTlPdl = 1,          // thread 0, after griddepcontrol.wait
  kTlBin = 2,          // thread 0, bin_start / bin_first of the CTA's bin loaded
  kTlFirstIssue = 3,   // producer (thread 0 of the producers): first tile's copies issued (page ids known)
  kTlFirstData = 4,    // consumer warp 0: first full-barrier wait completed (first tile landed)
  kTlLastTile = 5,     // consumer warp 0: last tile of the last task consumed
  kTlConsumerEnd = 6,  // consumer thread 0: last task's output (and consumer-side merges) done, exit
  kTlHelperEnd = 7,    // merge helper tid 0 (TMA kernel, merge == 2): service ended, exit
  kTlMergeNs = 8,      // ns spent in split-task arrivals + merges (consumers, or the helpers when merge == 2: not
                       // the bins' last tasks, which the consumers merge then, kConsumersMergeLast)
  kTlCounts = 9,       // consumer thread 0: merge levels run by the consumers (tiles, tasks, split tasks
                       // per CTA come from the plan's tables on the host)
  kTlProducerEnd = 10, // producer thread 0: all copies issued (and empty items written), exit
  kTlSmid = 11,        // %smid
  kTlHelperCounts = 12,  // helper tid 0: merges done (merge == 2)
  kTlClockEntry = 13,  // clock64 at entry (same thread as kTlEntry)
  kTlClockEnd = 14,    // clock64 at kTlConsumerEnd (timer-resolution cross-check)
  kTlLastMergeNs = 15, // ns of the CTA's last arrival + merge (consumers or helpers)
  // TMA producer lane 0 (twenty-seventh session: what the 1.2-1.4 us from kTlBin to kTlFirstIssue holds):
  kTlProdStart = 16,   // producer_tma_warp entered
  kTlProdTables = 17,  // the bin's tables and first page id landed (as the producer sees them)
  kTlProdEmpty = 18,   // first tile: the empty-slot wait passed, just before its copies are issued
  // Consumer thread 0, each task (the last task's remain; what the 1.7-2.0 us from kTlLastTile to kTlConsumerEnd
  // holds, twenty-seventh session):
  kTlEndMerged = 19,   // the 4 warps' partial states in shared memory (the barrier after their writes passed)
  kTlEndStored = 20,   // the fold done and the task's output or partial stores issued
  kTlEndHanded = 21,   // split task handed to the helpers (or merged by the consumers), the closing barrier passed
  kTlEndRing = 22,     // the next bin known (ring_next / the static bin sequence)
  kTlEndRowScalars = 23,  // the fold's row scalars written and their barrier passed (decode_task_fold.cuh)
  // Merge helper tid 0, the CTA's last merge that merged (twenty-ninth session: what a merge's 1-5 us hold):
  kTlMergeDesc = 24,     // its descriptor taken from the ring
  kTlMergeArrived = 25,  // the (level-1 or one-level) arrival returned last
  kTlMergeLoaded = 26,   // the pass's loads landed and merged (the first pass; before its stores)
  kTlMergeStored = 27,   // the one-level output or level-1 group state stores issued (all passes)
  kTlMergeArrived2 = 28, // level 2: its arrival returned last (0 when the merge had one level or was not last)
  kTlMergeEnd = 29,      // merge_split_task returned
  kTlMergeParts = 30,    // its parts P
  kTlMergeNeed = 31,     // the arrivals its (level-1 or one-level) counter needed
  kTlMergeL2Merged = 32, // level 2: thread 0's first pass merged (the earlier form: its group states loaded)
  kTlPeeks = 33,         // consumer thread 0: split tasks whose arrival the arrival peek skipped (kArrivalPeek)
};

// %globaltimer (ns): hpc::sm90::global_timer_ns.
__device__ __forceinline__ uint64_t tl_clock() { return hpc::sm90::global_timer_ns(); }

// The timer read after `dep` is available: predicated on a comparison with it, so the read
// cannot be scheduled before the load that produced `dep` has landed.
__device__ __forceinline__ uint64_t tl_clock_after(int dep) {
  uint64_t t = 0;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.s32 p, %1, -2147483647;\n\t@p mov.u64 %0, %%globaltimer;\n\t}"
      : "+l"(t)
      : "r"(dep));
  return t;
}

__device__ __forceinline__ void tl_put(const PagedDecodeParams& p, int slot, uint64_t v) {
  p.timeline[blockIdx.x * kTimelineSlots + slot] = v;
}

__device__ __forceinline__ uint32_t tl_smid() { return hpc::sm90::sm_id(); }

}  // namespace hpc::attn
