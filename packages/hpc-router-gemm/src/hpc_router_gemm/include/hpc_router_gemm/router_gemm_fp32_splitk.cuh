// scores[M, N] = x[M, K] (BF16) @ W[N, K]^T (FP32), exact FP32 on CUDA cores, for small M.
//
// At small M the call is a read of the FP32 weight (N*K*4 bytes), so the weight must be read
// by every SM at once: the grid is (splits, N / 8) and the `splits` CTAs along K form one
// thread-block cluster. Inside a CTA, 8 warps = 2 expert groups (4 experts each) x 4 K
// quarters; a lane keeps 8 tokens x 4 experts of partial dot products over its float4 columns,
// and a transposing butterfly (31 shuffles) leaves lane j with the warp's sum for value j.
// Warp partials are summed in fixed order through shared memory, then the cluster's partials
// are summed in rank order through distributed shared memory. No atomics anywhere: the result
// is bitwise reproducible for a given (M, N, K, splits).
//
// Two instantiations: kTokens = 8 (M > 1, 2 CTAs per SM) and kTokens = 1 (M = 1,
// single-request decode). With one token a lane needs 4 accumulators instead of 32, so the
// kernel fits 3 CTAs per SM with 3 K-steps x 4 experts = 12 float4 weight loads per lane in
// flight (predicated, issued before any FMA): 147 KB per SM, the whole weight slice of an SM
// on LongCat-Flash Chat (K=6144, N=768: 18.9 MB / 132 SMs = 143 KB) in one DRAM round trip.
// There 96 expert tiles x 4 splits = 384 CTAs fill 396 slots in one wave; with 2 CTAs per SM
// and S=2 (192 CTAs on 132 SMs) 60 SMs carried twice the work of the rest and a lane walked
// 6 K-steps in 3 dependent batches (13.2 us against FP32 cuBLAS's 11.2 at M=1).
//
// `l2_prefetch` (plan "fp32pf"): each CTA first bulk-prefetches its weight slice into L2.
// Measured no faster (Chat M=1 S=2 12.72 against 12.35 us); kept in the sweep.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/pdl.cuh"
#include "hpc_common/persistent.cuh"
#include "hpc_router_gemm/router_gemm_params.h"
#include "hpc_router_gemm/sm90.cuh"

namespace hpc::router_gemm {

namespace fp32k {
constexpr int kThreads = 256;
constexpr int kExpertsPerWarp = 4;
constexpr int kExperts = 8;  // per CTA: 2 expert groups
constexpr int kKQuarters = 4;
constexpr int kMaxM = 256;  // the CTA keeps [M, 8] partials in shared memory
constexpr int kMaxSplits = 8;
}  // namespace fp32k

// Lane j ends with sum over the warp's lanes of v[j] (v has 32 entries). Fixed order.
template <int HALF>
__device__ __forceinline__ void transpose_reduce_step(float (&v)[32], int lane) {
  const bool upper = lane & HALF;
#pragma unroll
  for (int i = 0; i < HALF; ++i) {
    const float send = upper ? v[i] : v[i + HALF];
    const float keep = upper ? v[i + HALF] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, HALF);
  }
}

__device__ __forceinline__ float warp_transpose_reduce32(float (&v)[32], int lane) {
  transpose_reduce_step<16>(v, lane);
  transpose_reduce_step<8>(v, lane);
  transpose_reduce_step<4>(v, lane);
  transpose_reduce_step<2>(v, lane);
  transpose_reduce_step<1>(v, lane);
  return v[0];
}

// Lane j (j < 4) ends with the warp's sum of v[j] (4 values per lane). Fixed order.
__device__ __forceinline__ float warp_reduce4(float (&v)[4], int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v[i] += __shfl_xor_sync(0xffffffffu, v[i], off);
  }
  float r = v[0];
#pragma unroll
  for (int i = 1; i < 4; ++i) r = lane == i ? v[i] : r;
  return r;
}

