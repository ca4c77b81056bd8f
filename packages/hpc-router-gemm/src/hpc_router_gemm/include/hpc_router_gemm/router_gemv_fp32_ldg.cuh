// scores[1, N] = x[1, K] (BF16) @ W[N, K]^T (FP32), exact FP32, one token: the gemv of
// router_gemv_fp32.cuh (same grid: cluster g owns whole rows [g N / G, (g + 1) N / G), rank q of
// an S-CTA cluster the K slice [q K / S, (q + 1) K / S)) with the weight read into registers by
// plain 16-byte loads instead of bulk copies into shared memory.
//
// Why a register variant: in run 1 the bulk-copy gemv was no faster than the fp32 split-K kernel
// on Chat M=1 (12.77 against 12.10 us), although it puts the CTA's whole slice in flight; the
// register path tells apart "bulk copies are slow to stream" from "the slice is simply DRAM-bound".
// 512 threads x 18 float4 loads each = 144 KB in flight per SM, issued before the first FMA:
// LongCat-Flash Chat (S=1, 5-6 rows of 1536 float4: 3 per thread per row, 6 rows per batch) is
// one round trip. x sits in registers (a thread's x values are the same for every row).
//
// Measured (HISTORY.md, run 2): Chat M=1 11.68 us (bulk-copy gemv 12.74, split-K kernel 12.35),
// Lite 7.25, K=4096 N=192 6.59; heuristics.TABLE picks it (S=1) at M=1 on those shapes.
//
// kEvictFirst (Plan.evict_first): the weight loads carry an L2 evict_first policy. After the
// benchmark's written flush the L2 is full of dirty lines; Chat M=1 11.79-11.87 -> 11.23-11.33 us
// with it (runs F / G, HISTORY.md), the table uses it there. Same data, same bits.
//
// Determinism: element k4 of a row slice is read by thread k4 % 512 at its step k4 / 512, for
// every row and every CTA; each thread's chain, the warp butterfly and the in-order sums over
// warps and ranks depend only on (K, S), so the result is independent of the grid size.
//
// Several tokens (2 <= M <= kMaxTokens, router_gemv_fp32_ldg_tokens_kernel): the same grid and
// weight batches; per batch, the x slices of up to kTokenGroup tokens at a time go into registers
// and each weight float4 serves all of them (one FMA chain per token, the order of the M = 1
// chain). Why: from M = 2 the table's plans were the fp32 split-K and narrow kernels, ~2 us
// above gemvr's M = 1 time although the weight bytes are the same; what M adds here is M x the
// x slice per CTA from L2 and one warp butterfly per row and token. Each token's value is the
// one token's gemvr value bit for bit (GPU test).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/pdl.cuh"
#include "hpc_router_gemm/router_gemm_params.h"
#include "hpc_router_gemm/sm90.cuh"

namespace hpc::router_gemm {

namespace gemvr {
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxLoads = 18;  // float4 per thread in flight (72 registers; 24 made ptxas spill)
constexpr int kMaxPerRow = 4;  // float4 per thread per row slice: K / S <= 4 x 512 x 4 = 8192
constexpr int kMaxSliceK = kMaxPerRow * kThreads * 4;
constexpr int kMaxSmem = 227 * 1024;
constexpr int kMaxTokens = 32;   // M of the multi-token kernel (x traffic per CTA grows with M)
constexpr int kMaxLoadsTok = 12;  // its weight float4 in flight per thread (x of a token group beside them)

// Tokens whose x slices sit in registers at once in the multi-token kernel (kPerRow uint2 each).
template <int kPerRow>
constexpr int token_group() {
  return kPerRow <= 2 ? 8 : 4;
}

struct Layout {
  int red, part, total;  // red: float[rows][tokens][kWarps]; part: float[rows][tokens]
};

__host__ __device__ inline Layout layout(int max_rows, int tokens = 1) {
  Layout l;
  l.red = 0;
  l.part = l.red + max_rows * tokens * kWarps * 4;
  l.total = l.part + max_rows * tokens * 4;
  return l;
}

// acc += w . x for one float4 of weight and the 4 BF16 of x in `raw`, in a fixed order.
// BF16 -> FP32 is exact: the BF16 bits are the top half of the FP32 bits.
__device__ __forceinline__ float fma_bf16x4(const float4& w, uint2 raw, float acc) {
  acc = fmaf(w.x, __uint_as_float(raw.x << 16), acc);
  acc = fmaf(w.y, __uint_as_float(raw.x & 0xffff0000u), acc);
  acc = fmaf(w.z, __uint_as_float(raw.y << 16), acc);
  acc = fmaf(w.w, __uint_as_float(raw.y & 0xffff0000u), acc);
  return acc;
}

// A warp's partial sum of row r (after the butterfly) into its slot red[r][warp].
__device__ __forceinline__ void store_warp_sum(float* red, int r, int warp, int lane, float acc) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) red[r * kWarps + warp] = acc;
}

