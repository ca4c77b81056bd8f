// Tensor-core rate of the router's wgmma main-loop shapes without global memory in the way
// (DESIGN.md "What is left": is a K block of wide96f bound by shared-memory bandwidth, by the
// tensor pipe, or by the loop's synchronisation?). Standalone program, one CTA per SM:
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
//        -I packages/hpc-common/src/hpc_common/include -I packages/hpc-router-gemm/src/hpc_router_gemm/include \
//        -o /tmp/wgmma_rate tools/probes/router_gemm/wgmma_rate.cu && /tmp/wgmma_rate
//
// Every consumer warpgroup runs kBlocks K blocks (64 of K: 4 k16 steps) of the shape's wgmma, as the
// router kernel's SS / RS loops do (commit per block, wait_group 1, stage i % kStages). Feeds:
//   kFeedNone  the stages are filled once; consumers loop without barriers (the tensor pipe and the
//              shared-memory operand reads alone)
//   kFeedBulk  a producer warp refills each stage per block with 1-D bulk copies from an L2-resident
//              buffer behind full / empty mbarriers (the router kernel's ring, minus DRAM and TMA's
//              2-D boxes): adds the shared-memory writes and the handshake
//   kFeedStreamX         as kFeedBulk, but the A tile (x) streams from DRAM, each region read by a
//              pair of CTAs as the two N tiles of an M tile read x (the weight stays L2-resident):
//              the router kernel's memory pattern at M = 4096
//   kFeedStreamXPrefetch the same with an L2 prefetch of x kPrefetchAhead blocks ahead of the ring
//   kFeedTmaHot          the router's loads: 2-D TMA boxes (64 of K x rows, 128-byte swizzle, L2 256-byte
//              promotion) of x [rows, 4096] and of W_hi / W_lo (96-row boxes of a [384, 4096] weight), every
//              CTA reading the same x rows (L2-resident, shared)
//   kFeedTmaRows         the same, each CTA pair its own x rows and K half, wrapping after 32 K blocks:
//              the first pass from DRAM, the rest from the L2 (33 MB of x in all, as at M = 4096)
//   kFeedTmaRowsWidePf   the same, and N tile 0's CTA asks L2 for its x rows 512 bytes at a time
//              (cp.async.bulk.prefetch.tensor of a [rows, 256] box, no swizzle) every 4 K blocks,
//              8 blocks ahead: DRAM sees 512-byte runs per row instead of the loads' 256-byte ones
// run_split: kFeedTmaRows's loads into separate x and weight rings (split_ring_kernel), x deeper.
//   kFeedTmaRowsSkew     as kFeedTmaRows, but M tile m walks its K half from block 7 m (mod 32): the CTAs'
//              concurrent x requests no longer share their address bits below the 8 KB row pitch
// Prints one JSON line per (shape, feed, grid): median cycles per K block over the consumer
// warpgroups, the tensor-rate cycles for that block (2048 BF16 MACs per cycle per SM), the SM clock.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "hpc_common/check.h"
#include "hpc_common/tma_encode.h"
#include "hpc_router_gemm/router_gemm_bf16x2_wgmma.cuh"  // load_a_frags; sm90.cuh, wgmma_ops.cuh

namespace sm90 = hpc::router_gemm::sm90;
using hpc::router_gemm::Wgmma;

constexpr int kBlocks = 512;
constexpr int kStages = 4;
enum Shape { kSS192 = 0, kRS192 = 1, kSS256 = 2, kSS96 = 3 };
enum Feed {
  kFeedNone = 0,
  kFeedBulk = 1,
  kFeedStreamX = 2,
  kFeedStreamXPrefetch = 3,
  kFeedTmaHot = 4,
  kFeedTmaRows = 5,
  kFeedTmaRowsWidePf = 6,
  kFeedTmaRowsSkew = 7
};
constexpr int kSkewBlocks = 7;  // kFeedTmaRowsSkew: M tile m starts its K half at block 7 m (mod 32)
constexpr int kWidePfBlocks = 4;   // kFeedTmaRowsWidePf: one prefetch box covers 4 K blocks (512 bytes per row)
constexpr int kWidePfAhead = 8;    // ... issued this many K blocks ahead of the load
constexpr int kTmaK = 4096;         // x and W row length (elements): the router's K
constexpr int kTmaKBlocks = 32;     // K blocks per CTA before it wraps: the router's K half at S = 2
constexpr int kPrefetchAhead = 8;  // kFeedStreamXPrefetch: blocks ahead of the ring

