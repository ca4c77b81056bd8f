// How fast can 132 persistent CTAs stream paged KV at 8/1 (one KV head: a tile is one whole page of
// K and one of V, each contiguous), with nothing but the ring? NOTES.md: the decode kernel's stream-only
// mode (consumers skip the math) reads ~26-27 GB/s per CTA at 8/1 against ~30-31 at 64/8, and the
// memory-side hypotheses tried (page order, task-switch bubbles) were null. This standalone program
// times the bare pattern: one producer thread per CTA issues 1-D bulk copies of the K and V pages of
// each tile into a ring of `stages` (full / empty mbarriers); four consumer warps wait for each stage
// and release it. CTA c owns tiles [c T / grid, (c + 1) T / grid) of the line, tile t reads page
// page_table[t] (a random permutation, or the identity: contiguous K and V streams).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -o /tmp/psr packages/hpc-attention/scripts/page_stream_rate.cu && /tmp/psr
//
// One JSON line per case: kernel time between events (a 256 MB write before each launch: cold L2),
// the aggregate rate over the KV bytes, and per CTA p10 / p50 / p90 stream rates (first copy issued ->
// last stage released, %globaltimer).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "hpc_common/check.h"
#include "hpc_common/sm90.cuh"

namespace sm90 = hpc::sm90;

constexpr int kMaxStages = 16;

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// 160 threads: warps 0-3 consume, warp 4's lane 0 produces.
__global__ void __launch_bounds__(160, 1)
    page_stream(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v, const int* __restrict__ page_table,
                int total_tiles, int page_bytes, int stages, bool evict_first, unsigned long long* spans, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const int t0 = int(int64_t(blockIdx.x) * total_tiles / gridDim.x);
  const int t1 = int(int64_t(blockIdx.x + 1) * total_tiles / gridDim.x);
  const int n = t1 - t0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], 4);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();
  const uint32_t stage_bytes = 2u * page_bytes;
  if (threadIdx.x == 128) {
    const uint64_t start = now_ns();
    for (int i = 0; i < n; ++i) {
      const int s = i % stages;
      if (i >= stages) sm90::mbar_wait(&empty[s], ((i / stages) - 1) & 1);
      const int64_t page = page_table[t0 + i];
      sm90::mbar_arrive_expect_tx(&full[s], stage_bytes);
      if (evict_first) {  // as the decode kernel's KV loads: KV lines replace each other, not dirty lines
        const uint64_t pol = sm90::l2_evict_first_policy();
        sm90::bulk_load(smem + s * stage_bytes, k + page * page_bytes, page_bytes, &full[s], pol);
        sm90::bulk_load(smem + s * stage_bytes + page_bytes, v + page * page_bytes, page_bytes, &full[s], pol);
      } else {
        sm90::bulk_load(smem + s * stage_bytes, k + page * page_bytes, page_bytes, &full[s]);
        sm90::bulk_load(smem + s * stage_bytes + page_bytes, v + page * page_bytes, page_bytes, &full[s]);
      }
    }
    spans[2 * blockIdx.x] = start;
  } else if (threadIdx.x < 128) {
    float acc = 0.f;
    const int lane = threadIdx.x & 31;
    for (int i = 0; i < n; ++i) {
      const int s = i % stages;
      sm90::mbar_wait(&full[s], (i / stages) & 1);
      acc += reinterpret_cast<const float*>(smem + s * stage_bytes)[threadIdx.x];  // touch the stage
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&empty[s]);
    }
    if (acc == 1234.5f) sink[threadIdx.x] = acc;
    __syncwarp();
    if (threadIdx.x == 0) spans[2 * blockIdx.x + 1] = now_ns();
  }
}

// The same line read by every thread straight into registers (ld.global.nc.v4), no shared memory:
// 512 threads; a tile is 2 x page_bytes / 16 vectors (K page then V page), at most 4 per thread;
// kAhead tiles of loads in flight per thread. The LSU path, for comparison with the copy engine's.
template <int kAhead>
__global__ void __launch_bounds__(512, 1)
    page_stream_lsu(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v, const int* __restrict__ page_table,
                    int total_tiles, int page_bytes, unsigned long long* spans, float* sink) {
  const int t0 = int(int64_t(blockIdx.x) * total_tiles / gridDim.x);
  const int t1 = int(int64_t(blockIdx.x + 1) * total_tiles / gridDim.x);
  const int vecs = page_bytes / 16;  // per page
  const uint64_t start = now_ns();
  uint32_t acc = 0;
  for (int t = t0; t < t1; t += kAhead) {
    uint4 r[kAhead][4];
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int64_t page = page_table[t + a < t1 ? t + a : t1 - 1];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = threadIdx.x + 512 * j;
        r[a][j] = make_uint4(0, 0, 0, 0);
        if (e < 2 * vecs && t + a < t1) {
          const uint8_t* base = e < vecs ? k : v;
          r[a][j] = __ldg(reinterpret_cast<const uint4*>(base + page * page_bytes) + (e < vecs ? e : e - vecs));
        }
      }
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc ^= r[a][j].x ^ r[a][j].w;
  }
  if (acc == 0x12345u) sink[threadIdx.x] = float(acc);
  __syncthreads();
  if (threadIdx.x == 0) {
    spans[2 * blockIdx.x] = start;
    spans[2 * blockIdx.x + 1] = now_ns();
  }
}