// The end of every gemvr-family kernel once red[e][warp] holds all warp sums of the CTA's
// entries e = row * tokens + token: the in-order sum over warps, then (S > 1) over the cluster's
// ranks through distributed shared memory; rank q writes entries q, q + S, ... of the output
// (token t of row r to out[t][row0 + r]). `tokens` is 1 in the one-token kernels.
__device__ __forceinline__ void finish_rows(const GemvFp32Params& p, float* red, float* part, int row0, int rows,
                                            int S, int rank, int tid, int tokens = 1) {
  const int entries = rows * tokens;
  auto out_of = [&](int e) { return p.out + (tokens == 1 ? 0 : (e % tokens) * p.out_stride) + row0 + e / tokens; };
  __syncthreads();
  for (int e = tid; e < entries; e += kThreads) {
    float v = red[e * kWarps];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) v += red[e * kWarps + q];
    part[e] = v;
  }
  __syncthreads();
  hpc::pdl_launch_dependents();

  if (S == 1) {
    for (int e = tid; e < entries; e += kThreads) *out_of(e) = part[e];
    return;
  }
  sm90::cluster_sync();  // rank q finishes entries q, q + S, ..., summing the ranks in order
  const uint32_t base = sm90::smem_u32(part);
  for (int e = rank * kThreads + tid; e < entries; e += S * kThreads) {
    const uint32_t addr = base + static_cast<uint32_t>(e) * 4u;
    float v = sm90::ld_dsmem_f32(sm90::map_to_rank(addr, 0));
    for (int q = 1; q < S; ++q) v += sm90::ld_dsmem_f32(sm90::map_to_rank(addr, q));
    *out_of(e) = v;
  }
  sm90::cluster_sync();  // keep this CTA's shared memory alive until its peers have read it
}

// What every gemvr-family CTA derives from its place in the grid: cluster g (blockIdx.y of G)
// owns rows [g N / G, (g + 1) N / G), rank q of its S-CTA cluster the K slice [q ks, (q + 1) ks);
// the reduction buffers in shared memory, the thread's first weight float4 (row row0, its
// element tid of the slice) and the L2 policy of the weight loads.
struct CtaSlice {
  int S, rank, row0, rows, k0, ks4, K4;
  float* red;
  float* part;
  const float4* w4;
  uint64_t policy;
};

template <bool kEvictFirst>
__device__ __forceinline__ CtaSlice cta_slice(const GemvFp32Params& p, uint8_t* smem, int tid) {
  CtaSlice c;
  c.S = p.splits;
  c.rank = static_cast<int>(sm90::cluster_rank());
  const int G = gridDim.y, g = blockIdx.y;
  c.row0 = static_cast<int>(static_cast<int64_t>(g) * p.N / G);
  c.rows = static_cast<int>(static_cast<int64_t>(g + 1) * p.N / G) - c.row0;
  const Layout l = layout((p.N + G - 1) / G, p.M);
  const int ks = p.K / c.S;
  c.k0 = c.rank * ks;
  c.ks4 = ks / 4;
  c.K4 = p.K / 4;
  c.red = reinterpret_cast<float*>(smem + l.red);
  c.part = reinterpret_cast<float*>(smem + l.part);
  c.w4 = reinterpret_cast<const float4*>(p.w) + static_cast<int64_t>(c.row0) * c.K4 + c.k0 / 4 + tid;
  c.policy = kEvictFirst ? sm90::l2_evict_first_policy() : 0;
  return c;
}

// The x values of a thread are the same for every row: kPerRow x 4 BF16 in registers (zeros
// past the slice). Call after pdl_wait (x may come from the previous kernel).
template <int kPerRow>
__device__ __forceinline__ void load_x(const GemvFp32Params& p, const CtaSlice& c, int tid, uint2 (&xr)[kPerRow]) {
  const uint2* xg = reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(p.x) + c.k0) + tid;
#pragma unroll
  for (int j = 0; j < kPerRow; ++j) xr[j] = tid + j * kThreads < c.ks4 ? __ldg(xg + j * kThreads) : make_uint2(0u, 0u);
}