template <int SHAPE>
struct ShapeOf {
  static constexpr int N = SHAPE == kSS256 ? 256 : SHAPE == kSS96 ? 96 : 192;  // B rows (both products)
  static constexpr int R = N / 4;                                              // accumulators per product
};

template <int SHAPE, int R>
__device__ __forceinline__ void block_mma(float (&d0)[R], float (&d1)[R], uint32_t a, uint32_t b, uint32_t (&af)[4][4],
                                          uint32_t row_addr, uint32_t sw, uint32_t hi) {
  constexpr int N = ShapeOf<SHAPE>::N;
  if constexpr (SHAPE == kRS192) hpc::router_gemm::load_a_frags(af, row_addr, sw, hi);  // as rs_block
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = sm90::desc_k_major_sw128(b + kk * 32);
    if constexpr (SHAPE == kRS192) {
      Wgmma<N>::mma_rs_pair(d0, d1, af[kk], db);
    } else {
      Wgmma<N>::mma_pair(d0, d1, sm90::desc_k_major_sw128(a + kk * 32), db);
    }
  }
  sm90::wgmma_commit();
}

// The end of every timed loop: drain the products, keep them alive, and let each warpgroup's first
// thread write its loop cycles and its first-pass cycles to slot[0] / slot[1].
template <int R>
__device__ __forceinline__ void finish_and_report(float (&d0)[R], float (&d1)[R], long long t0, long long t_first,
                                                  float* sink, long long* slot) {
  sm90::wgmma_wait<0>();
  sm90::fence_regs(d0);
  sm90::fence_regs(d1);
  const long long t1 = clock64();
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < R; ++i) acc += d0[i] + d1[i];
  if (acc == 12345.678f) sink[threadIdx.x] = acc;  // keep the products alive
  if (threadIdx.x % 128 == 0) {
    slot[0] = t1 - t0;
    slot[1] = t_first - t0;
  }
}

