// The weight stream of the Gate-Up kernel (moe_gate_up.cuh): one
// ring of shared-memory slots per warp, filled by the bulk copy engine (cp.async.bulk with an L2
// evict_first policy) and drained by the same warp.
//
// Each warp owns its ring and its copy sequence: lane 0 issues the copies, the whole warp waits on
// a slot's full barrier (one arrival, the copy's bytes as transaction count), reads it with 16-byte
// ld.shared (a warp reads 512 contiguous bytes per instruction: conflict-free), and once every lane
// has used the values (__syncwarp) lane 0 refills the slot with the stage `slots` ahead. A slot is
// only refilled by the warp that read it, so no empty barriers and no cross-warp hand-off are
// needed.
//
// Protocol: stage i of a warp goes to slot i % slots; use n = i / slots of a slot completes phase n
// of its barrier, which the warp waits for with parity n & 1. The warp issues stages 0 .. slots-1
// up front, then stage i + slots right after consuming stage i, in the order it consumes them: every
// issued copy is waited for before the CTA exits, and a warp with nothing to consume issues nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/sm90.cuh"

namespace hpc::moe {

__device__ __forceinline__ uint4 lds128(const char* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(sm90::smem_u32(p))
               : "memory");
  return v;
}

struct WarpRing {
  char* buf;       // slots * slot_bytes, 16-byte aligned
  uint64_t* full;  // [slots]
  int slots, slot_bytes;
  int slot, phase;  // the slot the warp reads next and the parity of its pending phase
  uint64_t policy;

  // Thread 0 of the CTA, before the __syncthreads that precedes any copy or wait.
  __device__ static void init_barriers(uint64_t* bars, int n) {
    for (int i = 0; i < n; ++i) sm90::mbar_init(bars + i, 1);
    sm90::mbar_init_fence();
  }

  // Lane 0 only: copy `bytes` (a multiple of 16) from `src` into slot `s`.
  __device__ __forceinline__ void issue(int s, const void* src, uint32_t bytes) const {
    sm90::mbar_arrive_expect_tx(full + s, bytes);
    sm90::bulk_load(buf + size_t(s) * slot_bytes, src, bytes, full + s, policy);
  }

  // Whole warp: the current slot once its copy has landed.
  __device__ __forceinline__ const char* wait() const {
    sm90::mbar_wait(full + slot, static_cast<uint32_t>(phase));
    return buf + size_t(slot) * slot_bytes;
  }

  // Whole warp, after its last use of the values read from the current slot: refill the slot with
  // the stage `slots` ahead (when there is one) and move on.
  __device__ __forceinline__ void release(bool leader, bool has_next, const void* src, uint32_t bytes) {
    __syncwarp();
    if (leader && has_next) issue(slot, src, bytes);
    __syncwarp();
    if (++slot == slots) slot = 0, phase ^= 1;
  }
};

}  // namespace hpc::moe