// The grid (S x clusters), dynamic shared memory and float4 per thread per row slice of a
// gemvr-family launch.
struct LaunchShape {
  dim3 grid;
  size_t smem;
  int per_row;
};

inline LaunchShape launch_shape(const GemvFp32Params& p) {
  return {dim3(p.splits, p.clusters, 1), static_cast<size_t>(layout((p.N + p.clusters - 1) / p.clusters, p.M).total),
          (p.K / p.splits / 4 + kThreads - 1) / kThreads};
}

// The requirements every gemvr-family launcher checks (also checked in Python): 1 <= M <= max_m
// (1 but for gemvr itself), splits in {1, 2, 4}, K % (16 * splits) == 0, K / splits <= kMaxSliceK,
// 1 <= clusters <= N, the reduction buffers within shared memory; with M > 1 x rows of 8-element
// multiples and an output row stride >= N.
inline bool launchable(const GemvFp32Params& p, int max_m = 1) {
  return p.M >= 1 && p.M <= max_m && (p.M == 1 || (p.x_stride % 8 == 0 && p.out_stride >= p.N)) &&
         (p.splits == 1 || p.splits == 2 || p.splits == 4) && p.K > 0 && p.K % (16 * p.splits) == 0 &&
         p.K / p.splits <= kMaxSliceK && p.clusters >= 1 && p.clusters <= p.N && p.clusters <= 65535 &&
         layout((p.N + p.clusters - 1) / p.clusters, p.M).total <= kMaxSmem;
}
}  // namespace gemvr