template <int SHAPE, int WGS, int FEED>
__global__ void __launch_bounds__(WGS * 128 + 128, 1)
    rate_kernel(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_w,
                const __grid_constant__ CUtensorMap tm_xpf,
                const uint8_t* __restrict__ src, const uint8_t* __restrict__ xs, long long* cycles, float* sink) {
  constexpr int N = ShapeOf<SHAPE>::N, R = ShapeOf<SHAPE>::R;
  constexpr uint32_t kA = WGS * 64 * 128, kB = N * 128, kStage = kA + kB;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  __shared__ uint64_t full[kStages], empty[kStages];
  const int wg = threadIdx.x / 128;  // WGS = producer warpgroup
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], WGS * 4);
    }
    sm90::mbar_init_fence();
  }
  // Random operands (the tensor pipe's power, hence the clock, depends on the data).
  for (uint32_t i = threadIdx.x * 16; i < kStages * kStage; i += blockDim.x * 16) {
    *reinterpret_cast<uint4*>(smem + i) = *reinterpret_cast<const uint4*>(src + (i % (1u << 20)));
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();

  if (wg == WGS) {  // producer warpgroup: one thread refills the stages (or nothing: kFeedNone)
    if (FEED >= kFeedTmaHot && threadIdx.x % 128 == 0) {
      // CTA c: M tile c / 4, K half (c / 2) % 2, N tile c % 2 (the two N tiles of an M tile and K half
      // are neighbours, as the router's grid orders them).
      const int c = blockIdx.x;
      const int row0 = FEED != kFeedTmaHot ? (c / 4) * WGS * 64 : 0;
      const int kb0 = FEED != kFeedTmaHot ? ((c / 2) % 2) * kTmaKBlocks : 0;
      const int n0 = (c % 2) * 96;
      const bool wide_pf = FEED == kFeedTmaRowsWidePf && c % 2 == 0;
      if (wide_pf) {
        for (int j = 0; j < kWidePfAhead + kWidePfBlocks; j += kWidePfBlocks) {
          sm90::tma_prefetch_l2_2d(&tm_xpf, (kb0 + j) * 64, row0);
        }
      }
      for (int i = 0; i < kBlocks; ++i) {
        const int s = i % kStages;
        if (wide_pf && i % kWidePfBlocks == 0 && i + kWidePfAhead + kWidePfBlocks <= kTmaKBlocks) {
          sm90::tma_prefetch_l2_2d(&tm_xpf, (kb0 + i + kWidePfAhead + kWidePfBlocks) * 64, row0);
        }
        if (i >= kStages) sm90::mbar_wait(&empty[s], ((i / kStages) - 1) & 1);
        sm90::mbar_arrive_expect_tx(&full[s], kStage);
        const int skew = FEED == kFeedTmaRowsSkew ? (c / 4) * kSkewBlocks : 0;
        const int kc = (kb0 + (i + skew) % kTmaKBlocks) * 64;
        sm90::tma_load_2d(smem + s * kStage, &tm_x, &full[s], kc, row0);
        sm90::tma_load_2d(smem + s * kStage + kA, &tm_w, &full[s], kc, n0);
        sm90::tma_load_2d(smem + s * kStage + kA + kB / 2, &tm_w, &full[s], kc, 192 + n0);
      }
    }
    if (FEED != kFeedNone && FEED < kFeedTmaHot && threadIdx.x % 128 == 0) {
      const uint8_t* xr = xs + size_t(blockIdx.x / 2) * kBlocks * kA;  // this pair's x region
      if (FEED == kFeedStreamXPrefetch) {
        for (int i = 0; i < kPrefetchAhead; ++i) sm90::bulk_prefetch_l2(xr + size_t(i) * kA, kA);
      }
      for (int i = 0; i < kBlocks; ++i) {
        const int s = i % kStages;
        if (i >= kStages) sm90::mbar_wait(&empty[s], ((i / kStages) - 1) & 1);
        if (FEED == kFeedStreamXPrefetch && i + kPrefetchAhead < kBlocks) {
          sm90::bulk_prefetch_l2(xr + size_t(i + kPrefetchAhead) * kA, kA);
        }
        sm90::mbar_arrive_expect_tx(&full[s], kStage);
        const uint8_t* g = src + (size_t(blockIdx.x % 4) * kStages + s) * kStage;
        sm90::bulk_load(smem + s * kStage, FEED == kFeedBulk ? g : xr + size_t(i) * kA, kA, &full[s]);
        sm90::bulk_load(smem + s * kStage + kA, g + kA, kB, &full[s]);
      }
    }
    return;
  }
  float d0[R], d1[R];
#pragma unroll
  for (int i = 0; i < R; ++i) d0[i] = d1[i] = 0.f;
  uint32_t af[4][4];
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const uint32_t row = static_cast<uint32_t>(warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1));
  const uint32_t sw = lane & 7, hi = lane >> 4;
  const uint32_t base = sm90::smem_u32(smem);
  __syncwarp();
  const long long t0 = clock64();
  long long t_first = t0;  // at block kTmaKBlocks: the first pass over the K half (cold for kFeedTmaRows)
  for (int i = 0; i < kBlocks; ++i) {
    const int s = i % kStages;
    if (i == kTmaKBlocks) t_first = clock64();
    if (FEED != kFeedNone) sm90::mbar_wait(&full[s], (i / kStages) & 1);
    const uint32_t st = base + s * kStage, a = st + wg * 64 * 128;
    block_mma<SHAPE, R>(d0, d1, a, st + kA, af, a + row * 128, sw, hi);
    sm90::wgmma_wait<1>();
    if (FEED != kFeedNone && i > 0 && lane == 0) sm90::mbar_arrive(&empty[(i - 1) % kStages]);
  }
  finish_and_report(d0, d1, t0, t_first, sink, cycles + 2 * (blockIdx.x * WGS + wg));
}

