// Device primitives of the decode-attention kernels: mbarrier waits and arrivals, bulk (TMA) copies,
// ldmatrix, m16n8k16 tensor-core products and FP8 -> FP16 conversion. Plain PTX wrappers;
// each one is small enough to check against the PTX ISA by eye.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "hpc_common/sm90.cuh"

namespace hpc::attn {

// Shared with the other operators (hpc_common/sm90.cuh). The waits below keep their own
// watchdog (10 s of %globaltimer, with a message) instead of hpc::sm90::mbar_wait's poll count.
using hpc::sm90::bulk_load;
using hpc::sm90::fence_proxy_async_smem;
using hpc::sm90::global_timer_ns;
using hpc::sm90::mbar_arrive;
using hpc::sm90::mbar_arrive_expect_tx;
using hpc::sm90::mbar_init;
using hpc::sm90::named_barrier;
using hpc::sm90::smem_u32;

// The L2 policy of the KV loads: evict_first (their lines replace each other rather than lines other kernels will use
// or must write back). Measured against the normal policy at every brief case (H200): the normal policy was slower on
// every case in a stream of calls (64/8 BF16 by up to 30 us) and after the written flush on every case but the 64/8
// FP8 ones from 260 MB (1.4-9.7 us faster there), although a bare copy ring (tools/probes/attention/
// bare_stream_bound.cu) reads every stream from 260 MB faster with it after that flush.
__device__ __forceinline__ uint64_t kv_l2_evict_first() {
  uint64_t ef;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(ef));
  return ef;
}

// ---- mbarrier ---------------------------------------------------------------------------

// Makes the initialised barriers visible to the async (copy-engine) proxy.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t addr, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(addr), "r"(parity)
      : "memory");
  return done != 0;
}

// Spin until the phase of parity `parity` has completed. A pipeline bug would hang the GPU
// silently; after 10 s of waiting the kernel traps instead, so the caller gets an error.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_u32(bar);
  if (mbar_try_wait(addr, parity)) return;
  const uint64_t t0 = global_timer_ns();
  while (!mbar_try_wait(addr, parity)) {
    if (global_timer_ns() - t0 > 10000000000ull) {
      printf("hpc_attention: mbarrier wait timed out (block %d thread %d)\n", blockIdx.x, threadIdx.x);
      __trap();
    }
  }
}

// ---- tensor-map (TMA) copies (1-D bulk copies: hpc::sm90::bulk_load) ----------------------
// GPU-scope acquire-release fence (lighter than __threadfence's SC fence): with an atomic it
// forms the release / acquire halves of a cross-CTA hand-off.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// Relaxed GPU-scope load and store of a 32-bit counter word (the split merge's arrival peek; a relaxed load followed
// by fence_acq_rel_gpu is the PTX memory model's acquire pattern).
__device__ __forceinline__ int ld_relaxed_gpu(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_gpu(int* p, int v) {
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// `map` is the generic address of a tensor map in the kernel's parameter space
// (__grid_constant__) or in global memory.
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// The box at coordinates (c0 innermost .. c3) into shared memory (1024-byte aligned for the
// 128-byte swizzle); the box's bytes complete on `bar`, with an L2 eviction policy.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}

// Ampere-style 16-byte asynchronous copy (L1 bypassed) with an L2 eviction policy.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src),
               "l"(policy)
               : "memory");
}

// The mbarrier receives one arrival from this thread once all of the thread's earlier
// cp.async copies have landed (no pending-count increment: the barrier's count includes it).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}


// ---- ldmatrix / mma --------------------------------------------------------------------
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                        uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                              uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// D += A(16x16, row) * B(16x8, col), FP32 accumulate. kF16: FP16 operands, else BF16.
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Transpose of an 8x8 matrix of 16-bit values held as an mma fragment (lane l: row l / 4, columns
// 2 (l % 4) and + 1, lower column in the low half): afterwards lane l holds row l / 4 of the
// transpose, i.e. column l / 4 of the input at rows 2 (l % 4) and + 1.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t out;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(out) : "r"(x));
  return out;
}

// ---- conversions -----------------------------------------------------------------------
// Two E4M3 values (low byte -> low half) to two FP16, exactly (E4M3 is a subset of FP16).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
  uint32_t out;
  const unsigned short in = static_cast<unsigned short>(two_bytes & 0xFFFFu);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out) : "h"(in));
  return out;
}
// Four E4M3 values to two FP16 pairs: bytes 0-1 -> lo, bytes 2-3 -> hi. The halves are named
// inside the asm, so the upper pair's conversion reads the register's high half directly
// (F2FP ... R.H1) instead of after a shift: one instruction less per pair, 32 per tile and
// consumer warp with FP8 KV (ncu: 33 SHF per tile in the 8/1 FP8 loop before).
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t four_bytes, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(four_bytes));
}

// Two floats to a packed pair (lo in the low half), round to nearest even.
template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t out;
  if constexpr (kF16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  }
  return out;
}

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

__device__ __forceinline__ float2 f16x2_to_float2(uint32_t v) {
  float lo, hi;
  asm("{\n\t.reg .f16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "r"(v));
  return make_float2(lo, hi);
}

}  // namespace hpc::attn
