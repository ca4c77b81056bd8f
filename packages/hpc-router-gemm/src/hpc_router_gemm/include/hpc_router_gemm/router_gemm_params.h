// Plain parameter structs of the router GEMM launchers, shared by the kernel headers and the
// binding layer (which is compiled by the host compiler and must not see device code).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hpc::router_gemm {

// Exact FP32 CUDA-core path (router_gemm_fp32_splitk.cuh).
struct Fp32SplitKParams {
  const void* x;  // BF16 [M, K], row stride x_stride elements, 8-byte aligned rows
  int64_t x_stride;
  const float* w;  // FP32 [N, K] contiguous, 16-byte aligned
  float* out;      // FP32 [M, N], row stride out_stride elements
  int64_t out_stride;
  int M, N, K;
  int splits;  // CTAs per cluster along K, 1..8
  // 1: each CTA first asks L2 for its whole weight slice (bulk prefetch), so every DRAM read
  // of the call is in flight at once instead of one batch of loads per lane at a time.
  int l2_prefetch;
  // 1: the weight loads carry an L2 evict_first policy (sm90::l2_evict_first_policy): same
  // data, only which L2 lines are replaced first changes. Likewise in the structs below.
  int w_evict_first = 0;
};

// Exact FP32 streaming GEMV for one to eight tokens (router_gemv_fp32.cuh; one token only:
// router_gemv_fp32_ldg.cuh).
struct GemvFp32Params {
  const void* x;  // BF16 [M, K], row stride x_stride elements (multiple of 8), 16-byte aligned
  int64_t x_stride;
  const float* w;  // FP32 [N, K] contiguous, 16-byte aligned
  float* out;      // FP32 [M, N], row stride out_stride elements
  int64_t out_stride;
  int M, N, K;
  int splits;    // CTAs per cluster along K: 1, 2 or 4
  int clusters;  // clusters in the grid (each owns a contiguous range of rows); <= N
  int w_evict_first = 0;
};

// Two-product BF16 tensor-core path (router_gemm_bf16x2_wgmma.cuh).
struct Bf16x2Params {
  const void* x;  // BF16 [M, K], row stride x_stride elements (multiple of 8), 16-byte aligned
  int64_t x_stride;
  const void* w_hi;  // BF16 [N, K] contiguous
  const void* w_lo;  // BF16 [N, K] contiguous
  float* out;        // FP32 [M, N], row stride out_stride (multiple of 4), 16-byte aligned
  int64_t out_stride;
  int M, N, K;
  int splits;  // CTAs along K: a cluster of 1, 2, 4 or 8; with a workspace 2..16
  // Split-K without a cluster (splitk_workspace.cuh): 0 = cluster reduction; 1 = the last
  // CTA of a tile to arrive reduces it; 2 = every CTA reduces 1/S of it (the whole grid must
  // be resident at once). ws: splits * tiles * BM * BN floats; counters: one int per tile,
  // zero before the first call (the kernel leaves them zero).
  float* ws = nullptr;
  int* counters = nullptr;
  int ws_mode = 0;
  // 1: two CTAs of neighbouring M tiles form a cluster and multicast the weight tiles to
  // each other (a K split then needs ws_mode != 0); ws and counters cover an even number
  // of M tiles.
  int multicast = 0;
  // > 0: the producer asks L2 for the x box (and, in CTAs of the first M tile, the weight
  // boxes) of K block i + prefetch while it loads block i, so TMA loads find L2 instead of
  // DRAM (the ring alone holds ~4 blocks in flight per SM). 0: no prefetch. Same results.
  int prefetch = 0;
  int w_evict_first = 0;  // the weight tiles' TMA loads (x keeps the default policy)
};

// C entry points (csrc/router_gemm.cu). `tile`: 0 = narrow (64 x 32), 1 = wide (128 x 192),
// 2 = wide96 (128 x 96), 4 = wide96 and 5 = wide with the x fragments in registers, 6 = wide96
// and 7 = wide96 in registers with both products in one wgmma, 8 = tile 6 with a 4-stage ring,
// 9 = the fused 128 x 128 tile (3 is the gemv kernel's key in Python, not a wgmma tile).
cudaError_t run_fp32_splitk(const Fp32SplitKParams& p, cudaStream_t stream, bool pdl);
cudaError_t run_bf16x2(int tile, const Bf16x2Params& p, cudaStream_t stream, bool pdl);
int bf16x2_max_clusters(int tile, int splits);
cudaError_t run_gemv_fp32(const GemvFp32Params& p, cudaStream_t stream, bool pdl);
cudaError_t run_gemv_fp32_ldg(const GemvFp32Params& p, cudaStream_t stream, bool pdl);
cudaError_t run_gemv_fp32_window(const GemvFp32Params& p, cudaStream_t stream, bool pdl);
int gemv_max_clusters(int splits);
void bf16x2_tile_shape(int tile, int* bm, int* bn);

}  // namespace hpc::router_gemm
