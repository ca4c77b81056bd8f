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
// A from registers (RS = true): per K block each consumer warp loads its 16 x 64 slice of the
// x tile once with ldmatrix (four k16 fragments) and both products read it from registers, so
// the x tile leaves shared memory once per block instead of once per product (wide96: 64 KB
// of wgmma/ldmatrix reads per block instead of 80). Two fragment sets alternate between K
// blocks (a wgmma may read its A registers until its group is waited for); with the 128 x
// 192 tile the accumulators leave room for one set only, and each block waits for its own
// group before the next block's loads overwrite it. Same instructions in the same order on
// the same operands: the same bits as the shared-memory (SS) kernel.
//
// Fused products (FUSED = true, BN <= 128): a stage holds the W_hi tile directly followed by the
// W_lo tile (BN rows each, whole 1024-byte swizzle atoms), so the two tiles are one K-major
// B operand of 2 BN rows, and one wgmma m64n(2 BN)k16 per K step writes acc_hi (columns
// [0, BN)) and acc_lo (columns [BN, 2 BN)): half the wgmma instructions, the A tile read once
// per K step (Wgmma<2 BN>::mma_pair / mma_rs_pair).
//
// Split-K: gridDim.x CTAs along K form one cluster; each writes its FP32 tile to its own shared
// memory and CTA r sums rows [r * BM / S, (r + 1) * BM / S) over the cluster in rank order
// through distributed shared memory (deterministic; no atomics, no workspace). With S = 2 and two
// consumer warpgroups (kPushReduce) the rows of rank r are warpgroup r's, so the other warpgroup
// pushes its partial into the peer's receive buffer instead (st.async, completing bytes on the
// peer's mbarrier: no barrier at the end; same sum; see the epilogue). With a
// workspace (ws_mode 1 or 2, splitk_workspace.cuh) the S CTAs are not a cluster: each writes
// its tile to global memory and the sum is formed in the same rank order (same bits).
//
// Weight multicast (multicast = 1, workspace split or none): two CTAs with neighbouring M
// tiles and the same N tile and K range form a 2-CTA cluster; each loads its own x tile and
// one half of the W_hi / W_lo rows, multicast into both CTAs, so each weight byte leaves L2
// once per pair (run 3's ncu: the wide96 main loop streams ~7 TB/s from L2, the likely
// limit). A stage is refilled only after the consumers of both CTAs released it (their
// warps arrive on both CTAs' empty barriers); a cluster barrier after the main loop keeps
// either CTA from exiting while its peer may still write into it or arrive on its barriers.
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
  int multicast;  // 1: 2-CTA clusters along M share the weight tiles (see above)
  int splits;     // CTAs along K
  int tiles_n;    // N tiles (tile index = m_tile * tiles_n + n_tile)
  int prefetch;   // K blocks of L2 prefetch ahead of the TMA loads (0: none; see Bf16x2Params)
  int w_evict_first;  // 1: the weight boxes load with an L2 evict_first policy
};

