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
// Measured (H200): Chat M=1 11.68 us (bulk-copy gemv 12.74, split-K kernel 12.35),
// Lite 7.25, K=4096 N=192 6.59; heuristics.TABLE picks it (S=1) at M=1 on those shapes.
//
// kEvictFirst (Plan.evict_first): the weight loads carry an L2 evict_first policy. After the
// benchmark's written flush the L2 is full of dirty lines; Chat M=1 11.79-11.87 -> 11.23-11.33 us
// with it (two runs), the table uses it there. Same data, same bits.
//
// Determinism: element k4 of a row slice is read by thread k4 % 512 at its step k4 / 512, for
// every row and every CTA; each thread's chain, the warp butterfly and the in-order sums over
// warps and ranks depend only on (K, S), so the result is independent of the grid size.
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

struct Layout {
  int red, part, total;  // red: float[rows][kWarps]; part: float[rows]
};

__host__ __device__ inline Layout layout(int max_rows) {
  Layout l;
  l.red = 0;
  l.part = l.red + max_rows * kWarps * 4;
  l.total = l.part + max_rows * 4;
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

// The end of every gemvr-family kernel once red[row][warp] holds all warp sums of the CTA's
// rows: the in-order sum over warps, then (S > 1) over the cluster's ranks through distributed
// shared memory; rank q writes rows q, q + S, ... of out[row0 ...].
__device__ __forceinline__ void finish_rows(const GemvFp32Params& p, float* red, float* part, int row0, int rows,
                                            int S, int rank, int tid) {
  __syncthreads();
  for (int r = tid; r < rows; r += kThreads) {
    float v = red[r * kWarps];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) v += red[r * kWarps + q];
    part[r] = v;
  }
  __syncthreads();
  hpc::pdl_launch_dependents();

  if (S == 1) {
    for (int r = tid; r < rows; r += kThreads) p.out[row0 + r] = part[r];
    return;
  }
  sm90::cluster_sync();  // rank q finishes rows q, q + S, ..., summing the ranks in order
  const uint32_t base = sm90::smem_u32(part);
  for (int r = rank * kThreads + tid; r < rows; r += S * kThreads) {
    const uint32_t addr = base + static_cast<uint32_t>(r) * 4u;
    float v = sm90::ld_dsmem_f32(sm90::map_to_rank(addr, 0));
    for (int q = 1; q < S; ++q) v += sm90::ld_dsmem_f32(sm90::map_to_rank(addr, q));
    p.out[row0 + r] = v;
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
  const Layout l = layout((p.N + G - 1) / G);
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
  return {dim3(p.splits, p.clusters, 1), static_cast<size_t>(layout((p.N + p.clusters - 1) / p.clusters).total),
          (p.K / p.splits / 4 + kThreads - 1) / kThreads};
}

// The requirements every gemvr-family launcher checks (also checked in Python): M == 1, splits
// in {1, 2, 4}, K % (16 * splits) == 0, K / splits <= kMaxSliceK, 1 <= clusters <= N, the
// reduction buffers within shared memory.
inline bool launchable(const GemvFp32Params& p) {
  return p.M == 1 && (p.splits == 1 || p.splits == 2 || p.splits == 4) && p.K > 0 && p.K % (16 * p.splits) == 0 &&
         p.K / p.splits <= kMaxSliceK && p.clusters >= 1 && p.clusters <= p.N && p.clusters <= 65535 &&
         layout((p.N + p.clusters - 1) / p.clusters).total <= kMaxSmem;
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

template <bool kEvictFirst>
inline cudaError_t launch_gemv_fp32_ldg(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
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

// Raw-pointer launcher (requirements: gemvr::launchable, checked in Python too).
inline cudaError_t launch_router_gemv_fp32_ldg(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  using namespace gemvr;
  if (!launchable(p)) return cudaErrorInvalidValue;
  return p.w_evict_first ? launch_gemv_fp32_ldg<true>(p, stream, pdl) : launch_gemv_fp32_ldg<false>(p, stream, pdl);
}

}  // namespace hpc::router_gemm