// kTokens tokens per pass (kTokens * kExpertsPerWarp accumulators per lane) and kSteps
// K-steps of 32 float4 columns whose weights are loaded together. kEvictFirst: the weight loads
// carry an L2 evict_first policy (p.w_evict_first).
template <int kTokens, int kSteps, int kMinBlocksPerSm, bool kEvictFirst>
__global__ void __launch_bounds__(fp32k::kThreads, kMinBlocksPerSm)
    router_gemm_fp32_splitk_kernel(const Fp32SplitKParams p) {
  using namespace fp32k;
  constexpr int kValues = kTokens * kExpertsPerWarp;
  static_assert(kValues == 32 || kValues == 4, "warp reductions exist for 32 and 4 values per lane");
  __shared__ float warp_part[kKQuarters][kTokens][kExperts];  // per pass
  __shared__ __align__(16) float cta_part[kMaxM * kExperts];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp % 2, quarter = warp / 2;
  const int splits = p.splits;
  const int rank = static_cast<int>(sm90::cluster_rank());
  const int n0 = blockIdx.y * kExperts;
  const int K4 = p.K / 4;
  const int parts = splits * kKQuarters, part = rank * kKQuarters + quarter;
  const int k4_begin = static_cast<int>(static_cast<int64_t>(part) * K4 / parts);
  const int k4_end = static_cast<int>(static_cast<int64_t>(part + 1) * K4 / parts);
  const float4* w4 = reinterpret_cast<const float4*>(p.w) + static_cast<int64_t>(n0 + group * kExpertsPerWarp) * K4;

  const __nv_bfloat16* xb = static_cast<const __nv_bfloat16*>(p.x);
  const uint64_t policy = kEvictFirst ? sm90::l2_evict_first_policy() : 0;

  hpc::pdl_wait();
  if (p.l2_prefetch && threadIdx.x < kExperts) {  // one thread per expert row of this CTA
    const int b4 = static_cast<int>(static_cast<int64_t>(rank * kKQuarters) * K4 / parts);
    const int e4 = static_cast<int>(static_cast<int64_t>((rank + 1) * kKQuarters) * K4 / parts);
    if (e4 > b4) {
      sm90::bulk_prefetch_l2(reinterpret_cast<const float4*>(p.w) + static_cast<int64_t>(n0 + threadIdx.x) * K4 + b4,
                             static_cast<uint32_t>(e4 - b4) * 16u);
    }
  }
  for (int m0 = 0; m0 < p.M; m0 += kTokens) {
    float v[kValues];
#pragma unroll
    for (int i = 0; i < kValues; ++i) v[i] = 0.f;
    for (int kb = k4_begin + lane; kb < k4_end; kb += 32 * kSteps) {
      // Every weight load of the batch is issued before the first FMA (out-of-range steps
      // read nothing and contribute zeros).
      float4 wv[kSteps][kExpertsPerWarp];
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int k4 = kb + 32 * st;
#pragma unroll
        for (int e = 0; e < kExpertsPerWarp; ++e) {
          wv[st][e] = k4 < k4_end ? sm90::ldg_weight<kEvictFirst>(w4 + static_cast<int64_t>(e) * K4 + k4, policy)
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int k4 = kb + 32 * st;
        if (k4 >= k4_end) break;
#pragma unroll
        for (int m = 0; m < kTokens; ++m) {
          uint2 raw = make_uint2(0u, 0u);
          if (m0 + m < p.M) {
            raw = __ldg(reinterpret_cast<const uint2*>(xb + static_cast<int64_t>(m0 + m) * p.x_stride) + k4);
          }
          // BF16 -> FP32 is exact: the BF16 bits are the top half of the FP32 bits.
          const float x0 = __uint_as_float(raw.x << 16), x1 = __uint_as_float(raw.x & 0xffff0000u);
          const float x2 = __uint_as_float(raw.y << 16), x3 = __uint_as_float(raw.y & 0xffff0000u);
#pragma unroll
          for (int e = 0; e < kExpertsPerWarp; ++e) {
            float a = v[m * kExpertsPerWarp + e];
            a = fmaf(wv[st][e].x, x0, a);
            a = fmaf(wv[st][e].y, x1, a);
            a = fmaf(wv[st][e].z, x2, a);
            a = fmaf(wv[st][e].w, x3, a);
            v[m * kExpertsPerWarp + e] = a;
          }
        }
      }
    }
    float s;
    if constexpr (kValues == 32) {
      s = warp_transpose_reduce32(v, lane);  // lane = m * 4 + e
    } else {
      s = warp_reduce4(v, lane);  // lane = e (< 4)
    }
    if (lane < kValues) {
      warp_part[quarter][lane / kExpertsPerWarp][group * kExpertsPerWarp + lane % kExpertsPerWarp] = s;
    }
    __syncthreads();
    if (threadIdx.x < kTokens * kExperts) {
      const int m = threadIdx.x / kExperts, e = threadIdx.x % kExperts;
      float acc = warp_part[0][m][e];
#pragma unroll
      for (int q = 1; q < kKQuarters; ++q) acc += warp_part[q][m][e];
      if (m0 + m < p.M) cta_part[(m0 + m) * kExperts + e] = acc;
    }
    __syncthreads();
  }
  hpc::pdl_launch_dependents();

  // Cluster reduction: CTA `rank` finishes outputs rank, rank + splits, ... of this expert tile.
  sm90::cluster_sync();
  const uint32_t base = sm90::smem_u32(cta_part);
  for (int i = rank * kThreads + threadIdx.x; i < p.M * kExperts; i += splits * kThreads) {
    const uint32_t addr = base + static_cast<uint32_t>(i) * 4u;
    float acc = sm90::ld_dsmem_f32(sm90::map_to_rank(addr, 0));
    for (int q = 1; q < splits; ++q) acc += sm90::ld_dsmem_f32(sm90::map_to_rank(addr, q));
    p.out[static_cast<int64_t>(i / kExperts) * p.out_stride + n0 + i % kExperts] = acc;
  }
  sm90::cluster_sync();  // keep this CTA's shared memory alive until its peers have read it
}

// Raw-pointer launcher. Requirements (checked in Python, re-checked here): 1 <= M <= 256,
// N % 8 == 0, K % 4 == 0, 1 <= splits <= 8.
inline cudaError_t launch_router_gemm_fp32_splitk(const Fp32SplitKParams& p, cudaStream_t stream, bool pdl) {
  using namespace fp32k;
  if (p.M < 1 || p.M > kMaxM || p.N % kExperts || p.K % 4 || p.splits < 1 || p.splits > kMaxSplits) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(p.splits, p.N / kExperts, 1), block(kThreads);
  if (p.M == 1) {
    return p.w_evict_first
               ? hpc::launch_kernel_cluster(router_gemm_fp32_splitk_kernel<1, 3, 3, true>, grid, block, 0, p.splits,
                                            stream, pdl, p)
               : hpc::launch_kernel_cluster(router_gemm_fp32_splitk_kernel<1, 3, 3, false>, grid, block, 0, p.splits,
                                            stream, pdl, p);
  }
  return p.w_evict_first
             ? hpc::launch_kernel_cluster(router_gemm_fp32_splitk_kernel<8, 2, 2, true>, grid, block, 0, p.splits,
                                          stream, pdl, p)
             : hpc::launch_kernel_cluster(router_gemm_fp32_splitk_kernel<8, 2, 2, false>, grid, block, 0, p.splits,
                                          stream, pdl, p);
}

}  // namespace hpc::router_gemm