template <int BN_, int WGS_, int STAGES_, bool RS_ = false, bool FUSED_ = false>
struct Bf16x2Config {
  static constexpr int BN = BN_, WGS = WGS_, STAGES = STAGES_;
  static constexpr bool RS = RS_, FUSED = FUSED_;
  static_assert(!FUSED || 2 * BN <= 256, "one wgmma of N = 2 BN");
  static constexpr bool kTwoAFrags = BN <= 96;  // RS: room for two fragment sets (see above)
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
  // Two-CTA cluster split with the push reduction (see the kernel): a receive buffer for the
  // peer's 64 x BN partial rows beside the ring (not in it: the peer may push while this CTA's
  // main loop still reads the ring), where it fits (two warpgroups, one per rank's rows).
  static constexpr int kRecvTileBytes = 64 * BN * 4;
  static constexpr bool kPushReduce = WGS == 2 && 1024 + kTileBytes + kRecvTileBytes + 2 * STAGES * 8 + 16 <= 227 * 1024;
  static constexpr int kRecvBytes = kPushReduce ? kRecvTileBytes : 0;
  static constexpr int kSmemBytes = 1024 + kTileBytes + kRecvBytes + 2 * STAGES * 8 + 16;  // + alignment slack, flag
  // Register split between the producer and consumer warpgroups (setmaxnreg, WGS == 2 only).
  // The 128 x 192 tile with A in registers needs 192 accumulators + 16 fragment registers
  // per consumer thread: 240 (ptxas serialises its wgmma at 232), the producer gets 24.
  static constexpr bool kWideRs = RS && BN > 96;
  static constexpr int kProducerRegs = kWideRs ? 24 : 40, kConsumerRegs = kWideRs ? 240 : 232;
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

// Load a warp's four k16 A fragments of one K block (16 rows x 64 BF16 of a 128-byte-swizzled
// tile) with ldmatrix. `row_addr`: the shared address of the row this lane names (lanes 0-7
// rows 0-7, lanes 8-15 rows 8-15 of the warp's slice, lanes 16-31 the same rows again for the
// upper 8 columns of each k16 step); `sw`: row % 8, the swizzle of that row; `hi`: lane / 16.
// Matrices 0-3 of each ldmatrix.x4 are then rows 0-7 / 8-15 x columns 0-7 / 8-15 of the k16
// step: registers a0..a3 of the wgmma (= mma.m16n8k16) A fragment.
__device__ __forceinline__ void load_a_frags(uint32_t (&af)[4][4], uint32_t row_addr, uint32_t sw, uint32_t hi) {
#pragma unroll
  for (uint32_t kk = 0; kk < 4; ++kk) {
    const uint32_t addr = row_addr + ((((2 * kk + hi) ^ sw)) << 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(af[kk][0]), "=r"(af[kk][1]), "=r"(af[kk][2]), "=r"(af[kk][3])
                 : "r"(addr)
                 : "memory");
  }
}

// One K block of both products with A from registers: fragments loaded, fenced (wgmma reads
// registers written just before), then hi and lo for each k16 step, as in the SS kernel.
template <int BN, bool FUSED, int R>
__device__ __forceinline__ void rs_block(float (&acc_hi)[R], float (&acc_lo)[R], uint32_t (&af)[4][4],
                                         uint32_t row_addr, uint32_t sw, uint32_t hi, uint32_t bh, uint32_t bl) {
  load_a_frags(af, row_addr, sw, hi);
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if constexpr (FUSED) {
      Wgmma<2 * BN>::mma_rs_pair(acc_hi, acc_lo, af[kk], sm90::desc_k_major_sw128(bh + kk * 32));
    } else {
      Wgmma<BN>::mma_rs(acc_hi, af[kk], sm90::desc_k_major_sw128(bh + kk * 32));
      Wgmma<BN>::mma_rs(acc_lo, af[kk], sm90::desc_k_major_sw128(bl + kk * 32));
    }
  }
  sm90::wgmma_commit();
}

// A consumer warp frees a ring stage: on its own CTA's barrier, or with multicast on both
// CTAs' (either producer may refill the stage's weight half in both CTAs).
__device__ __forceinline__ void release_stage(uint64_t* bar, bool mc) {
  if (!mc) {
    sm90::mbar_arrive(bar);
    return;
  }
  const uint32_t addr = sm90::smem_u32(bar);
#pragma unroll
  for (uint32_t r = 0; r < 2; ++r) sm90::mbar_arrive_cluster(sm90::map_to_rank(addr, r));
}