// The router's loads (kFeedTmaRows: x per CTA pair from DRAM, W from the L2) into two rings: XST
// stages of x (16 KB) and WST stages of the weight (24 KB), each with its own full / empty barriers
// and producer thread, so x (the DRAM stream) runs further ahead than the unified ring's depth allows
// (5 stages of 40 KB fill 200 KB; 9 x stages + 3 W stages fill 216 KB). wide96f's shape: 2 consumer
// warpgroups, m64n192k16 SS.
template <int XST, int WST>
__global__ void __launch_bounds__(3 * 128, 1)
    split_ring_kernel(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_w,
                      long long* cycles, float* sink) {
  constexpr int R = 48;
  constexpr uint32_t kA = 2 * 64 * 128, kB = 192 * 128;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* xs = smem;
  uint8_t* ws = smem + XST * kA;
  __shared__ uint64_t fx[XST], ex[XST], fw[WST], ew[WST];
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < XST; ++s) {
      sm90::mbar_init(&fx[s], 1);
      sm90::mbar_init(&ex[s], 8);
    }
    for (int s = 0; s < WST; ++s) {
      sm90::mbar_init(&fw[s], 1);
      sm90::mbar_init(&ew[s], 8);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();
  const int c = blockIdx.x;
  const int row0 = (c / 4) * 128, kb0 = ((c / 2) % 2) * kTmaKBlocks, n0 = (c % 2) * 96;
  if (wg == 2) {
    if (threadIdx.x == 256) {  // x ring
      for (int i = 0; i < kBlocks; ++i) {
        const int s = i % XST;
        if (i >= XST) sm90::mbar_wait(&ex[s], ((i / XST) - 1) & 1);
        sm90::mbar_arrive_expect_tx(&fx[s], kA);
        sm90::tma_load_2d(xs + s * kA, &tm_x, &fx[s], (kb0 + i % kTmaKBlocks) * 64, row0);
      }
    } else if (threadIdx.x == 288) {  // weight ring (another warp: the two rings do not wait on each other)
      for (int i = 0; i < kBlocks; ++i) {
        const int s = i % WST;
        if (i >= WST) sm90::mbar_wait(&ew[s], ((i / WST) - 1) & 1);
        sm90::mbar_arrive_expect_tx(&fw[s], kB);
        const int kc = (kb0 + i % kTmaKBlocks) * 64;
        sm90::tma_load_2d(ws + s * kB, &tm_w, &fw[s], kc, n0);
        sm90::tma_load_2d(ws + s * kB + kB / 2, &tm_w, &fw[s], kc, 192 + n0);
      }
    }
    return;
  }
  float d0[R], d1[R];
#pragma unroll
  for (int i = 0; i < R; ++i) d0[i] = d1[i] = 0.f;
  const int lane = threadIdx.x % 32;
  const uint32_t xb = sm90::smem_u32(xs), wb = sm90::smem_u32(ws);
  const long long t0 = clock64();
  long long t_first = t0;
  for (int i = 0; i < kBlocks; ++i) {
    if (i == kTmaKBlocks) t_first = clock64();
    sm90::mbar_wait(&fx[i % XST], (i / XST) & 1);
    sm90::mbar_wait(&fw[i % WST], (i / WST) & 1);
    const uint32_t a = xb + (i % XST) * kA + wg * 64 * 128, b = wb + (i % WST) * kB;
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      Wgmma<192>::mma_pair(d0, d1, sm90::desc_k_major_sw128(a + kk * 32), sm90::desc_k_major_sw128(b + kk * 32));
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();
    if (i > 0 && lane == 0) {
      sm90::mbar_arrive(&ex[(i - 1) % XST]);
      sm90::mbar_arrive(&ew[(i - 1) % WST]);
    }
  }
  finish_and_report(d0, d1, t0, t_first, sink, cycles + 2 * (blockIdx.x * 2 + wg));
}

__global__ void clock_probe(long long* out) {
  // SM clock: clock64 ticks over %globaltimer nanoseconds across a ~20 us spin.
  uint64_t g0, g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  } while (g1 - g0 < 20000);
  const long long c1 = clock64();
  out[0] = c1 - c0;
  out[1] = static_cast<long long>(g1 - g0);
}

#define CK(x) HPC_CUDA_CHECK((x), #x)  // a CUDA error ends the program with the failing call named

const char* const kFeedNames[] = {"none", "bulk", "stream_x", "stream_x_prefetch", "tma_hot", "tma_rows",
                                  "tma_rows_wide_pf", "tma_rows_skew"};
CUtensorMap g_tm_x2, g_tm_x3, g_tm_w;  // x boxes of 128 / 192 rows; W boxes of 96 rows
CUtensorMap g_tm_xpf2, g_tm_xpf3;     // x prefetch boxes: 256 elements (512 bytes) x 128 / 192 rows
uint8_t* g_flush = nullptr;            // 256 MB written before each run of a streaming feed: x leaves the L2

