// scores[M, N] = x[M, K] (BF16) @ (W_hi + W_lo / 256)[N, K]^T on BF16 tensor cores (sm_90a).
//
// W_hi = bf16(W) and W_lo = bf16((W - W_hi) * 256) are prepared once (hpc_router_gemm.RouterWeight).
// One CTA owns a [BM = 64 * WGS, BN] tile of scores and a contiguous range of K blocks (64
// wide). A producer warpgroup (one thread) streams the x tile and both weight tiles of each
// K block into a STAGES-deep ring of 128-byte-swizzled shared memory with TMA, completing on
// mbarriers; each consumer warpgroup owns 64 token rows and issues, per 16-wide K step, two
// wgmma with the same A descriptor (the x tile, loaded once) into two FP32 accumulators. The
// epilogue forms acc_hi + acc_lo / 256.
//
// Split-K: gridDim.x CTAs along K form one cluster; each writes its FP32 tile to its own shared
// memory and CTA r sums rows [r * BM / S, (r + 1) * BM / S) over the cluster in rank order
// through distributed shared memory (deterministic; no atomics, no workspace). With a
// workspace (ws_mode 1 or 2, splitk_workspace.cuh) the S CTAs are not a cluster: each writes
// its tile to global memory and the sum is formed in the same rank order (same bits).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/pdl.cuh"
#include "hpc_common/persistent.cuh"
#include "hpc_router_gemm/tma_encode.cuh"
#include "hpc_router_gemm/router_gemm_params.h"
#include "hpc_router_gemm/sm90.cuh"
#include "hpc_router_gemm/splitk_workspace.cuh"
#include "hpc_router_gemm/wgmma_ops.cuh"

namespace hpc::router_gemm {

struct Bf16x2DevParams {
  float* out;
  int64_t out_stride;
  int M, N, K;
  float* ws;      // split-K partials, [tile][rank][R / 4][consumer thread] float4 (ws_mode != 0)
  int* counters;  // one arrival counter per tile, zero between calls
  int ws_mode;    // 0: cluster reduction (or no split); 1: last arrival reduces; 2: all reduce
};

template <int BN_, int WGS_, int STAGES_>
struct Bf16x2Config {
  static constexpr int BN = BN_, WGS = WGS_, STAGES = STAGES_;
  static constexpr int BM = 64 * WGS;
  static constexpr int BK = 64;  // one 128-byte swizzle row of BF16
  static constexpr int kThreads = 128 * (WGS + 1);
  static constexpr int kXBytes = BM * BK * 2;
  static constexpr int kWBytes = BN * BK * 2;
  static constexpr int kStageBytes = kXBytes + 2 * kWBytes;
  static constexpr int kEpiStride = BN + 8;  // floats; 16-byte aligned rows, fewer bank conflicts
  static constexpr int kEpiBytes = BM * kEpiStride * 4;
  static constexpr int kRingBytes = STAGES * kStageBytes;
  static constexpr int kTileBytes = kRingBytes > kEpiBytes ? kRingBytes : kEpiBytes;
  static constexpr int kSmemBytes = 1024 + kTileBytes + 2 * STAGES * 8 + 16;  // + alignment slack, flag
  // Register split between the producer and consumer warpgroups (setmaxnreg, WGS == 2 only).
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(BN % 8 == 0 && BN <= 256 && kWBytes % 1024 == 0, "wgmma N / swizzle atom");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

template <class C>
__device__ __forceinline__ void cluster_reduce_store(const Bf16x2DevParams& p, uint8_t* tile, int splits,
                                                     uint32_t rank, int m0, int n0) {
  __syncwarp();  // the .aligned cluster barrier needs converged warps (the TMA thread diverged)
  sm90::cluster_sync();
  const int rows = C::BM / splits;
  const int r0 = static_cast<int>(rank) * rows;
  constexpr int V = C::BN / 4;
  const uint32_t base = sm90::smem_u32(tile);
  for (int idx = threadIdx.x; idx < rows * V; idx += C::kThreads) {
    const int r = r0 + idx / V, c = (idx % V) * 4;
    const uint32_t addr = base + static_cast<uint32_t>(r * C::kEpiStride + c) * 4u;
    float4 acc = sm90::ld_dsmem_f4(sm90::map_to_rank(addr, 0));
    for (int q = 1; q < splits; ++q) {
      const float4 t = sm90::ld_dsmem_f4(sm90::map_to_rank(addr, q));
      acc.x += t.x;
      acc.y += t.y;
      acc.z += t.z;
      acc.w += t.w;
    }
    const int row = m0 + r, col = n0 + c;
    if (row < p.M && col < p.N) *reinterpret_cast<float4*>(p.out + static_cast<int64_t>(row) * p.out_stride + col) = acc;
  }
  sm90::cluster_sync();  // peers may still read this CTA's tile
}

template <int BN, int WGS, int STAGES>
__global__ void __launch_bounds__(128 * (WGS + 1), WGS == 1 ? 2 : 1)
    router_gemm_bf16x2_wgmma_kernel(const __grid_constant__ CUtensorMap tm_x,
                                    const __grid_constant__ CUtensorMap tm_whi,
                                    const __grid_constant__ CUtensorMap tm_wlo, const Bf16x2DevParams p) {
  using C = Bf16x2Config<BN, WGS, STAGES>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kTileBytes);
  uint64_t* empty = full + STAGES;