template <int BN, int WGS, int STAGES, bool RS, bool FUSED>
__global__ void __launch_bounds__(128 * (WGS + 1), WGS == 1 ? 2 : 1)
    router_gemm_bf16x2_wgmma_kernel(const __grid_constant__ CUtensorMap tm_x,
                                    const __grid_constant__ CUtensorMap tm_whi,
                                    const __grid_constant__ CUtensorMap tm_wlo, const Bf16x2DevParams p) {
  using C = Bf16x2Config<BN, WGS, STAGES, RS, FUSED>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kTileBytes + C::kRecvBytes);
  uint64_t* empty = full + STAGES;
  // Push reduction: completes when the peer's partial (kRecvTileBytes) has landed in `recv`. In
  // the 16 bytes after the ring barriers, beside the workspace flag (a mode of its own).
  uint64_t* recv_bar = empty + STAGES + 1;

  const int wg = threadIdx.x / 128;
  const bool mc = p.multicast != 0;
  const int splits = p.splits;
  const bool cluster_split = splits > 1 && p.ws_mode == 0;
  // Push reduction: S = 2 cluster split, each rank sums the rows one of its warpgroups holds.
  const bool push = C::kPushReduce && cluster_split && splits == 2 && !mc;
  // Grid: (splits, tiles_n, tiles_m), or with multicast (2, splits * tiles_n, tiles_m / 2)
  // with the pair of M tiles along x (the cluster). rank == the cluster rank for a cluster split.
  const uint32_t rank = mc ? blockIdx.y % splits : blockIdx.x;
  const int n_tile = mc ? static_cast<int>(blockIdx.y) / splits : static_cast<int>(blockIdx.y);
  const int m_tile = mc ? static_cast<int>(blockIdx.z) * 2 + static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.z);
  const int n0 = n_tile * BN, m0 = m_tile * C::BM;
  const int ksteps = p.K / C::BK;
  const int kb0 = static_cast<int>(rank) * ksteps / splits;
  const int nk = (static_cast<int>(rank) + 1) * ksteps / splits - kb0;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], WGS * 4 * (mc ? 2 : 1));  // one arrival per consumer warp (of both CTAs)
    }
    if (push) {  // one phase: this arrival arms it, the peer's stores complete its bytes
      sm90::mbar_init(recv_bar, 1);
      sm90::mbar_arrive_expect_tx(recv_bar, C::kRecvTileBytes);
    }
    sm90::mbar_init_fence();
  }
  if (threadIdx.x == WGS * 128) {
    sm90::tma_prefetch_desc(&tm_x);
    sm90::tma_prefetch_desc(&tm_whi);
    sm90::tma_prefetch_desc(&tm_wlo);
  }
  if (mc) {
    sm90::cluster_sync();  // the peer's multicast must find this CTA's barriers initialised
  } else {
    __syncthreads();
    // The peer stores into recv and completes recv_bar only after a cluster wait that this
    // arrival (every thread, after the barrier's initialisation fence) lets through; no thread
    // of this CTA waits on this barrier phase, and none arrives again.
    if (push) sm90::cluster_arrive_relaxed();
  }
  hpc::pdl_wait();

  if (wg == WGS) {
    // ---- producer warpgroup: one thread issues every TMA load ----
    if constexpr (WGS > 1) sm90::setmaxnreg_dec<C::kProducerRegs>();
    if (threadIdx.x == WGS * 128) {
      // L2 prefetch of block j: the x box of this CTA, and the weight boxes from the CTAs of the
      // first M tile only (every M tile reads the same weight blocks at about the same time).
      const int pf = p.prefetch;
      const bool pf_w = m_tile == 0;
      const int wrow = n0 + (mc ? static_cast<int>(blockIdx.x) * (BN / 2) : 0);
      auto prefetch_block = [&](int j) {
        const int kc = (kb0 + j) * C::BK;
        sm90::tma_prefetch_l2_2d(&tm_x, kc, m0 < p.M ? m0 : 0);
        if (pf_w) {
          sm90::tma_prefetch_l2_2d(&tm_whi, kc, wrow);
          sm90::tma_prefetch_l2_2d(&tm_wlo, kc, wrow);
        }
      };
      const bool ef = p.w_evict_first != 0;
      const uint64_t policy = sm90::l2_evict_first_policy();
      for (int j = 0; j < pf && j < nk; ++j) prefetch_block(j);
      for (int i = 0; i < nk; ++i) {
        if (pf > 0 && i + pf < nk) prefetch_block(i + pf);
        const int s = i % STAGES;
        if (i >= STAGES) sm90::mbar_wait<true>(&empty[s], ((i / STAGES) - 1) & 1);
        uint8_t* st = smem + s * C::kStageBytes;
        sm90::mbar_arrive_expect_tx(&full[s], C::kStageBytes);
        const int kc = (kb0 + i) * C::BK;
        // A phantom M tile (multicast, odd tile count) reads tile 0's rows: its consumers skip
        // the math and nothing of it is stored, it only has to keep the pair's handshake.
        sm90::tma_load_2d(st, &tm_x, &full[s], kc, m0 < p.M ? m0 : 0);
        if (mc) {  // this CTA's half of the weight rows, into both CTAs (same offsets)
          constexpr int kHalf = BN / 2;
          const int c = static_cast<int>(blockIdx.x);
          uint8_t* dhi = st + C::kXBytes + c * kHalf * 128;
          uint8_t* dlo = dhi + C::kWBytes;
          if (ef) {
            sm90::tma_load_2d_multicast_hint(dhi, &tm_whi, &full[s], kc, n0 + c * kHalf, 0x3, policy);
            sm90::tma_load_2d_multicast_hint(dlo, &tm_wlo, &full[s], kc, n0 + c * kHalf, 0x3, policy);
          } else {
            sm90::tma_load_2d_multicast(dhi, &tm_whi, &full[s], kc, n0 + c * kHalf, 0x3);
            sm90::tma_load_2d_multicast(dlo, &tm_wlo, &full[s], kc, n0 + c * kHalf, 0x3);
          }
        } else if (ef) {
          sm90::tma_load_2d_hint(st + C::kXBytes, &tm_whi, &full[s], kc, n0, policy);
          sm90::tma_load_2d_hint(st + C::kXBytes + C::kWBytes, &tm_wlo, &full[s], kc, n0, policy);
        } else {
          sm90::tma_load_2d(st + C::kXBytes, &tm_whi, &full[s], kc, n0);
          sm90::tma_load_2d(st + C::kXBytes + C::kWBytes, &tm_wlo, &full[s], kc, n0);
        }
      }
      // Watch the last load land too: a TMA that never completes would otherwise leave the
      // consumers (who wait without a watchdog) spinning forever.
      if (nk > 0) sm90::mbar_wait<true>(&full[(nk - 1) % STAGES], ((nk - 1) / STAGES) & 1);
    }
    if (mc) {
      __syncwarp();
      sm90::cluster_sync();  // pairs with the consumers' barrier after their main loop
    }
    if (cluster_split && !push) {
      cluster_reduce_store<C>(p, smem, splits, rank, m0, n0);
    }
  } else {
    // ---- consumer warpgroup `wg`: token rows [m0 + 64 wg, m0 + 64 wg + 64) ----
    if constexpr (WGS > 1) sm90::setmaxnreg_inc<C::kConsumerRegs>();
    constexpr int R = BN / 2;
    float acc_hi[R], acc_lo[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc_hi[i] = acc_lo[i] = 0.f;
    const bool active = m0 + wg * 64 < p.M;  // rows all past M: skip the math, keep the handshake
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    if constexpr (RS) {
      uint32_t af0[4][4], af1[4][4];
      // This lane's ldmatrix row within the consumer's 64-row slice (see load_a_frags).
      const uint32_t row = static_cast<uint32_t>(warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1));
      const uint32_t row_off = static_cast<uint32_t>(wg * 64) * 128u + row * 128u;
      const uint32_t sw = static_cast<uint32_t>(lane & 7), hi = static_cast<uint32_t>(lane >> 4);
      for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES;
        sm90::mbar_wait(&full[s], (i / STAGES) & 1);
        if (active) {
          const uint32_t st = sm90::smem_u32(smem + s * C::kStageBytes);
          const uint32_t bh = st + C::kXBytes, bl = bh + C::kWBytes;
          if constexpr (C::kTwoAFrags) {
            if (i & 1) {
              rs_block<BN, FUSED>(acc_hi, acc_lo, af1, st + row_off, sw, hi, bh, bl);
            } else {
              rs_block<BN, FUSED>(acc_hi, acc_lo, af0, st + row_off, sw, hi, bh, bl);
            }
            sm90::wgmma_wait<1>();  // block i - 1 is done: its stage and fragment set are free
            if (i > 0 && lane == 0) release_stage(&empty[(i - 1) % STAGES], mc);
          } else {
            rs_block<BN, FUSED>(acc_hi, acc_lo, af0, st + row_off, sw, hi, bh, bl);
            sm90::wgmma_wait<0>();  // one fragment set: done before the next block reloads it
            if (lane == 0) release_stage(&empty[s], mc);
          }
        } else if (lane == 0) {
          release_stage(&empty[s], mc);
        }
      }
    } else {
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
            if constexpr (FUSED) {
              Wgmma<2 * BN>::mma_pair(acc_hi, acc_lo, da, sm90::desc_k_major_sw128(bh + kk * 32));
            } else {
              Wgmma<BN>::mma(acc_hi, da, sm90::desc_k_major_sw128(bh + kk * 32));
              Wgmma<BN>::mma(acc_lo, da, sm90::desc_k_major_sw128(bl + kk * 32));
            }
          }
          sm90::wgmma_commit();
          sm90::wgmma_wait<1>();  // the previous K block's products are done: free its stage
          if (i > 0 && lane == 0) release_stage(&empty[(i - 1) % STAGES], mc);
        } else if (lane == 0) {
          release_stage(&empty[s], mc);
        }
      }
    }
    sm90::wgmma_wait<0>();
    if (mc) {
      __syncwarp();
      sm90::cluster_sync();  // every remote arrival and multicast write of the pair is done
    }
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
      const int tile = m_tile * p.tiles_n + n_tile;
      const float4* part = reinterpret_cast<const float4*>(p.ws) + static_cast<int64_t>(tile) * splits * T;
      splitk::store_partial<R, kCT>(reinterpret_cast<float4*>(p.ws) + (static_cast<int64_t>(tile) * splits + rank) * T,
                                    acc_hi, threadIdx.x);
      volatile int* flag = reinterpret_cast<volatile int*>(empty + STAGES);
      int* ctr = p.counters + tile;
      if (p.ws_mode == 1) {
        const bool last = splitk::arrive<kCT>(ctr, 0, splits, flag) == splits - 1;
        if (!last) {  // not the last arrival
          return;
        }
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
    } else if (push) {
      // Push reduction (S = 2, two warpgroups): rank r owns rows [64 r, 64 r + 64), exactly the
      // rows warpgroup r holds. So warpgroup 1 - r stores its partial tile straight into the peer's
      // receive buffer (in this thread layout: the peer's thread of the same index reads its own
      // values back) with st.async, whose bytes complete the peer's recv_bar; warpgroup r waits
      // on its own recv_bar, adds the peer's partial to its registers and stores. Against
      // cluster_reduce_store (every thread writes its tile to its own shared memory, cluster
      // barrier, reads both halves back over DSMEM, second barrier before exit): remote stores
      // that do not wait instead of dependent remote loads, no shared-memory round trip of the
      // CTA's own rows, and the owner waits only for the bytes it needs, not for every thread of
      // both CTAs (the first version ended with a cluster barrier: ~0.3 us even without skew).
      // Per-CTA timestamps at K=4096 N=192 M=4096 (H200): the two-barrier
      // epilogue took ~2.9 us per CTA from the main loop's end to exit, the push with a cluster
      // barrier 2.0. Same sum: t_0 + t_1 of the two ranks' partials (IEEE addition is
      // commutative, so rank 1's acc + recv is bitwise rank 0's order). Exit safety: a CTA's
      // shared memory is written only by its peer's pushers, and its owner warpgroup waits for
      // all of those bytes before it exits.
      float4* recv = reinterpret_cast<float4*>(smem + C::kTileBytes);
      const int t = threadIdx.x % 128;
      if (wg != static_cast<int>(rank)) {
        sm90::cluster_wait_acquire();  // the peer's recv_bar is initialised and armed (prologue)
        const uint32_t peer = sm90::map_to_rank(sm90::smem_u32(recv), rank ^ 1u);
        const uint32_t peer_bar = sm90::map_to_rank(sm90::smem_u32(recv_bar), rank ^ 1u);
#pragma unroll
        for (int i = 0; i < R / 4; ++i) {
          sm90::st_async_f4(peer + static_cast<uint32_t>(i * 128 + t) * 16u,
                            make_float4(acc_hi[4 * i], acc_hi[4 * i + 1], acc_hi[4 * i + 2], acc_hi[4 * i + 3]),
                            peer_bar);
        }
      } else {
        sm90::mbar_wait<false, true>(recv_bar, 0);  // the peer's whole partial has landed (cluster acquire)
        if (active) {
#pragma unroll
          for (int c = 0; c < BN / 8; ++c) {
            const float4 v = recv[c * 128 + t];
            const float2 lo = make_float2(acc_hi[4 * c] + v.x, acc_hi[4 * c + 1] + v.y);
            const float2 hi = make_float2(acc_hi[4 * c + 2] + v.z, acc_hi[4 * c + 3] + v.w);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = m0 + r_loc + 8 * h, col = n0 + 8 * c + c_loc;
              if (row < p.M && col < p.N) {
                *reinterpret_cast<float2*>(p.out + static_cast<int64_t>(row) * p.out_stride + col) = h ? hi : lo;
              }
            }
          }
        }
      }
      return;
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
  return router_gemm_bf16x2_wgmma_kernel<C::BN, C::WGS, C::STAGES, C::RS, C::FUSED>;
}

