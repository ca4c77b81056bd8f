// scores[M, N] = x[M, K] (BF16) @ W[N, K]^T (FP32), exact FP32 on CUDA cores, for 1 <= M <= 8:
// a streaming GEMV whose only job is to read the FP32 weight at DRAM speed.
//
// Why a second small-M kernel (router_gemm_fp32_splitk.cuh is the first): there, each CTA owns
// 8 experts x K/S, so on LongCat-Flash Chat (N=768) 96 x S CTAs land unevenly on 132 SMs (with
// S=2, 60 SMs read twice the bytes of the rest) and each lane keeps only 12-16 float4 loads in
// flight. Here the grid is one wave of `clusters` x S CTAs (one per SM, all of shared memory
// for it) and cluster g owns the contiguous row range [g N / G, (g + 1) N / G): whole rows, so
// the bytes per SM differ by at most one row (Chat, S=1: 5 or 6 rows of 24 KB, 143 KB mean,
// 147 KB max). Thread 0 issues the CTA's whole slice as 1-D bulk copies (TMA, no tensor map)
// into a ring of row-sized shared-memory stages, up to 227 KB in flight per SM (the Chat slice
// in one round trip; ~32 KB per SM is what 4.27 TB/s needs at ~1 us of DRAM latency), and the
// 256 threads consume rows as their mbarriers complete. Rank q of an S-CTA cluster (S = 2, 4:
// for few rows per SM, e.g. N=192) streams the K slice [q K / S, (q + 1) K / S) of the same
// rows; the S partials are summed in rank order through distributed shared memory (2-CTA
// clusters always fit a TPC: 66 resident on the H200).
//
// Measured on the H200: not faster than the split-K kernel at M=1
// (Chat 12.74-12.77 against 12.10-12.35 us) and slower at M=2..8; the register variant
// router_gemv_fp32_ldg.cuh, same grid, is what the table uses at M=1. Kept in the sweep.
//
// Determinism: a row's value is sum over ranks (in order) of [sum over warps (in order) of
// [butterfly over lanes of each thread's strided chain]]; the chain and the lane/warp of each
// float4 depend only on (K, S), not on the row's CTA. So the result is bitwise reproducible
// and independent of the grid size (hpc_common.set_num_sms) for a given (K, S).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/pdl.cuh"
#include "hpc_common/persistent.cuh"
#include "hpc_router_gemm/router_gemm_params.h"
#include "hpc_router_gemm/sm90.cuh"

