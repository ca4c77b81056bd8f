// SM90 building blocks of the router GEMM kernels, written as inline PTX (no CUTLASS/CuTe):
// TMA tile loads, wgmma descriptors and fences, register reallocation. The mbarrier, named
// barrier, cluster, 1-D bulk copy and L2 policy wrappers come from hpc_common/sm90.cuh.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/sm90.cuh"

namespace hpc::router_gemm::sm90 {

using namespace hpc::sm90;

// ---- TMA --------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Load the box at (c0 = inner coordinate, c1 = outer) into shared memory; completion is
// counted in bytes on `bar`. Out-of-bounds parts of the box are filled with zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// Ask L2 to fetch the box at (c0, c1) (no shared memory, no completion): a later tma_load_2d
// of the same box then finds it in L2 instead of DRAM.
__device__ __forceinline__ void tma_prefetch_l2_2d(const CUtensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}

// The same box into this CTA and every CTA of `cta_mask` in the cluster (same shared-memory
// offset; each destination's barrier at `bar`'s offset counts the bytes).
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// Arrive on an mbarrier of any CTA of the cluster (address from map_to_rank). Default
// semantics (release at CTA scope): the stage was read by wgmma, whose reads are complete once
// wait_group returned, so nothing of this thread needs ordering before the peer's refill.
// (`.release.cluster` compiles to MEMBAR.ALL.GPU + error barriers before every arrival: the
// multicast kernels paid that twice per consumer warp per K block.)
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}

// ---- wgmma ------------------------------------------------------------------------------
// Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle:
// rows of 64 BF16 (128 B), 8-row atoms 1024 B apart (SBO); LBO is unused in this mode.
// The tile base must be 1024-byte aligned; stepping K by 16 elements adds 32 B to `addr`.
__device__ __forceinline__ uint64_t desc_k_major_sw128(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving accumulator reads/writes across an in-flight wgmma.
template <int R>
__device__ __forceinline__ void fence_regs(float (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// ---- register reallocation between warpgroups (needs __launch_bounds__(T, 1)) -------------
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

}  // namespace hpc::router_gemm::sm90

namespace hpc::router_gemm::sm90 {

// ---- L2 eviction priority of the weight stream ---------------------------------------------
// The weight of a small-M call is read once: with hpc::sm90::l2_evict_first_policy(), once a set
// holds one of its lines, the next weight line in that set replaces it instead of a line someone
// else will use or has to write back.

// __ldg of a float4 with an L2 cache policy (same data, same non-coherent path). Not volatile:
// like __ldg it reads memory that does not change during the kernel, so the compiler may
// schedule it as freely.
__device__ __forceinline__ float4 ldg_f4_hint(const float4* src, uint64_t policy) {
  float4 v;
  asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(src), "l"(policy));
  return v;
}

// Weight float4 load: plain __ldg, or with `policy` when kHint.
template <bool kHint>
__device__ __forceinline__ float4 ldg_weight(const float4* src, uint64_t policy) {
  if constexpr (kHint) {
    return ldg_f4_hint(src, policy);
  } else {
    return __ldg(src);
  }
}

// tma_load_2d / tma_load_2d_multicast with an L2 cache policy.
__device__ __forceinline__ void tma_load_2d_hint(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void tma_load_2d_multicast_hint(void* dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                                           int c1, uint16_t cta_mask, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5, %6;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask), "l"(policy)
      : "memory");
}

// ---- 1-D bulk copies: hpc::sm90::bulk_load (with or without an L2 cache policy) -------------
// Ask L2 to fetch `bytes` (a multiple of 16, 16-byte aligned) from global memory; no
// completion, no shared memory. Safe before any data dependency: L2 is the coherence point.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<uint64_t>(src)), "r"(bytes)
               : "memory");
}

}  // namespace hpc::router_gemm::sm90
