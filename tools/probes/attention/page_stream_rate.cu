// How fast can 132 persistent CTAs stream paged KV at 8/1 (one KV head: a tile is one whole page of
// K and one of V, each contiguous), with nothing but the ring? The decode kernel with its consumers skipping
// the math read ~26-27 GB/s per CTA at 8/1 against ~30-31 at 64/8, and the
// memory-side hypotheses tried (page order, task-switch bubbles) were null. This standalone program
// times the bare pattern: one producer thread per CTA issues 1-D bulk copies of the K and V pages of
// each tile into a ring of `stages` (full / empty mbarriers); four consumer warps wait for each stage
// and release it. CTA c owns tiles [c T / grid, (c + 1) T / grid) of the line, tile t reads page
// page_table[t] (a random permutation, or the identity: contiguous K and V streams).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -I packages/hpc-attention/src/hpc_attention/include \
//        -o /tmp/psr tools/probes/attention/page_stream_rate.cu && /tmp/psr
//
// `psr tmap` runs only the copy-form comparison: 1-D bulk copies against the decode
// kernel's tensor-map copies (page_stream_tmap: 4-D map, 128-byte swizzled boxes, two per BF16 page) with
// 256-byte, 128-byte (the decode's) or no L2 promotion, and two one-box-per-page forms; H200, read
// flush: 256-byte promotion streamed ~1.5-2.5 us slower (benchmarks/results/h200/attention_page_stream_tmap.*).
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
#include <cstring>
#include <vector>

#include "hpc_common/check.h"
#include "hpc_common/sm90.cuh"
#include "hpc_common/tma_encode.h"
#include "hpc_attention/sm90_primitives.cuh"  // tma_load_4d: the decode producer's copy

namespace sm90 = hpc::sm90;

constexpr int kMaxStages = 16;

using sm90::global_timer_ns;

// CTA blockIdx.x's share of a line of `total` tiles: [t0, t0 + n).
struct LineShare {
  int t0, n;
};
__device__ __forceinline__ LineShare line_share(int total) {
  const int t0 = int(int64_t(blockIdx.x) * total / gridDim.x);
  return {t0, int(int64_t(blockIdx.x + 1) * total / gridDim.x) - t0};
}

// The ring's barriers (thread 0; the caller synchronises): one producer arrival per full phase, one
// arrival per consumer warp per empty phase.
__device__ __forceinline__ void init_ring(uint64_t* full, uint64_t* empty, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], 4);
    }
    sm90::mbar_init_fence();
  }
}

// Consumer warps 0-3: wait for each of the CTA's n stages, touch it, release it; thread 0 stamps the
// CTA's end into spans[2 blockIdx.x + 1].
__device__ __forceinline__ void consume_ring(const uint8_t* smem, uint32_t stage_bytes, int stages, int n,
                                             uint64_t* full, uint64_t* empty, unsigned long long* spans,
                                             float* sink) {
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
  if (threadIdx.x == 0) spans[2 * blockIdx.x + 1] = global_timer_ns();
}

// 160 threads: warps 0-3 consume, warp 4's lane 0 produces.
__global__ void __launch_bounds__(160, 1)
    page_stream(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v, const int* __restrict__ page_table,
                int total_tiles, int page_bytes, int stages, bool evict_first, unsigned long long* spans, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const auto [t0, n] = line_share(total_tiles);
  init_ring(full, empty, stages);
  __syncthreads();
  const uint32_t stage_bytes = 2u * page_bytes;
  if (threadIdx.x == 128) {
    const uint64_t start = global_timer_ns();
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
    consume_ring(smem, stage_bytes, stages, n, full, empty, spans, sink);
  }
}

