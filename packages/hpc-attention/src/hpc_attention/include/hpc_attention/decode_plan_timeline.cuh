// Per-warp timeline of the decode planner (diagnostics only; scripts/timeline_plan.py).
//
// Why: `ours_plan` at batch 256 reads 5.7 us (8/1) / 6.8 us (64/8) where an empty kernel reads
// 2.7-3.0 us under the same method; ncu says the one-CTA plan waits on its own dependent chain,
// not which link of it. With DecodePlanParams::timeline set, lane 0 of each warp writes
// kPlanTlSlots 64-bit words at timeline[(blockIdx.x * kPlanWarps + warp) * kPlanTlSlots + slot]:
// %globaltimer stamps (ns) of the plan's steps below. Recorded only by the diagnostics build of
// the extension (HPC_ATTN_TIMELINE=1, the decode timeline's build): in the library's build
// plan_tl compiles to nothing (a preprocessor switch, so the planner's host emulation,
// tests/attention/planner_emu, needs none of the stamp code's inline PTX).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"

#ifndef HPC_ATTN_TIMELINE
#define HPC_ATTN_TIMELINE 0
#endif
#if HPC_ATTN_TIMELINE
#include "hpc_attention/decode_timeline.cuh"
#endif

namespace hpc::attn {

constexpr int kPlanTlSlots = 16;

enum PlanTlSlot : int {
  kPtEntry = 0,     // first instruction
  kPtPdl = 1,       // after griddepcontrol.wait
  kPtLens = 2,      // this warp's KV lengths loaded (pass 1's loop done)
  kPtScan1 = 3,     // pass 1's block scan returned (block totals known)
  kPtScan2 = 4,     // pass 2's block scan returned (task / slot / combine counts known)
  kPtWritten = 5,   // pass 3 done: this warp's table stores issued
  kPtFenced = 6,    // after __threadfence(): this warp's stores visible (the drain the kernel's end waits for)
  kPtClockEntry = 7,  // clock64 at kPtEntry
  kPtClockWritten = 8,  // clock64 at kPtWritten
  kPtSmid = 9,
};

// Record `slot` now (lane 0 of each warp). dep: a value the stamp must not be hoisted above.
__device__ __forceinline__ void plan_tl(const DecodePlanParams& p, int slot, int dep = 0) {
#if HPC_ATTN_TIMELINE
  if (p.timeline == nullptr || (threadIdx.x & 31) != 0) return;
  uint64_t* t = p.timeline + (blockIdx.x * (kPlanThreads / 32) + (threadIdx.x >> 5)) * kPlanTlSlots;
  t[slot] = tl_clock_after(dep);
  if (slot == kPtEntry) {
    t[kPtClockEntry] = clock64();
    t[kPtSmid] = tl_smid();
  }
  if (slot == kPtWritten) t[kPtClockWritten] = clock64();
#endif
}

// The end of the plan: pass 3 done, then (diagnostics build only) the drain of its stores.
__device__ __forceinline__ void plan_tl_end(const DecodePlanParams& p) {
#if HPC_ATTN_TIMELINE
  if (p.timeline == nullptr) return;
  plan_tl(p, kPtWritten);
  __threadfence();
  plan_tl(p, kPtFenced);
#endif
}

}  // namespace hpc::attn
