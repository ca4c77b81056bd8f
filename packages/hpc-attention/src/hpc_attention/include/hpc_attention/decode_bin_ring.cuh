// Claimable tail bins of the decode kernel: the scheduler warp and the shared-memory ring
// through which it hands claimed bins to the producer and consumer warps (decode.cuh).
//
// Why: CTAs given equal shares of the work line finish several microseconds apart (ncu of the 8/1
// kernel: on average an SM holds no CTA for 15-17 % of it), and the kernel lasts as long as the
// slowest CTA. The planner therefore cuts the last part of the line into small tail bins
// (DecodePlanParams::tail_percent); every CTA runs its own bin (blockIdx.x) and then claims tail
// bins in order from a global counter, so CTAs that finish early take more of them.
//
// Determinism: the plan fixes every task, slot and merge order; only which CTA runs a tail bin
// varies, and no result depends on that (partials go to the plan's slots, the in-kernel merge
// runs the same arithmetic whichever part arrives last). The counter is put back to zero by the
// call's last claim: every CTA claims until it gets "no bin" exactly once, so the claim that
// returns ne + gridDim.x - 1 is the last access of the call (graph replays start from zero).
//
// Protocol: the producer's leader thread arrives on `want` a few tiles before the end of each bin
// (kWantTiles: the claim, the bin's table reads and the next page-id read then overlap the bin's
// last tiles); the scheduler (one thread) then claims, reads bin_start / bin_first of the claimed
// bin and writes {bin, first task, end task} + the first task into ring slot k % kRingSlots
// (full: 1 arrival); every consumer warp and every producer warp that streams reads the slot and
// arrives on its empty barrier. Bin -1 ends the kernel for everyone. Without tail bins
// (counters[kNumTailBins] == 0) the scheduler writes -1 at once: one bin per CTA as before.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_config.cuh"
#include "hpc_attention/sm90_primitives.cuh"

namespace hpc::attn {

struct BinRing {
  int4* slot;      // [kRingSlots][2]: {bin or -1, task begin, task end, 0}, first task of the bin
  uint64_t* full;  // [kRingSlots], 1 arrival (the scheduler)
  uint64_t* empty; // [kRingSlots], one arrival per reading warp
  uint64_t* want;  // 1 arrival per bin: the producer asks for the next bin
};

// Claimed bin number k of this CTA (k = 0, 1, ...), read by a whole warp (TMA producer kernel).
// False: no more bins.
__device__ __forceinline__ bool ring_next(const BinRing& r, int k, int& t_begin, int& t_end, int4& first) {
  const int s = k % kRingSlots;
  mbar_wait(&r.full[s], (k / kRingSlots) & 1);
  const int4 info = r.slot[2 * s];
  first = r.slot[2 * s + 1];
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(&r.empty[s]);
  t_begin = info.y;
  t_end = info.z;
  return info.x >= 0;
}

// The scheduler: one thread (lane 0 of the TMA producer kernel's second producer warp).
__device__ __forceinline__ void bin_scheduler(const DecodeParams& p, const BinRing& r) {
  const int ne = p.counters[kNumTailBins];
  const int C = gridDim.x;
  for (int k = 0;; ++k) {
    int bin = -1;
    if (ne > 0) {
      mbar_wait(r.want, k & 1);  // the producer is a few tiles from the end of its current bin
      const int idx = atomicAdd(p.claim_counter, 1);
      if (idx < ne) {
        bin = C + idx;
      } else if (idx == ne + C - 1) {
        atomicExch(p.claim_counter, 0);  // the call's last claim: zero for the next call
      }
    }
    int4 info = make_int4(bin, 0, 0, 0), first = make_int4(0, 0, 0, 0);
    if (bin >= 0) {
      info.y = p.bin_start[bin];
      info.z = p.bin_start[bin + 1];
      first = p.bin_first[bin];  // stale when the bin is empty (then never used)
    }
    const int s = k % kRingSlots;
    mbar_wait(&r.empty[s], ((k / kRingSlots) & 1) ^ 1);
    r.slot[2 * s] = info;
    r.slot[2 * s + 1] = first;
    mbar_arrive(&r.full[s]);  // release (CTA scope): the slot's contents before the arrival
    if (bin < 0) return;
  }
}

}  // namespace hpc::attn

namespace hpc::attn {

// Bin sequence of the cp.async producer kernel (no scheduler warp): bin blockIdx.x, then the tail
// bins C + blockIdx.x, 2 C + blockIdx.x, ... < C + ne, each bin's table entries loaded one bin
// ahead so that the switch costs no global round trip. Producer and consumer threads walk it alike.
struct StaticBins {
  int bin, ne;
  int nb_, ne_;   // next bin's tasks [nb_, ne_)
  int4 nfirst_;   // next bin's first task
  __device__ __forceinline__ void prefetch(const DecodeParams& p) {
    const int C = gridDim.x;
    const int nxt = bin < C ? C + bin : bin + C;
    if (nxt < C + ne) {
      nb_ = p.bin_start[nxt];
      ne_ = p.bin_start[nxt + 1];
      nfirst_ = p.bin_first[nxt];
    }
  }
  // Moves to the next bin; false when there is none.
  __device__ __forceinline__ bool next(int& t_begin, int& t_end, int4& first) {
    const int C = gridDim.x;
    bin = bin < C ? C + bin : bin + C;
    if (bin >= C + ne) return false;
    t_begin = nb_;
    t_end = ne_;
    first = nfirst_;
    return true;
  }
};

}  // namespace hpc::attn