namespace hpc::router_gemm {

namespace gemv {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxM = 8;
constexpr int kMaxSplits = 4;
constexpr int kMaxStages = 16;
constexpr uint32_t kCopyBytes = 16384;  // one bulk copy; a row stage takes several
// Dynamic shared memory of one CTA: the 227 KB an SM offers one block, less the static part.
constexpr int kSmemBudget = 227 * 1024 - 1024;

// Dynamic shared-memory layout (byte offsets), the same in every CTA of a launch (the cluster
// reduction reads a peer's `part` at this CTA's offset).
struct Layout {
  int part, xs, stages, total;  // part: float[rows][M]; xs: bf16[M][Ks]; stages: float[n][Ks]
  int n_stages;
};

__host__ __device__ inline int align_up(int v, int a) { return (v + a - 1) / a * a; }

__host__ __device__ inline Layout layout(int M, int K, int splits, int max_rows) {
  Layout l;
  const int ks = K / splits;
  l.part = 0;
  l.xs = align_up(max_rows * M * 4, 128);
  l.stages = align_up(l.xs + M * ks * 2, 128);
  const int stage_bytes = ks * 4;
  int n = (kSmemBudget - l.stages) / stage_bytes;
  n = n < max_rows ? n : max_rows;
  l.n_stages = n < kMaxStages ? n : kMaxStages;
  l.total = l.stages + l.n_stages * stage_bytes;
  return l;
}
}  // namespace gemv

// Thread 0 only: start the copy of row `i` of this CTA's slice into stage i % n_stages.
__device__ __forceinline__ void gemv_issue_row(const GemvFp32Params& p, const gemv::Layout& l, uint8_t* smem,
                                               uint64_t* bars, int row0, int k0, int i) {
  const int s = i % l.n_stages;
  const uint32_t bytes = static_cast<uint32_t>(p.K / p.splits) * 4u;
  uint8_t* dst = smem + l.stages + static_cast<size_t>(s) * bytes;
  const uint8_t* src = reinterpret_cast<const uint8_t*>(p.w + static_cast<int64_t>(row0 + i) * p.K + k0);
  sm90::mbar_arrive_expect_tx(&bars[1 + s], bytes);
  for (uint32_t off = 0; off < bytes; off += gemv::kCopyBytes) {
    const uint32_t n = bytes - off < gemv::kCopyBytes ? bytes - off : gemv::kCopyBytes;
    if (p.w_evict_first) {
      sm90::bulk_load(dst + off, src + off, n, &bars[1 + s], sm90::l2_evict_first_policy());
    } else {
      sm90::bulk_load(dst + off, src + off, n, &bars[1 + s]);
    }
  }
}

// kTokens tokens per pass over a row (kTokens accumulators per thread); M <= 8 tokens take
// ceil(M / kTokens) passes over the row while it sits in shared memory.
template <int kTokens>
__global__ void __launch_bounds__(gemv::kThreads, 1) router_gemv_fp32_kernel(const GemvFp32Params p) {
  using namespace gemv;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[1 + kMaxStages];  // [0]: x, [1 + s]: stage s
  __shared__ float red[2][kMaxM][kWarps];    // per-row warp sums, double-buffered by row parity

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int S = p.splits, rank = static_cast<int>(sm90::cluster_rank());
  const int G = gridDim.y, g = blockIdx.y;
  const int row0 = static_cast<int>(static_cast<int64_t>(g) * p.N / G);
  const int rows = static_cast<int>(static_cast<int64_t>(g + 1) * p.N / G) - row0;
  const int max_rows = (p.N + G - 1) / G;
  const Layout l = layout(p.M, p.K, S, max_rows);
  const int ks = p.K / S, k0 = rank * ks, ks4 = ks / 4;
  float* part = reinterpret_cast<float*>(smem + l.part);
  const uint2* xs = reinterpret_cast<const uint2*>(smem + l.xs);  // 4 BF16 per uint2

  if (tid == 0) {
    for (int b = 0; b <= l.n_stages; ++b) sm90::mbar_init(&bars[b], 1);
    sm90::mbar_init_fence();
  }
  __syncthreads();
  hpc::pdl_wait();  // x, and the weight if the previous kernel updated it
  if (tid == 0) {
    const uint32_t xbytes = static_cast<uint32_t>(ks) * 2u;
    sm90::mbar_arrive_expect_tx(&bars[0], xbytes * p.M);
    const __nv_bfloat16* xb = static_cast<const __nv_bfloat16*>(p.x);
    for (int m = 0; m < p.M; ++m) {
      sm90::bulk_load(smem + l.xs + m * xbytes, xb + m * p.x_stride + k0, xbytes, &bars[0]);
    }
    const int first = rows < l.n_stages ? rows : l.n_stages;
    for (int i = 0; i < first; ++i) gemv_issue_row(p, l, smem, bars, row0, k0, i);
  }
  sm90::mbar_wait(&bars[0], 0);

  for (int i = 0; i < rows; ++i) {
    const int s = i % l.n_stages;
    sm90::mbar_wait(&bars[1 + s], static_cast<uint32_t>(i / l.n_stages) & 1u);
    const float4* w4 = reinterpret_cast<const float4*>(smem + l.stages + static_cast<size_t>(s) * ks * 4);
    for (int m0 = 0; m0 < p.M; m0 += kTokens) {
      float acc[kTokens];
#pragma unroll
      for (int t = 0; t < kTokens; ++t) acc[t] = 0.f;
      for (int j = tid; j < ks4; j += kThreads) {
        const float4 w = w4[j];
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
          if (kTokens > 1 && m0 + t >= p.M) break;
          const uint2 raw = xs[(m0 + t) * ks4 + j];
          // BF16 -> FP32 is exact: the BF16 bits are the top half of the FP32 bits.
          float a = acc[t];
          a = fmaf(w.x, __uint_as_float(raw.x << 16), a);
          a = fmaf(w.y, __uint_as_float(raw.x & 0xffff0000u), a);
          a = fmaf(w.z, __uint_as_float(raw.y << 16), a);
          a = fmaf(w.w, __uint_as_float(raw.y & 0xffff0000u), a);
          acc[t] = a;
        }
      }
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], off);
        if (lane == 0 && m0 + t < p.M) red[i & 1][m0 + t][warp] = acc[t];
      }
    }
    __syncthreads();  // every thread is done with stage s and has written its warp sums
    if (tid < p.M) {
      float v = red[i & 1][tid][0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) v += red[i & 1][tid][w];
      part[i * p.M + tid] = v;
    }
    if (tid == 0 && i + l.n_stages < rows) gemv_issue_row(p, l, smem, bars, row0, k0, i + l.n_stages);
  }
  __syncthreads();
  hpc::pdl_launch_dependents();

  if (S == 1) {
    for (int idx = tid; idx < rows * p.M; idx += kThreads) {
      p.out[static_cast<int64_t>(idx % p.M) * p.out_stride + row0 + idx / p.M] = part[idx];
    }
    return;
  }
  // Rank q finishes entries q * 256 + tid, stepping by S * 256, summing the ranks in order.
  sm90::cluster_sync();
  const uint32_t base = sm90::smem_u32(part);
  for (int idx = rank * kThreads + tid; idx < rows * p.M; idx += S * kThreads) {
    const uint32_t addr = base + static_cast<uint32_t>(idx) * 4u;
    float v = sm90::ld_dsmem_f32(sm90::map_to_rank(addr, 0));
    for (int q = 1; q < S; ++q) v += sm90::ld_dsmem_f32(sm90::map_to_rank(addr, q));
    p.out[static_cast<int64_t>(idx % p.M) * p.out_stride + row0 + idx / p.M] = v;
  }
  sm90::cluster_sync();  // keep this CTA's shared memory alive until its peers have read it
}