// One CTA per tile (the FP8 quantiser's short-lived CTAs): 256 threads load the tile's K and V pages
// (page_bytes / 16 vectors each, at most 8 per thread) into registers and exit; the hardware's CTA
// scheduler balances, several CTAs per SM.
__global__ void __launch_bounds__(256) page_stream_short(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v,
                                                         const int* __restrict__ page_table, int page_bytes,
                                                         float* sink) {
  const int vecs = page_bytes / 16;
  const int64_t page = page_table[blockIdx.x];
  uint4 r[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = threadIdx.x + 256 * j;
    r[j] = make_uint4(0, 0, 0, 0);
    if (e < 2 * vecs) r[j] = __ldg(reinterpret_cast<const uint4*>((e < vecs ? k : v) + page * page_bytes) + (e < vecs ? e : e - vecs));
  }
  uint32_t acc = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc ^= r[j].x ^ r[j].w;
  if (acc == 0x12345u) sink[threadIdx.x] = float(acc);
}

// A read flush: every thread reads 16-byte vectors of `n` bytes (no dirty lines left in the L2).
__global__ void read_flush(const uint4* __restrict__ buf, size_t n, float* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n / 16; i += size_t(gridDim.x) * blockDim.x) {
    acc ^= __ldg(buf + i).x;
  }
  if (acc == 0x12345u) sink[threadIdx.x] = float(acc);
}

#define CK(x) HPC_CUDA_CHECK((x), #x)  // a CUDA error ends the program with the failing call named

struct Bufs {
  uint8_t *k, *v, *flush;
  int *perm, *ident, *inter;  // inter: CTA c's i-th tile reads page i * grid + c (neighbouring CTAs, neighbouring pages)
  unsigned long long* spans;
  float* sink;
};

