// scores[1, N] = x[1, K] (BF16) @ W[N, K]^T (FP32), exact FP32, one token, "gemvrw2": gemvr
// (router_gemv_fp32_ldg.cuh) with the weight requested two rows at a time per thread.
//
// Why (the router NOTES, "Chat M=1"): after a written L2 flush the L2 holds only dirty lines, which
// costs gemvr 1.9-2.2 us on Chat M=1 (18.9 MB) and cuBLAS 0.7-1.1. gemvr asks for its whole slice in
// one batch (18 float4 per thread, 144 KB per SM), so nearly every weight line is allocated while
// its L2 set still holds only dirty lines, and the evict_first policy (which makes a consumed weight
// line the next victim) has little to act on. Here the CTA's rows stream through a ring of 2 row
// buffers per thread; row r + 2 is requested only after row r has been summed (the load writes the
// registers row r just freed, and sits behind a branch, so neither nvcc nor ptxas lifts it above
// those FMAs): Chat 48 KB per SM in flight instead of 144 KB, so later weight lines can replace the
// consumed lines of earlier ones (with Plan.evict_first) instead of dirty lines. H200, Chat M=1,
// written flush: 10.85 us against gemvr's 11.23 (FP32 cuBLAS 11.28); read flush 9.38 against 9.73.
//
// Determinism: exactly gemvr's arithmetic. Element k4 of a row slice is read by thread k4 % 512
// at its step k4 / 512; each thread sums a row's steps in order from 0 with the same four fmaf
// per float4, then the same warp butterfly, the same per-warp slot in shared memory, the same
// in-order sums over warps and cluster ranks. Only the load schedule differs, so it gives gemvr's
// bits for the same (K, S) (the GPU tests assert it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/pdl.cuh"
#include "hpc_router_gemm/router_gemm_params.h"
#include "hpc_router_gemm/router_gemv_fp32_ldg.cuh"
#include "hpc_router_gemm/sm90.cuh"

namespace hpc::router_gemm {

namespace gemvr {
constexpr int kWindowRows = 2;  // row buffers per thread
}  // namespace gemvr

// kPerRow: float4 per thread per row slice, as in gemvr.
template <int kPerRow, bool kEvictFirst>
__global__ void __launch_bounds__(gemvr::kThreads, 1) router_gemv_fp32_window_kernel(const GemvFp32Params p) {
  using namespace gemvr;
  constexpr int kDepth = kWindowRows;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const CtaSlice c = cta_slice<kEvictFirst>(p, smem, tid);
  const int rows = c.rows, ks4 = c.ks4, K4 = c.K4;

  hpc::pdl_wait();
  uint2 xr[kPerRow];
  load_x<kPerRow>(p, c, tid, xr);

  float4 w[kDepth][kPerRow];
  // Row r's slice of this thread into buffer b (guards as in gemvr: a partial last step of the
  // slice leaves the high threads without a load).
  auto load_row = [&](int b, int r) {
    const float4* rp = c.w4 + static_cast<int64_t>(r) * K4;
#pragma unroll
    for (int j = 0; j < kPerRow; ++j) {
      w[b][j] = tid + j * kThreads < ks4 ? sm90::ldg_weight<kEvictFirst>(rp + j * kThreads, c.policy)
                                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
#pragma unroll
  for (int b = 0; b < kDepth; ++b) {
    if (b < rows) load_row(b, b);
  }
  // Rolled outer loop: ptxas does not pipeline loads across iterations, so the window holds.
#pragma unroll 1
  for (int rb = 0; rb < rows; rb += kDepth) {
#pragma unroll
    for (int b = 0; b < kDepth; ++b) {
      const int r = rb + b;
      if (r < rows) {  // uniform over the CTA
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < kPerRow; ++j) {
          if (tid + j * kThreads < ks4) acc = fma_bf16x4(w[b][j], xr[j], acc);
        }
        // The next row of this buffer, requested only now that the buffer has been read.
        if (r + kDepth < rows) load_row(b, r + kDepth);
        store_warp_sum(c.red, r, warp, lane, acc);
      }
    }
  }
  finish_rows(p, c.red, c.part, c.row0, rows, c.S, c.rank, tid);
}

namespace gemvr {
template <int kPerRow, bool kEvictFirst>
inline cudaError_t launch_window(const GemvFp32Params& p, dim3 grid, size_t smem, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel_cluster(router_gemv_fp32_window_kernel<kPerRow, kEvictFirst>, grid, dim3(kThreads), smem,
                                    p.splits, stream, pdl, p);
}

template <bool kEvictFirst>
inline cudaError_t launch_window_per_row(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  const auto [grid, smem, per_row] = launch_shape(p);
  switch (per_row) {
    case 1:
      return launch_window<1, kEvictFirst>(p, grid, smem, stream, pdl);
    case 2:
      return launch_window<2, kEvictFirst>(p, grid, smem, stream, pdl);
    case 3:
      return launch_window<3, kEvictFirst>(p, grid, smem, stream, pdl);
    default:
      return launch_window<4, kEvictFirst>(p, grid, smem, stream, pdl);
  }
}
}  // namespace gemvr

// Raw-pointer launcher: gemvr's requirements (gemvr::launchable).
inline cudaError_t launch_router_gemv_fp32_window(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  using namespace gemvr;
  if (!launchable(p)) return cudaErrorInvalidValue;
  return p.w_evict_first ? launch_window_per_row<true>(p, stream, pdl) : launch_window_per_row<false>(p, stream, pdl);
}

}  // namespace hpc::router_gemm