template <int kTokens>
inline cudaError_t launch_router_gemv_fp32_t(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  const int max_rows = (p.N + p.clusters - 1) / p.clusters;
  const gemv::Layout l = gemv::layout(p.M, p.K, p.splits, max_rows);
  if (l.n_stages < 1) return cudaErrorInvalidValue;  // one row slice + x do not fit shared memory
  return hpc::launch_kernel_cluster(router_gemv_fp32_kernel<kTokens>, dim3(p.splits, p.clusters, 1),
                                    dim3(gemv::kThreads), static_cast<size_t>(l.total), p.splits, stream, pdl, p);
}

// Raw-pointer launcher. Requirements (checked in Python, re-checked here): 1 <= M <= 8,
// splits in {1, 2, 4}, K % (16 * splits) == 0 (16-byte copies), 1 <= clusters <= N, and one
// row slice (K / splits FP32) plus the x slices fit in shared memory.
inline cudaError_t launch_router_gemv_fp32(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  using namespace gemv;
  if (p.M < 1 || p.M > kMaxM || !(p.splits == 1 || p.splits == 2 || p.splits == 4) || p.K <= 0 ||
      p.K % (16 * p.splits) || p.clusters < 1 || p.clusters > p.N || p.clusters > 65535) {
    return cudaErrorInvalidValue;
  }
  return p.M == 1 ? launch_router_gemv_fp32_t<1>(p, stream, pdl) : launch_router_gemv_fp32_t<4>(p, stream, pdl);
}

// Clusters of `splits` CTAs that fit at once when each CTA takes a whole SM's shared memory.
inline int router_gemv_max_clusters(int splits) {
  return hpc::max_active_clusters(router_gemv_fp32_kernel<1>, gemv::kThreads, gemv::kSmemBudget,
                                  static_cast<unsigned>(splits));
}

}  // namespace hpc::router_gemm