// kind 0: the bulk-copy ring of `stages`; kind 2 / 4: page_stream_lsu with that many tiles ahead.
// order 0: random, 1: identity, 2: interleaved (b.inter, built for grid = the SM count).
// flush: 0 = 256 MB written before each launch (the benchmark's kind: dirty lines left in the L2),
// 1 = 256 MB read. ef: the bulk ring's loads with an L2 evict_first policy.
void run(const char* name, const Bufs& b, int pages, int page_bytes, int stages, int order, int grid, int kind = 0,
         int flush = 0, bool ef = false) {
  const int smem = stages * 2 * page_bytes;
  if (kind == 0) CK(cudaFuncSetAttribute(page_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> times;
  std::vector<double> rates;
  std::vector<unsigned long long> h(2 * size_t(grid));
  for (int rep = 0; rep < 5; ++rep) {
    if (flush == 0) {
      CK(cudaMemset(b.flush, rep, 256u << 20));
    } else {
      read_flush<<<4 * grid, 512>>>(reinterpret_cast<const uint4*>(b.flush), 256u << 20, b.sink);
    }
    CK(cudaEventRecord(e0));
    const int* pt = order == 0 ? b.perm : order == 1 ? b.ident : b.inter;
    if (kind == 0) page_stream<<<grid, 160, smem>>>(b.k, b.v, pt, pages, page_bytes, stages, ef, b.spans, b.sink);
    if (kind == 2) page_stream_lsu<2><<<grid, 512>>>(b.k, b.v, pt, pages, page_bytes, b.spans, b.sink);
    if (kind == 4) page_stream_lsu<4><<<grid, 512>>>(b.k, b.v, pt, pages, page_bytes, b.spans, b.sink);
    if (kind == 1) page_stream_short<<<pages, 256>>>(b.k, b.v, pt, page_bytes, b.sink);
    CK(cudaEventRecord(e1));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    times.push_back(ms * 1000.f);
    if (rep == 4 && kind != 1) {
      CK(cudaMemcpy(h.data(), b.spans, h.size() * 8, cudaMemcpyDeviceToHost));
      for (int c = 0; c < grid; ++c) {
        const int n = int(int64_t(c + 1) * pages / grid) - int(int64_t(c) * pages / grid);
        rates.push_back(double(n) * 2 * page_bytes / double(h[2 * c + 1] - h[2 * c]));  // GB/s
      }
    }
  }
  std::sort(times.begin(), times.end());
  std::sort(rates.begin(), rates.end());
  if (rates.empty()) rates.push_back(0.0);
  const double us = times[times.size() / 2];
  const double bytes = double(pages) * 2 * page_bytes;
  std::printf(
      "{\"case\": \"%s\", \"kind\": \"%s\", \"pages\": %d, \"page_bytes\": %d, \"stages\": %d, \"order\": \"%s\", \"grid\": %d, "
      "\"median_us\": %.2f, \"tbps\": %.3f, \"pct_of_copy\": %.1f, \"cta_gbps_p10\": %.1f, \"cta_gbps_p50\": %.1f, "
      "\"cta_gbps_p90\": %.1f, \"flush\": \"%s\", \"evict_first\": %s}\n",
      name, kind == 0 ? "bulk_ring" : kind == 1 ? "short_lived" : kind == 2 ? "lsu_ahead2" : "lsu_ahead4", pages,
      page_bytes, stages, order == 0 ? "random" : order == 1 ? "identity" : "interleaved", grid, us, bytes / us / 1e6,
      100.0 * bytes / us / 1e6 / 4.27, rates[rates.size() / 10], rates[rates.size() / 2], rates[rates.size() * 9 / 10],
      flush == 0 ? "written" : "read", ef ? "true" : "false");
  std::fflush(stdout);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int pages = 4096;  // 64 requests x 4K tokens, 64-token pages, one KV head (the 64x4K case)
  Bufs b;
  const size_t cache = size_t(pages) * 16384;
  CK(cudaMalloc(&b.k, cache));
  CK(cudaMalloc(&b.v, cache));
  CK(cudaMemset(b.k, 1, cache));
  CK(cudaMemset(b.v, 2, cache));
  CK(cudaMalloc(&b.flush, 256u << 20));
  std::vector<int> ident(pages), perm(pages);
  std::iota(ident.begin(), ident.end(), 0);
  perm = ident;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int> inter(pages);
  {
    std::vector<std::pair<int, int>> at;  // (i, c) of line position t0(c) + i, in line order
    for (int c = 0; c < sms; ++c) {
      const int t0 = int(int64_t(c) * pages / sms), t1 = int(int64_t(c + 1) * pages / sms);
      for (int i = 0; i < t1 - t0; ++i) at.push_back({i, c});
    }
    std::vector<int> order(pages);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int c) { return at[a] < at[c]; });
    for (int r = 0; r < pages; ++r) inter[order[r]] = r;  // rank in (i, c) order = the page
  }
  CK(cudaMalloc(&b.inter, pages * 4));
  CK(cudaMemcpy(b.inter, inter.data(), pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.perm, pages * 4));
  CK(cudaMalloc(&b.ident, pages * 4));
  CK(cudaMemcpy(b.perm, perm.data(), pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.ident, ident.data(), pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.spans, 2 * 8 * 4 * size_t(sms)));
  CK(cudaMalloc(&b.sink, 4096));
  for (int flush : {0, 1}) {
    for (int order : {0, 1, 2}) {
      for (int st : {4, 5, 6}) run("bf16_8_1", b, pages, 16384, st, order, sms, 0, flush, false);
      for (int st : {7, 9, 12}) run("fp8_8_1", b, pages, 8192, st, order, sms, 0, flush, false);
      run("bf16_8_1", b, pages, 16384, 5, order, sms, 0, flush, true);
      run("fp8_8_1", b, pages, 8192, 9, order, sms, 0, flush, true);
      run("bf16_8_1_two_ctas_per_sm", b, pages, 16384, 3, order, 2 * sms, 0, flush);
      run("fp8_8_1_two_ctas_per_sm", b, pages, 8192, 6, order, 2 * sms, 0, flush);
      for (int kind : {1, 2, 4}) {  // short-lived CTAs, LSU with 2 / 4 tiles ahead
        run("bf16_8_1", b, pages, 16384, 0, order, sms, kind, flush);
        run("fp8_8_1", b, pages, 8192, 0, order, sms, kind, flush);
      }
    }
  }
  return 0;
}