// Raw-pointer launcher. Requirements (checked in Python, re-checked here): K % 64 == 0,
// N % 8 == 0, x row stride % 8 == 0, out row stride % 4 == 0, 16-byte aligned pointers,
// cluster splits of 1 to 8 CTAs dividing BM.
template <class C>
inline cudaError_t launch_router_gemm_bf16x2(const Bf16x2Params& p, cudaStream_t stream, bool pdl) {
  const bool ws = p.ws_mode != 0 && p.splits > 1;
  const bool mc = p.multicast != 0;
  if (p.M < 1 || p.N < 8 || p.N % 8 || p.K < C::BK || p.K % C::BK || p.x_stride % 8 || p.out_stride % 4 ||
      p.ws_mode < 0 || p.ws_mode > 2) {
    return cudaErrorInvalidValue;
  }
  // Cluster split: 1 to 8 CTAs that divide BM. Workspace split: 2..16, each CTA at least one
  // K block, a workspace and counters.
  if (ws ? (p.splits > 16 || p.splits > p.K / C::BK || p.ws == nullptr || p.counters == nullptr)
         : (p.splits < 1 || p.splits > 8 || C::BM % p.splits)) {
    return cudaErrorInvalidValue;
  }
  // Multicast: the weight box is half a tile (whole 8-row swizzle atoms); a K split must go
  // through the workspace (the cluster is the M pair).
  if (mc && (C::BN % 16 || (p.splits > 1 && !ws))) return cudaErrorInvalidValue;
  CUtensorMap tm_x, tm_whi, tm_wlo;
  cudaError_t e = encode_bf16_2d_sw128(&tm_x, p.x, p.K, p.M, static_cast<uint64_t>(p.x_stride) * 2, C::BK, C::BM);
  const uint32_t wbox = mc ? C::BN / 2 : C::BN;
  if (e == cudaSuccess) e = encode_bf16_2d_sw128(&tm_whi, p.w_hi, p.K, p.N, static_cast<uint64_t>(p.K) * 2, C::BK, wbox);
  if (e == cudaSuccess) e = encode_bf16_2d_sw128(&tm_wlo, p.w_lo, p.K, p.N, static_cast<uint64_t>(p.K) * 2, C::BK, wbox);
  if (e != cudaSuccess) return e;
  const int tiles_n = (p.N + C::BN - 1) / C::BN, tiles_m = (p.M + C::BM - 1) / C::BM;
  const Bf16x2DevParams dp{p.out, p.out_stride, p.M, p.N, p.K, p.ws, p.counters, ws ? p.ws_mode : 0,
                           mc ? 1 : 0, p.splits, tiles_n, p.prefetch > 0 ? p.prefetch : 0,
                           p.w_evict_first ? 1 : 0};
  // With multicast an odd tile count gets a phantom M tile (rows past M: zeros, no stores;
  // the workspace and counters are sized for the even count, see split_workspace.py).
  const dim3 grid = mc ? dim3(2, p.splits * tiles_n, (tiles_m + 1) / 2) : dim3(p.splits, tiles_n, tiles_m);
  return hpc::launch_kernel_cluster(bf16x2_kernel<C>(), grid, dim3(C::kThreads), C::kSmemBytes,
                                    mc ? 2 : ws ? 1 : p.splits,
                                    stream, pdl,
                             tm_x, tm_whi, tm_wlo, dp);
}

template <class C>
inline int bf16x2_max_active_clusters(int splits) {
  return hpc::max_active_clusters(bf16x2_kernel<C>(), C::kThreads, C::kSmemBytes, splits);
}

}  // namespace hpc::router_gemm