// The decode kernel's copy form (decode_tma_producer.cuh) on the same ring: each page through a
// 4-D tensor map (dim, head, token, page) in boxes of 128 bytes of a row x 64 tokens with the 128-byte
// swizzle, so a BF16 page is 2 boxes (256-byte rows) and an FP8 page 1, one TMA instruction per box
// from lanes of the producer warp, L2 evict_first. The question: does this form stream slower than 1-D bulk
// copies of the same pages? (The decode kernel without its math read ~26-27 GB/s per CTA at 8/1, this
// program's bulk ring ~30.)
__global__ void __launch_bounds__(160, 1)
    page_stream_tmap(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                     const int* __restrict__ page_table, int total_tiles, int page_bytes, int stages, int rows2d,
                     unsigned long long* spans, float* sink) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (sm90::smem_u32(smem_raw) & 1023u)) & 1023u);  // swizzle atoms
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const auto [t0, n] = line_share(total_tiles);
  init_ring(full, empty, stages);
  __syncthreads();
  const uint32_t stage_bytes = 2u * page_bytes;
  const int halves = page_bytes / 8192;  // 128-byte boxes per 64-token row: 2 (BF16), 1 (FP8)
  if (threadIdx.x >= 128) {
    const int lane = threadIdx.x - 128;
    const int my_kv = lane & 1, my_half = (lane >> 1) & (halves - 1);
    const CUtensorMap* my_map = my_kv ? &v_map : &k_map;
    const uint32_t my_dst = my_kv * page_bytes + my_half * 8192;
    const uint64_t pol = sm90::l2_evict_first_policy();
    const uint64_t start = global_timer_ns();
    for (int i = 0; i < n; ++i) {
      const int s = i % stages;
      if (i >= stages) sm90::mbar_wait(&empty[s], ((i / stages) - 1) & 1);
      const int page = page_table[t0 + i];
      if (lane == 0) sm90::mbar_arrive_expect_tx(&full[s], stage_bytes);
      __syncwarp();
      if (rows2d > 0) {  // forms 1 / 2: one 2-D box per page (K from lane 0, V from lane 1); the same
        // instruction as hpc-router-gemm's tma_load_2d_hint, spelled out to keep this package's scripts
        // off another operator's headers
        if (lane < 2) {
          asm volatile(
              "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
              " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(sm90::smem_u32(smem + s * stage_bytes + lane * page_bytes)),
              "l"(reinterpret_cast<uint64_t>(my_map)), "r"(sm90::smem_u32(&full[s])), "r"(0), "r"(page * rows2d),
              "l"(pol)
              : "memory");
        }
      } else if (lane < 2 * halves) {
        hpc::attn::tma_load_4d(smem + s * stage_bytes + my_dst, my_map, &full[s], my_half * 64, 0, 0, page, pol);
      }
    }
    if (lane == 0) spans[2 * blockIdx.x] = start;
  } else {
    consume_ring(smem, stage_bytes, stages, n, full, empty, spans, sink);
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
  const uint64_t start = global_timer_ns();
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
    spans[2 * blockIdx.x + 1] = global_timer_ns();
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
  CUtensorMap k_bf16, v_bf16, k_fp8, v_fp8;  // kind 3: page_stream_tmap
  CUtensorMap k_p128, v_p128, k_pnone, v_pnone;  // kinds 7 / 8: the decode's BF16 form with 128-byte / no L2 promotion
  CUtensorMap k_rows, v_rows, k_flat, v_flat;  // kinds 5 / 6: one box per BF16 page (128-byte rows swizzled / 256-byte rows, no swizzle)
};