  const int wg = threadIdx.x / 128;
  const int splits = gridDim.x;
  const bool cluster_split = splits > 1 && p.ws_mode == 0;
  const uint32_t rank = blockIdx.x;  // == the cluster rank when the split is a cluster
  const int n0 = blockIdx.y * BN, m0 = blockIdx.z * C::BM;
  const int ksteps = p.K / C::BK;
  const int kb0 = static_cast<int>(rank) * ksteps / splits;
  const int nk = (static_cast<int>(rank) + 1) * ksteps / splits - kb0;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], WGS * 4);  // one arrival per consumer warp
    }
    sm90::mbar_init_fence();
  }
  if (threadIdx.x == WGS * 128) {
    sm90::tma_prefetch_desc(&tm_x);
    sm90::tma_prefetch_desc(&tm_whi);
    sm90::tma_prefetch_desc(&tm_wlo);
  }
  __syncthreads();
  hpc::pdl_wait();

  if (wg == WGS) {
    // ---- producer warpgroup: one thread issues every TMA load ----
    if constexpr (WGS > 1) sm90::setmaxnreg_dec<C::kProducerRegs>();
    if (threadIdx.x == WGS * 128) {
      for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES;
        if (i >= STAGES) sm90::mbar_wait<true>(&empty[s], ((i / STAGES) - 1) & 1);
        uint8_t* st = smem + s * C::kStageBytes;
        sm90::mbar_arrive_expect_tx(&full[s], C::kStageBytes);
        const int kc = (kb0 + i) * C::BK;
        sm90::tma_load_2d(st, &tm_x, &full[s], kc, m0);
        sm90::tma_load_2d(st + C::kXBytes, &tm_whi, &full[s], kc, n0);
        sm90::tma_load_2d(st + C::kXBytes + C::kWBytes, &tm_wlo, &full[s], kc, n0);
      }
      // Watch the last load land too: a TMA that never completes would otherwise leave the
      // consumers (who wait without a watchdog) spinning forever.
      if (nk > 0) sm90::mbar_wait<true>(&full[(nk - 1) % STAGES], ((nk - 1) / STAGES) & 1);
    }
    if (cluster_split) cluster_reduce_store<C>(p, smem, splits, rank, m0, n0);
  } else {
    // ---- consumer warpgroup `wg`: token rows [m0 + 64 wg, m0 + 64 wg + 64) ----
    if constexpr (WGS > 1) sm90::setmaxnreg_inc<C::kConsumerRegs>();
    constexpr int R = BN / 2;
    float acc_hi[R], acc_lo[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc_hi[i] = acc_lo[i] = 0.f;
    const bool active = m0 + wg * 64 < p.M;  // rows all past M: skip the math, keep the handshake
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    for (int i = 0; i < nk; ++i) {
      const int s = i % STAGES;
      sm90::mbar_wait(&full[s], (i / STAGES) & 1);
      if (active) {
        const uint32_t st = sm90::smem_u32(smem + s * C::kStageBytes);
        const uint32_t a = st + wg * 64 * 128;
        const uint32_t bh = st + C::kXBytes, bl = bh + C::kWBytes;
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < C::BK / 16; ++kk) {
          const uint64_t da = sm90::desc_k_major_sw128(a + kk * 32);
          Wgmma<BN>::mma(acc_hi, da, sm90::desc_k_major_sw128(bh + kk * 32));
          Wgmma<BN>::mma(acc_lo, da, sm90::desc_k_major_sw128(bl + kk * 32));
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // the previous K block's products are done: free its stage
        if (i > 0 && lane == 0) sm90::mbar_arrive(&empty[(i - 1) % STAGES]);
      } else if (lane == 0) {
        sm90::mbar_arrive(&empty[s]);
      }
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs(acc_hi);
    sm90::fence_regs(acc_lo);
    hpc::pdl_launch_dependents();

#pragma unroll
    for (int i = 0; i < R; ++i) acc_hi[i] = fmaf(acc_lo[i], 1.0f / 256.0f, acc_hi[i]);

    // Accumulator layout of wgmma m64nN: register 4c + 2h + j holds row 16 warp + lane/4 + 8h,
    // column 8c + 2 (lane % 4) + j of the warpgroup's 64 x BN tile.
    const int r_loc = wg * 64 + warp * 16 + lane / 4;
    const int c_loc = 2 * (lane % 4);
    if (splits > 1 && !cluster_split) {
      // Workspace split-K: every consumer thread (active or not: zeros) writes its slot.
      constexpr int kCT = WGS * 128, T = (R / 4) * kCT;
      const int tile = blockIdx.z * gridDim.y + blockIdx.y;
      const float4* part = reinterpret_cast<const float4*>(p.ws) + static_cast<int64_t>(tile) * splits * T;
      splitk::store_partial<R, kCT>(reinterpret_cast<float4*>(p.ws) + (static_cast<int64_t>(tile) * splits + rank) * T,
                                    acc_hi, threadIdx.x);
      volatile int* flag = reinterpret_cast<volatile int*>(empty + STAGES);
      int* ctr = p.counters + tile;
      if (p.ws_mode == 1) {
        if (splitk::arrive<kCT>(ctr, 0, splits, flag) != splits - 1) return;  // not the last arrival
        splitk::reduce_slots<kCT>(part, T, splits, 0, T, p.out, p.out_stride, m0, n0, p.M, p.N);
      } else {
        splitk::arrive<kCT>(ctr, splits, 2 * splits, flag);
        const int lo = static_cast<int>(rank) * T / splits, hi = (static_cast<int>(rank) + 1) * T / splits;
        splitk::reduce_slots<kCT>(part, T, splits, lo, hi, p.out, p.out_stride, m0, n0, p.M, p.N);
        splitk::arrive<kCT>(ctr, 0, 2 * splits, flag);  // second round: the last one resets
      }
    } else if (splits == 1) {
      if (active) {
#pragma unroll
        for (int c = 0; c < BN / 8; ++c) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = m0 + r_loc + 8 * h, col = n0 + 8 * c + c_loc;
            if (row < p.M && col < p.N) {
              *reinterpret_cast<float2*>(p.out + static_cast<int64_t>(row) * p.out_stride + col) =
                  make_float2(acc_hi[4 * c + 2 * h], acc_hi[4 * c + 2 * h + 1]);
            }
          }
        }
      }
    } else {
      sm90::named_barrier(1, WGS * 128);  // every consumer is done reading the stage ring
      float* tile = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int c = 0; c < BN / 8; ++c) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          *reinterpret_cast<float2*>(tile + (r_loc + 8 * h) * C::kEpiStride + 8 * c + c_loc) =
              make_float2(acc_hi[4 * c + 2 * h], acc_hi[4 * c + 2 * h + 1]);
        }
      }
      cluster_reduce_store<C>(p, smem, splits, rank, m0, n0);
    }
  }
}

