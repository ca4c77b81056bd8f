// Per-CTA timeline of the BF16x2 wgmma kernel (diagnostics only; scripts/timeline_large_m.py).
//
// Why: at M = 4096, K = 4096, N = 192 (wide96f, S = 2) ~7 us of the call is fixed in-kernel
// cost beside the tensor time (NOTES.md, "M = 4096"): first stages from a cold L2, epilogue,
// cluster reduction, end spread. ncu averages these away; stamps per CTA say which it is.
// With Bf16x2DevParams::timeline set, each CTA writes kTimelineSlots 64-bit words at
// timeline[linear CTA id * kTimelineSlots + slot] (linear over the 3-D grid): %globaltimer
// stamps (ns, one clock for every SM) of the events below, plus a few counts. The code exists
// only in the diagnostics build (HPC_ROUTER_TIMELINE=1, `_ext.load_variant(...)`, used while
// router_gemm.DIAG["timeline"] is set): the library's kernels are compiled without it and carry
// no stamp, branch or register for it (the pattern of hpc_attention/decode_timeline.cuh). The
// kernel only stores, and the buffer must be zero before the call (the script zeroes it inside
// its graph): slots of events a CTA never reaches stay 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/sm90.cuh"

#ifndef HPC_ROUTER_TIMELINE
#define HPC_ROUTER_TIMELINE 0
#endif

namespace hpc::router_gemm {

// Whether this translation unit records the timeline at all (see above).
constexpr bool kTimelineBuild = HPC_ROUTER_TIMELINE != 0;

constexpr int kTimelineSlots = 16;

enum TimelineSlot : int {
  kTlEntry = 0,          // thread 0, first instruction
  kTlSetup = 1,          // thread 0, after barrier init + cluster_sync / __syncthreads + griddepcontrol.wait
  kTlFirstIssue = 2,     // producer: first stage's TMA loads issued
  kTlLastIssue = 3,      // producer: last stage's TMA loads issued
  kTlLastLanded = 4,     // producer: last stage landed (its final full[] wait returned)
  kTlFirstData = 5,      // consumer WG0 thread 0: first full[] wait returned (first K block landed)
  kTlLoopEnd = 6,        // consumer WG0 thread 0: main loop done (after wgmma wait_group 0)
  kTlReduceStart = 7,    // consumer WG0 thread 0: before the cluster reduction's first cluster_sync,
                         // or before the workspace store of the partial tile
  kTlReduceGo = 8,       // consumer WG0 thread 0: that cluster_sync returned, or the first workspace
                         // arrival returned (ws_mode 2: all S partials are in)
  kTlExit = 9,           // consumer WG0 thread 0: last store issued (and final cluster_sync), exit
  kTlSmid = 10,          // %smid
  kTlBlocks = 11,        // K blocks this CTA ran (nk)
  kTlClockEntry = 12,    // clock64 at kTlEntry (same thread)
  kTlClockExit = 13,     // clock64 at kTlExit (same thread: SM clock = cycles / ns)
  kTlLoopEndWg1 = 14,    // consumer WG1 thread 0 (threadIdx.x == 128): main loop done
  kTlSpare = 15,
};

// Linear id of this CTA over the 3-D grid.
__device__ __forceinline__ uint32_t tl_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// The helpers below are the only way the kernel touches the timeline: each does nothing (and
// evaluates nothing, not even the timer read) unless this is the diagnostics build and a buffer
// was given.
__device__ __forceinline__ void tl_put(uint64_t* tl, int slot, uint64_t v) {
  if constexpr (kTimelineBuild) {
    if (tl != nullptr) tl[tl_cta() * kTimelineSlots + slot] = v;
  }
}

// %globaltimer now, into `slot`. The timer read is volatile asm, kept in program order with the
// volatile asm around it (mbarrier waits, barriers, TMA issues, wgmma waits). Every stamp after
// a wait sits behind the wait's SASS (a try_wait loop's exit branch, WARPGROUP.DEPBAR, the
// cluster barrier's wait), so it cannot be read before the event it marks; stamps after TMA
// issues mark the issue, not the copy.
__device__ __forceinline__ void tl_stamp(uint64_t* tl, int slot) {
  if constexpr (kTimelineBuild) {
    if (tl != nullptr) tl_put(tl, slot, hpc::sm90::global_timer_ns());
  }
}

// %globaltimer, clock64 and one more word, at three slots (tl_entry / tl_exit; the caller has tested
// kTimelineBuild and the buffer).
__device__ __forceinline__ void tl_put_event(uint64_t* tl, int ns_slot, int clock_slot, int word_slot, uint64_t word) {
  const uint64_t ns = hpc::sm90::global_timer_ns();
  const uint64_t clk = static_cast<uint64_t>(clock64());
  tl_put(tl, ns_slot, ns);
  tl_put(tl, clock_slot, clk);
  tl_put(tl, word_slot, word);
}

// Entry: %globaltimer, clock64 and %smid (thread 0).
__device__ __forceinline__ void tl_entry(uint64_t* tl) {
  if constexpr (kTimelineBuild) {
    if (tl != nullptr) tl_put_event(tl, kTlEntry, kTlClockEntry, kTlSmid, hpc::sm90::sm_id());
  }
}

// Exit: %globaltimer, clock64 and the CTA's K block count (same thread as tl_entry).
__device__ __forceinline__ void tl_exit(uint64_t* tl, int nk) {
  if constexpr (kTimelineBuild) {
    if (tl != nullptr) tl_put_event(tl, kTlExit, kTlClockExit, kTlBlocks, static_cast<uint64_t>(nk));
  }
}

}  // namespace hpc::router_gemm