// Feeds that stream x from DRAM: the L2 is emptied (a 256 MB write) before each of their launches.
constexpr bool streams_x(int feed) { return feed == kFeedStreamX || feed == kFeedStreamXPrefetch || feed >= kFeedTmaRows; }

// Three launches of `launch` (the last one reported: clocks settled), each after the 256 MB write when
// `flush`; one JSON line from the per-warpgroup cycle counts (whole loop, first kTmaKBlocks blocks) the
// kernel left in `cyc`, against `tensor` cycles per block at the tensor rate.
template <typename Launch>
void measure(const char* name, int wgs, const std::string& feed, int grid, double tensor, bool flush, long long* cyc,
             Launch launch) {
  std::vector<long long> h(size_t(grid) * wgs * 2);
  std::vector<double> per_block, first;
  float ms = 0.f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int rep = 0; rep < 3; ++rep) {
    if (flush) CK(cudaMemset(g_flush, rep + 1, 256u << 20));
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaEventElapsedTime(&ms, e0, e1));
  }
  CK(cudaMemcpy(h.data(), cyc, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < h.size(); i += 2) {
    per_block.push_back(double(h[i]) / kBlocks);
    first.push_back(double(h[i + 1]) / kTmaKBlocks);
  }
  std::sort(per_block.begin(), per_block.end());
  std::sort(first.begin(), first.end());
  const double med = per_block[per_block.size() / 2];
  const double ghz = med * kBlocks / (ms * 1e6);  // SM clock during the loop (launch overhead included)
  long long probe[2];
  long long* dprobe;
  CK(cudaMalloc(&dprobe, sizeof(probe)));
  clock_probe<<<1, 1>>>(dprobe);
  CK(cudaMemcpy(probe, dprobe, sizeof(probe), cudaMemcpyDeviceToHost));
  CK(cudaFree(dprobe));
  std::printf(
      "{\"shape\": \"%s\", \"wgs\": %d, \"feed\": \"%s\", \"grid\": %d, \"cycles_per_block_p50\": %.1f, "
      "\"cycles_per_block_min\": %.1f, \"cycles_per_block_max\": %.1f, \"first_32_blocks_p50\": %.1f, "
      "\"tensor_cycles\": %.1f, "
      "\"pct_of_tensor_rate\": %.1f, \"kernel_ms\": %.4f, \"clock_ghz_in_loop\": %.3f, \"clock_ghz_idle\": %.3f}\n",
      name, wgs, feed.c_str(), grid, med, per_block.front(), per_block.back(), first[first.size() / 2], tensor,
      100.0 * tensor / med, ms, ghz, double(probe[0]) / double(probe[1]));
  std::fflush(stdout);
}

template <int SHAPE, int WGS, int FEED>
void run(const char* name, const uint8_t* src, const uint8_t* xs, long long* cyc, float* sink, int grid) {
  constexpr int N = ShapeOf<SHAPE>::N;
  constexpr int smem = kStages * (WGS * 64 * 128 + N * 128) + 1024;
  auto k = rate_kernel<SHAPE, WGS, FEED>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const double tensor = double(WGS) * 64 * N * 64 / 2048.0;  // cycles at 2048 MAC/clk/SM
  measure(name, WGS, kFeedNames[FEED], grid, tensor, streams_x(FEED), cyc, [&] {
    k<<<grid, WGS * 128 + 128, smem>>>(WGS == 3 ? g_tm_x3 : g_tm_x2, g_tm_w, WGS == 3 ? g_tm_xpf3 : g_tm_xpf2, src, xs,
                                       cyc, sink);
  });
}