template <class C>
inline auto bf16x2_kernel() {
  return router_gemm_bf16x2_wgmma_kernel<C::BN, C::WGS, C::STAGES>;
}

// Raw-pointer launcher. Requirements (checked in Python, re-checked here): K % 64 == 0,
// N % 8 == 0, x row stride % 8 == 0, out row stride % 4 == 0, 16-byte aligned pointers,
// splits in {1, 2, 4, 8}.
template <class C>
inline cudaError_t launch_router_gemm_bf16x2(const Bf16x2Params& p, cudaStream_t stream, bool pdl) {
  const bool pow2 = p.splits == 1 || p.splits == 2 || p.splits == 4 || p.splits == 8;
  const bool ws = p.ws_mode != 0 && p.splits > 1;
  if (p.M < 1 || p.N < 8 || p.N % 8 || p.K < C::BK || p.K % C::BK || p.x_stride % 8 || p.out_stride % 4 ||
      p.ws_mode < 0 || p.ws_mode > 2) {
    return cudaErrorInvalidValue;
  }
  // Cluster split: 1, 2, 4 or 8 CTAs that divide BM. Workspace split: 2..16, each CTA at
  // least one K block, a workspace and counters.
  if (ws ? (p.splits > 16 || p.splits > p.K / C::BK || p.ws == nullptr || p.counters == nullptr)
         : (!pow2 || C::BM % p.splits)) {
    return cudaErrorInvalidValue;
  }
  CUtensorMap tm_x, tm_whi, tm_wlo;
  cudaError_t e = encode_bf16_2d_sw128(&tm_x, p.x, p.K, p.M, static_cast<uint64_t>(p.x_stride) * 2, C::BK, C::BM);
  if (e == cudaSuccess) e = encode_bf16_2d_sw128(&tm_whi, p.w_hi, p.K, p.N, static_cast<uint64_t>(p.K) * 2, C::BK, C::BN);
  if (e == cudaSuccess) e = encode_bf16_2d_sw128(&tm_wlo, p.w_lo, p.K, p.N, static_cast<uint64_t>(p.K) * 2, C::BK, C::BN);
  if (e != cudaSuccess) return e;
  const Bf16x2DevParams dp{p.out, p.out_stride, p.M, p.N, p.K, p.ws, p.counters, ws ? p.ws_mode : 0};
  dim3 grid(p.splits, (p.N + C::BN - 1) / C::BN, (p.M + C::BM - 1) / C::BM);
  return hpc::launch_kernel_cluster(bf16x2_kernel<C>(), grid, dim3(C::kThreads), C::kSmemBytes, ws ? 1 : p.splits,
                                    stream, pdl,
                             tm_x, tm_whi, tm_wlo, dp);
}

template <class C>
inline int bf16x2_max_active_clusters(int splits) {
  return hpc::max_active_clusters(bf16x2_kernel<C>(), C::kThreads, C::kSmemBytes, splits);
}

}  // namespace hpc::router_gemm