// kPerRow = ceil(K / S / 4 / 512): float4 per thread per row slice (compile-time, so the batch's
// row and step of each load are constants and cost no registers). kEvictFirst: the weight loads
// carry an L2 evict_first policy (p.w_evict_first).
template <int kPerRow, bool kEvictFirst>
__global__ void __launch_bounds__(gemvr::kThreads, 1) router_gemv_fp32_ldg_kernel(const GemvFp32Params p) {
  using namespace gemvr;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const CtaSlice c = cta_slice<kEvictFirst>(p, smem, tid);
  const int rows = c.rows, ks4 = c.ks4, K4 = c.K4;
  constexpr int kRowsPerBatch = kMaxLoads / kPerRow;
  constexpr int kLoads = kRowsPerBatch * kPerRow;

  hpc::pdl_wait();
  uint2 xr[kPerRow];
  load_x<kPerRow>(p, c, tid, xr);
  for (int rb = 0; rb < rows; rb += kRowsPerBatch) {
    const int nr = rows - rb < kRowsPerBatch ? rows - rb : kRowsPerBatch;
    float4 w[kLoads];
    const float4* rp = c.w4 + static_cast<int64_t>(rb) * K4;  // one pointer walks the rows
#pragma unroll
    for (int r = 0; r < kRowsPerBatch; ++r) {  // every load of the batch before any use
#pragma unroll
      for (int j = 0; j < kPerRow; ++j) {
        const bool ok = r < nr && tid + j * kThreads < ks4;
        w[r * kPerRow + j] = ok ? sm90::ldg_weight<kEvictFirst>(rp + j * kThreads, c.policy)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      rp += K4;
    }
    float acc = 0.f;
    int cur = 0;
#pragma unroll
    for (int it = 0; it < kLoads; ++it) {
      const int r = it / kPerRow, j = it % kPerRow;  // the same in every thread
      if (r >= nr) break;
      if (r != cur) {
        store_warp_sum(c.red, rb + cur, warp, lane, acc);
        acc = 0.f;
        cur = r;
      }
      if (tid + j * kThreads < ks4) acc = fma_bf16x4(w[it], xr[j], acc);
    }
    store_warp_sum(c.red, rb + cur, warp, lane, acc);
  }
  finish_rows(p, c.red, c.part, c.row0, rows, c.S, c.rank, tid);
}

// 2 <= M <= kMaxTokens (see the top of the file): gemvr's weight batches (kMaxLoadsTok float4 per
// thread), then for each group of kTG tokens their x slices in registers and, per row, one FMA
// chain and one warp butterfly per token.
template <int kPerRow, bool kEvictFirst>
__global__ void __launch_bounds__(gemvr::kThreads, 1) router_gemv_fp32_ldg_tokens_kernel(const GemvFp32Params p) {
  using namespace gemvr;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const CtaSlice c = cta_slice<kEvictFirst>(p, smem, tid);
  const int rows = c.rows, ks4 = c.ks4, K4 = c.K4, M = p.M;
  constexpr int kRowsPerBatch = kMaxLoadsTok / kPerRow;
  constexpr int kLoads = kRowsPerBatch * kPerRow;
  constexpr int kTG = token_group<kPerRow>();
  const uint2* xg = reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(p.x) + c.k0) + tid;
  const int64_t x_row = p.x_stride / 4;  // uint2 per x row

  hpc::pdl_wait();
  for (int rb = 0; rb < rows; rb += kRowsPerBatch) {
    const int nr = rows - rb < kRowsPerBatch ? rows - rb : kRowsPerBatch;
    float4 w[kLoads];
    const float4* rp = c.w4 + static_cast<int64_t>(rb) * K4;
#pragma unroll
    for (int r = 0; r < kRowsPerBatch; ++r) {  // every load of the batch before any use
#pragma unroll
      for (int j = 0; j < kPerRow; ++j) {
        const bool ok = r < nr && tid + j * kThreads < ks4;
        w[r * kPerRow + j] = ok ? sm90::ldg_weight<kEvictFirst>(rp + j * kThreads, c.policy)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      rp += K4;
    }
    for (int t0 = 0; t0 < M; t0 += kTG) {
      uint2 xr[kTG][kPerRow];
#pragma unroll
      for (int t = 0; t < kTG; ++t) {
#pragma unroll
        for (int j = 0; j < kPerRow; ++j) {
          xr[t][j] = t0 + t < M && tid + j * kThreads < ks4 ? __ldg(xg + (t0 + t) * x_row + j * kThreads)
                                                            : make_uint2(0u, 0u);
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerBatch; ++r) {
        if (r >= nr) break;
        float acc[kTG];
#pragma unroll
        for (int t = 0; t < kTG; ++t) acc[t] = 0.f;
#pragma unroll
        for (int j = 0; j < kPerRow; ++j) {
          if (tid + j * kThreads < ks4) {
#pragma unroll
            for (int t = 0; t < kTG; ++t) acc[t] = fma_bf16x4(w[r * kPerRow + j], xr[t][j], acc[t]);
          }
        }
#pragma unroll
        for (int t = 0; t < kTG; ++t) {
          if (t0 + t < M) store_warp_sum(c.red, (rb + r) * M + t0 + t, warp, lane, acc[t]);
        }
      }
    }
  }
  finish_rows(p, c.red, c.part, c.row0, rows, c.S, c.rank, tid, M);
}

template <bool kEvictFirst>
inline cudaError_t launch_gemv_fp32_ldg_tokens(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  const dim3 block(gemvr::kThreads);
  const auto [grid, smem, per_row] = gemvr::launch_shape(p);
  switch (per_row) {
    case 1:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_tokens_kernel<1, kEvictFirst>, grid, block, smem,
                                        p.splits, stream, pdl, p);
    case 2:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_tokens_kernel<2, kEvictFirst>, grid, block, smem,
                                        p.splits, stream, pdl, p);
    case 3:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_tokens_kernel<3, kEvictFirst>, grid, block, smem,
                                        p.splits, stream, pdl, p);
    default:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_tokens_kernel<4, kEvictFirst>, grid, block, smem,
                                        p.splits, stream, pdl, p);
  }
}

template <bool kEvictFirst>
inline cudaError_t launch_gemv_fp32_ldg(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  if (p.M > 1) return launch_gemv_fp32_ldg_tokens<kEvictFirst>(p, stream, pdl);
  const dim3 block(gemvr::kThreads);
  const auto [grid, smem, per_row] = gemvr::launch_shape(p);
  switch (per_row) {
    case 1:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_kernel<1, kEvictFirst>, grid, block, smem, p.splits,
                                        stream, pdl, p);
    case 2:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_kernel<2, kEvictFirst>, grid, block, smem, p.splits,
                                        stream, pdl, p);
    case 3:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_kernel<3, kEvictFirst>, grid, block, smem, p.splits,
                                        stream, pdl, p);
    default:
      return hpc::launch_kernel_cluster(router_gemv_fp32_ldg_kernel<4, kEvictFirst>, grid, block, smem, p.splits,
                                        stream, pdl, p);
  }
}

// Raw-pointer launcher (requirements: gemvr::launchable with M <= kMaxTokens, checked in Python too).
inline cudaError_t launch_router_gemv_fp32_ldg(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  using namespace gemvr;
  if (!launchable(p, kMaxTokens)) return cudaErrorInvalidValue;
  return p.w_evict_first ? launch_gemv_fp32_ldg<true>(p, stream, pdl) : launch_gemv_fp32_ldg<false>(p, stream, pdl);
}

}  // namespace hpc::router_gemm