template <int XST, int WST>
void run_split(const char* name, long long* cyc, float* sink, int grid) {
  constexpr int smem = XST * 2 * 64 * 128 + WST * 192 * 128 + 1024;
  auto k = split_ring_kernel<XST, WST>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const std::string feed = "tma_rows_split_x" + std::to_string(XST) + "_w" + std::to_string(WST);
  measure(name, 2, feed, grid, 768.0, true, cyc, [&] { k<<<grid, 384, smem>>>(g_tm_x2, g_tm_w, cyc, sink); });
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t src_bytes = 4u << 20;
  std::vector<uint16_t> host(src_bytes / 2);
  uint32_t r = 12345u;
  for (auto& v : host) {  // random BF16 in [-2, 2): sign, exponent 126-127, random mantissa
    r = r * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(((r >> 31) << 15) | ((126u + ((r >> 20) & 1u)) << 7) | ((r >> 8) & 0x7Fu));
  }
  uint8_t* src;
  long long* cyc;
  float* sink;
  CK(cudaMalloc(&src, src_bytes));
  CK(cudaMemcpy(src, host.data(), src_bytes, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&cyc, sizeof(long long) * 8 * sms));
  CK(cudaMalloc(&sink, sizeof(float) * 1024));
  // x regions for kFeedStream*: one per CTA pair, kBlocks A tiles of up to 3 warpgroups (24 KB).
  uint8_t* xs;
  const size_t xs_bytes = size_t((sms + 1) / 2) * kBlocks * 3 * 64 * 128;
  CK(cudaMalloc(&xs, xs_bytes));
  CK(cudaMemset(xs, 0x3c, xs_bytes));
  // x for the TMA feeds: [rows, 4096] BF16 over the same buffer (33 CTA groups of 4 x 192 rows fit).
  {
    const uint64_t xrows = uint64_t((sms + 3) / 4) * 192, dims_x[2] = {kTmaK, xrows}, dims_w[2] = {kTmaK, 384};
    const uint64_t pitch[1] = {kTmaK * 2};
    const uint32_t box2[2] = {64, 128}, box3[2] = {64, 192}, boxw[2] = {64, 96};
    if (xrows * kTmaK * 2 > xs_bytes) return 2;
    const auto sw = CU_TENSOR_MAP_SWIZZLE_128B;
    const auto promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    CK(hpc::tma::encode_tiled(&g_tm_x2, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xs, dims_x, pitch, box2, sw, promo));
    CK(hpc::tma::encode_tiled(&g_tm_x3, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xs, dims_x, pitch, box3, sw, promo));
    CK(hpc::tma::encode_tiled(&g_tm_w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, src, dims_w, pitch, boxw, sw, promo));
    const uint32_t boxpf2[2] = {256, 128}, boxpf3[2] = {256, 192};
    const auto none = CU_TENSOR_MAP_SWIZZLE_NONE;
    CK(hpc::tma::encode_tiled(&g_tm_xpf2, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xs, dims_x, pitch, boxpf2, none, promo));
    CK(hpc::tma::encode_tiled(&g_tm_xpf3, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xs, dims_x, pitch, boxpf3, none, promo));
  }
  // Evict xs from the L2 before each streamed run: a 256 MB write between runs.
  CK(cudaMalloc(&g_flush, 256u << 20));
  for (int grid : {16, sms}) {
    run<kSS192, 2, kFeedNone>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedBulk>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedStreamX>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedStreamXPrefetch>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedTmaHot>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedTmaRows>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedTmaRowsWidePf>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedTmaRowsSkew>("ss192_wide96f", src, xs, cyc, sink, grid);
    run<kSS192, 2, kFeedTmaRows>("ss192_wide96f", src, xs, cyc, sink, grid);
    run_split<4, 4>("ss192_wide96f", cyc, sink, grid);
    run_split<5, 5>("ss192_wide96f", cyc, sink, grid);
    run_split<8, 3>("ss192_wide96f", cyc, sink, grid);
    run_split<9, 3>("ss192_wide96f", cyc, sink, grid);
    run_split<10, 2>("ss192_wide96f", cyc, sink, grid);
    run<kRS192, 2, kFeedNone>("rs192_wide96rsf", src, xs, cyc, sink, grid);
    run<kRS192, 2, kFeedBulk>("rs192_wide96rsf", src, xs, cyc, sink, grid);
    run<kSS256, 2, kFeedNone>("ss256_wide128f", src, xs, cyc, sink, grid);
    run<kSS256, 2, kFeedBulk>("ss256_wide128f", src, xs, cyc, sink, grid);
    run<kSS192, 1, kFeedNone>("ss192_one_wg", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedNone>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedBulk>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedStreamX>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedTmaHot>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedTmaRows>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedTmaRowsWidePf>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS192, 3, kFeedTmaRowsSkew>("ss192_tall96f", src, xs, cyc, sink, grid);
    run<kSS96, 2, kFeedNone>("ss96_narrow48f", src, xs, cyc, sink, grid);
  }
  return 0;
}