// kind 0: the bulk-copy ring of `stages`; kind 2 / 4: page_stream_lsu with that many tiles ahead.
// order 0: random, 1: identity, 2: interleaved (b.inter, built for grid = the SM count).
// flush: 0 = 256 MB written before each launch (the benchmark's kind: dirty lines left in the L2),
// 1 = 256 MB read. ef: the bulk ring's loads with an L2 evict_first policy.
void run(const char* name, const Bufs& b, int pages, int page_bytes, int stages, int order, int grid, int kind = 0,
         int flush = 0, bool ef = false) {
  const int smem = stages * 2 * page_bytes;
  if (kind == 0) CK(cudaFuncSetAttribute(page_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (kind == 3 || kind >= 5) CK(cudaFuncSetAttribute(page_stream_tmap, cudaFuncAttributeMaxDynamicSharedMemorySize, smem + 1024));
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
    if (kind == 3) {
      const bool bf16 = page_bytes == 16384;
      page_stream_tmap<<<grid, 160, smem + 1024>>>(bf16 ? b.k_bf16 : b.k_fp8, bf16 ? b.v_bf16 : b.v_fp8, pt, pages,
                                                  page_bytes, stages, 0, b.spans, b.sink);
    }
    if (kind == 7) page_stream_tmap<<<grid, 160, smem + 1024>>>(b.k_p128, b.v_p128, pt, pages, page_bytes, stages, 0, b.spans, b.sink);
    if (kind == 8) page_stream_tmap<<<grid, 160, smem + 1024>>>(b.k_pnone, b.v_pnone, pt, pages, page_bytes, stages, 0, b.spans, b.sink);
    if (kind == 5) page_stream_tmap<<<grid, 160, smem + 1024>>>(b.k_rows, b.v_rows, pt, pages, page_bytes, stages, 128, b.spans, b.sink);
    if (kind == 6) page_stream_tmap<<<grid, 160, smem + 1024>>>(b.k_flat, b.v_flat, pt, pages, page_bytes, stages, 64, b.spans, b.sink);
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
      name, kind == 0 ? "bulk_ring" : kind == 1 ? "short_lived" : kind == 2 ? "lsu_ahead2" : kind == 3 ? "tmap_ring" : kind == 5 ? "tmap_one_box_rows128_swizzled" : kind == 6 ? "tmap_one_box_rows256_unswizzled" : kind == 7 ? "tmap_ring_promo128" : kind == 8 ? "tmap_ring_promo_none" : "lsu_ahead4", pages,
      page_bytes, stages, order == 0 ? "random" : order == 1 ? "identity" : "interleaved", grid, us, bytes / us / 1e6,
      100.0 * bytes / us / 1e6 / 4.27, rates[rates.size() / 10], rates[rates.size() / 2], rates[rates.size() * 9 / 10],
      flush == 0 ? "written" : "read", ef || kind >= 3 && kind != 4 ? "true" : "false");
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const bool tmap_only = argc > 1 && std::strcmp(argv[1], "tmap") == 0;
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
  // One geometry for both caches: K's map over b.k, V's over b.v.
  auto encode_kv = [&](CUtensorMap* km, CUtensorMap* vm, CUtensorMapDataType dt, uint32_t rank, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle sw, CUtensorMapL2promotion pr) {
    CK(hpc::tma::encode_tiled(km, dt, rank, b.k, dims, strides, box, sw, pr));
    CK(hpc::tma::encode_tiled(vm, dt, rank, b.v, dims, strides, box, sw, pr));
  };
  {  // the decode kernel's tensor maps (paged_kv_tensor_maps.cu) over [pages, 64, 1, 128]
    for (int fp8 = 0; fp8 < 2; ++fp8) {
      const uint64_t e = fp8 ? 1 : 2;
      const uint64_t dims[4] = {128, 1, 64, uint64_t(pages)};
      const uint64_t strides[3] = {128 * e, 128 * e, 64 * 128 * e};
      const uint32_t box[4] = {uint32_t(128 / e), 1, 64, 1};
      const auto promo = fp8 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
      const auto dt = fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
      encode_kv(fp8 ? &b.k_fp8 : &b.k_bf16, fp8 ? &b.v_fp8 : &b.v_bf16, dt, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                promo);
    }
  }
  {  // one box per BF16 page: the page as 128 rows of 128 bytes (swizzled), or 64 rows of 256 bytes (no swizzle)
    const uint64_t d5[2] = {64, uint64_t(pages) * 128}, s5[1] = {128};
    const uint32_t b5[2] = {64, 128};
    const uint64_t d6[2] = {128, uint64_t(pages) * 64}, s6[1] = {256};
    const uint32_t b6[2] = {128, 64};
    const auto bf = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const auto pr = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    encode_kv(&b.k_rows, &b.v_rows, bf, 2, d5, s5, b5, CU_TENSOR_MAP_SWIZZLE_128B, pr);
    encode_kv(&b.k_flat, &b.v_flat, bf, 2, d6, s6, b6, CU_TENSOR_MAP_SWIZZLE_NONE, pr);
  }
  {  // the decode's BF16 form with other L2 promotions
    const uint64_t dims[4] = {128, 1, 64, uint64_t(pages)};
    const uint64_t strides[3] = {256, 256, 64 * 256};
    const uint32_t box[4] = {64, 1, 64, 1};
    const auto bf = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const auto sw = CU_TENSOR_MAP_SWIZZLE_128B;
    encode_kv(&b.k_p128, &b.v_p128, bf, 4, dims, strides, box, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    encode_kv(&b.k_pnone, &b.v_pnone, bf, 4, dims, strides, box, sw, CU_TENSOR_MAP_L2_PROMOTION_NONE);
  }
  if (tmap_only) {  // bulk against tensor-map copies, same ring, same pages, both flushes
    for (int flush : {1, 0}) {
      for (int order : {0, 1}) {
        for (int rep = 0; rep < 2; ++rep) {
          run("bf16_8_1", b, pages, 16384, 5, order, sms, 0, flush, true);
          run("bf16_8_1", b, pages, 16384, 5, order, sms, 3, flush);
          run("bf16_8_1", b, pages, 16384, 5, order, sms, 7, flush);
          run("bf16_8_1", b, pages, 16384, 5, order, sms, 8, flush);
          run("bf16_8_1", b, pages, 16384, 5, order, sms, 5, flush);
          run("bf16_8_1", b, pages, 16384, 5, order, sms, 6, flush);
          run("fp8_8_1", b, pages, 8192, 9, order, sms, 0, flush, true);
          run("fp8_8_1", b, pages, 8192, 9, order, sms, 3, flush);
        }
      }
    }
    return 0;
  }
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
