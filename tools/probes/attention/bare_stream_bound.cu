// How fast can any kernel read each brief case's KV bytes under the benchmarks' method? A lower bound for
// the decode targets the committed tables still miss. For every case, head
// layout and KV dtype, 132 persistent CTAs stream exactly the case's K + V bytes with nothing but a copy
// ring (one producer thread issuing 1-D bulk copies of `chunk` bytes into `stages` stages, four consumer
// warps releasing them: page_stream_rate.cu's ring on a flat buffer), timed as bench_us times a decode
// call (graph_timing.cuh: [128 MB written flush, event, kernel, event], mean of 50 replays). Variants
// (chunk 16 / 32 KB, chunks in random or address order, loads with or without the L2 evict_first policy)
// are each a way the same bytes may be read; the best of them is the case's bound. No math, no plan, no
// q / output / page table: a decode call of the case cannot be faster than its bound unless it reads
// the bytes in a way this ring does not (ring depth, two CTAs per SM, LSU loads and short-lived CTAs all
// read within ~1 us of the bulk ring).
//
// Also: `empty` (an empty one-CTA kernel: the method's fixed cost) and each case after a read flush (128 MB
// read after the written flush, so the L2 holds no dirty lines), for the targets' dependence on the flush.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -I packages/hpc-attention/src/hpc_attention/include -o /tmp/bsb tools/probes/attention/bare_stream_bound.cu && /tmp/bsb > OUT/bare_stream_bound.jsonl
//   (/tmp/bsb grid: grid_sweep below; /tmp/bsb rotation: rotation_us below)
// One JSON line per row (case, heads, kv_dtype, variant, flush, floor_us, mean_us, median_us); tools/probe_results.py
// turns them into the results format.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "graph_timing.cuh"
#include "hpc_common/pdl.cuh"
#include "hpc_common/sm90.cuh"

namespace sm90 = hpc::sm90;

constexpr int kMaxStages = 16;
constexpr int kSmemBudget = 192 * 1024;  // the ring's stages: as deep as the decode kernel's
constexpr double kCopyTbps = 4.27;       // BRIEF.md: the floors' copy bandwidth

__global__ void empty_kernel() {}

// 160 threads: warps 0-3 consume, thread 128 produces. CTA c streams chunks [c n / grid, (c + 1) n / grid)
// of `order` (chunk ids into `kv`).
__global__ void __launch_bounds__(160, 1)
    chunk_stream(const uint8_t* __restrict__ kv, const int* __restrict__ order, int chunks, int chunk_bytes,
                 int stages, int evict_first, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const int c0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * chunks / gridDim.x);
  const int n = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * chunks / gridDim.x) - c0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], 4);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();
  // As the decode kernel's plain call (pdl_wait_here): nothing read before the previous kernel is done, the next
  // one's prologue let in right after (no-ops without the PDL launch attribute).
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  if (threadIdx.x == 128) {
    const uint64_t pol = sm90::l2_evict_first_policy();
    for (int i = 0; i < n; ++i) {
      const int s = i % stages;
      if (i >= stages) sm90::mbar_wait(&empty[s], ((i / stages) - 1) & 1);
      const uint8_t* src = kv + static_cast<int64_t>(order[c0 + i]) * chunk_bytes;
      sm90::mbar_arrive_expect_tx(&full[s], chunk_bytes);
      if (evict_first) {  // as the decode kernel's KV loads
        sm90::bulk_load(smem + s * chunk_bytes, src, chunk_bytes, &full[s], pol);
      } else {
        sm90::bulk_load(smem + s * chunk_bytes, src, chunk_bytes, &full[s]);
      }
    }
  } else if (threadIdx.x < 128) {
    float acc = 0.f;
    for (int i = 0; i < n; ++i) {
      const int s = i % stages;
      sm90::mbar_wait(&full[s], (i / stages) & 1);
      acc += reinterpret_cast<const float*>(smem + s * chunk_bytes)[threadIdx.x];  // touch the stage
      __syncwarp();
      if ((threadIdx.x & 31) == 0) sm90::mbar_arrive(&empty[s]);
    }
    if (acc == 1234.5f) sink[threadIdx.x] = acc;
  }
}

// The read flush's second half: every thread reads 16-byte vectors (the written flush's dirty lines are
// written back here, outside the timed events).
__global__ void read_all(const uint4* __restrict__ buf, size_t n, float* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    acc ^= __ldg(buf + i).x;
  }
  if (acc == 0x12345u) sink[threadIdx.x] = float(acc);
}

struct Case {
  std::string name;
  std::vector<int> lens;
};

// "32x128+32x4K" -> 32 requests of 128 tokens and 32 of 4096 (benchmarks/bench_decode.py parse_case).
Case parse_case(const std::string& name) {
  Case c{name, {}};
  size_t pos = 0;
  while (pos < name.size()) {
    size_t plus = name.find('+', pos);
    if (plus == std::string::npos) plus = name.size();
    const std::string part = name.substr(pos, plus - pos);
    const size_t x = part.find('x');
    const int count = std::stoi(part.substr(0, x));
    std::string len = part.substr(x + 1);
    int tokens;
    if (len.back() == 'K') {
      len.pop_back();
      tokens = static_cast<int>(std::stod(len) * 1024);
    } else {
      tokens = std::stoi(len);
    }
    c.lens.insert(c.lens.end(), count, tokens);
    pos = plus + 1;
  }
  return c;
}

// Chunk ids 0..chunks-1 into `order` on the device, shuffled by `rng` when `random_order`.
void upload_order(int* order, int chunks, bool random_order, std::mt19937& rng) {
  std::vector<int> ord(chunks);
  std::iota(ord.begin(), ord.end(), 0);
  if (random_order) std::shuffle(ord.begin(), ord.end(), rng);
  CK(cudaMemcpy(order, ord.data(), chunks * sizeof(int), cudaMemcpyHostToDevice));
}

// `bsb grid`: the 8/1 64x0.5K bytes (64 requests of 8 tiles) on fewer CTAs: 64 (one whole request each, as the
// dynamic plan's whole short items run), 128 (half a request each) and 132, chunk = one 16 KB (FP8) / 32 KB (BF16)
// tile; does a 64-CTA plan bound the call above the 132-CTA ring?
void grid_sweep(const FlushedStream& fs, uint8_t* kv, int* order, float* sink) {
  for (int esize : {1, 2}) {
    const int chunk = 2 * 64 * 128 * esize, chunks = 64 * 8;
    std::mt19937 rng(5);
    upload_order(order, chunks, true, rng);
    const int stages = std::min(kMaxStages, kSmemBudget / chunk);
    for (int grid : {64, 128, 132}) {
      const GraphTiming t = fs.time([] {}, [&] {
        chunk_stream<<<grid, 160, kSmemBudget, fs.stream>>>(kv, order, chunks, chunk, stages, 1, sink);
      });
      std::printf(
          "{\"case\": \"64x0.5K\", \"Hq\": 8, \"Hkv\": 1, \"kv_dtype\": \"%s\", \"variant\": \"grid%d_tile_chunks_ef\", "
          "\"flush\": \"written\", \"mean_us\": %.3f, \"median_us\": %.2f}\n",
          esize == 2 ? "bf16" : "fp8", grid, t.mean_us, t.median_us);
      std::fflush(stdout);
    }
  }
}

// `bsb rotation`: the bound by input rotation, the rotation method of benchmarks/bench_decode.py: n copies of the case's
// KV bytes (n = ceil(256 MB / bytes), 2..64), one ring call per copy back to back in one CUDA graph [event, n calls,
// event] with the PDL launch attribute (each call waits for the previous one before its first copy, as the decode's
// plain call does), no flush; per-call time = the event pair / n, mean and median over replays 2..31.
GraphTiming rotation_us(cudaStream_t stream, int sms, const uint8_t* kv, size_t kv_bytes, int copies, const int* order,
                        int chunks, int chunk, int stages, int ef, float* sink) {
  auto calls = [&] {
    for (int c = 0; c < copies; ++c) {
      CK(hpc::launch_kernel(chunk_stream, dim3(sms), dim3(160), kSmemBudget, stream, true, kv + c * kv_bytes, order,
                            chunks, chunk, stages, ef, sink));
    }
  };
  return time_graph(stream, [] {}, calls, 32, 2, copies);
}

int main(int argc, char** argv) {
  const FlushedStream fs;
  const bool grid_only = argc > 1 && std::string(argv[1]) == "grid";
  const bool rotation = argc > 1 && std::string(argv[1]) == "rotation";
  const std::vector<std::string> names = {"64x0.5K", "64x4K", "32x128+32x4K", "2x32K+30x4K", "1x64K+15x4K",
                                          "1x128K+31x4K"};
  const int heads[2][2] = {{8, 1}, {64, 8}};
  size_t max_bytes = 0;
  for (const auto& nm : names) {
    const Case c = parse_case(nm);
    size_t tokens = 0;
    for (int l : c.lens) tokens += l;
    max_bytes = std::max(max_bytes, tokens * 8 * 128 * 2 * 2);  // 64/8 BF16: the largest
  }
  // Rotation: n copies of every case's bytes, n = ceil(256 MB / bytes) in 2..64 (at most ~2.2 GB: 2 x 64/8 BF16 64x4K).
  auto copies_for = [](size_t bytes) {
    return static_cast<int>(std::min<size_t>(64, std::max<size_t>(2, ((256u << 20) + bytes - 1) / bytes)));
  };
  size_t kv_alloc = max_bytes;
  if (rotation) {
    for (const auto& nm : names) {
      const Case c = parse_case(nm);
      size_t tokens = 0;
      for (int l : c.lens) tokens += l;
      for (size_t b : {tokens * 2 * 128, tokens * 2 * 128 * 2, tokens * 8 * 128 * 2, tokens * 8 * 128 * 2 * 2}) {
        kv_alloc = std::max(kv_alloc, b * copies_for(b));
      }
    }
  }
  uint8_t* kv;
  CK(cudaMalloc(&kv, kv_alloc + (64 << 10)));
  CK(cudaMemset(kv, 1, kv_alloc + (64 << 10)));
  uint4* rbuf;
  const size_t rbytes = FlushedStream::kFlushBytes;
  CK(cudaMalloc(&rbuf, rbytes));
  CK(cudaMemset(rbuf, 3, rbytes));
  float* sink;
  CK(cudaMalloc(&sink, 4096));
  int* order;
  CK(cudaMalloc(&order, (max_bytes / (16 << 10) + 16) * sizeof(int)));
  CK(cudaFuncSetAttribute(chunk_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBudget));

  if (grid_only) {
    grid_sweep(fs, kv, order, sink);
    return 0;
  }
  {
    const GraphTiming t = fs.time([] {}, [&] { empty_kernel<<<1, 32, 0, fs.stream>>>(); });
    std::printf("{\"check\": \"empty_one_cta_kernel\", \"mean_us\": %.3f, \"median_us\": %.2f}\n", t.mean_us,
                t.median_us);
  }
  std::mt19937 rng(11);
  for (const auto& nm : names) {
    const Case c = parse_case(nm);
    size_t tokens = 0, pages = 0;
    int max_pages = 0;
    for (int l : c.lens) {
      tokens += l;
      pages += (l + 63) / 64;
      max_pages = std::max(max_pages, (l + 63) / 64);
    }
    const int B = static_cast<int>(c.lens.size());
    for (const auto& hh : heads) {
      const int hq = hh[0], hkv = hh[1];
      for (int esize : {2, 1}) {
        const size_t kv_bytes = 2 * tokens * hkv * 128 * esize;
        // benchmarks/bench_decode.py call_bytes: K + V, q read and the output written (BF16), the page table
        const double call_bytes = double(kv_bytes) + 2.0 * B * hq * 128 * 2 + double(B) * max_pages * 4;
        const double floor_us = call_bytes / (kCopyTbps * 1e12) * 1e6;
        if (rotation) {  // chunk 32 KB, both orders and policies
          const int chunk = 32 << 10, chunks = static_cast<int>((kv_bytes + chunk - 1) / chunk);
          const int stages = std::min(kMaxStages, kSmemBudget / chunk), copies = copies_for(kv_bytes);
          for (int random_order : {1, 0}) {
            upload_order(order, chunks, random_order, rng);
            for (int ef : {1, 0}) {
              const GraphTiming t = rotation_us(fs.stream, fs.sms, kv, kv_bytes, copies, order, chunks, chunk, stages,
                                                ef, sink);
              std::printf(
                  "{\"case\": \"%s\", \"Hq\": %d, \"Hkv\": %d, \"kv_dtype\": \"%s\", \"kv_mb\": %.1f, "
                  "\"variant\": \"chunk32k_%s%s\", \"flush\": \"rotation\", \"copies\": %d, \"floor_us\": %.2f, "
                  "\"mean_us\": %.3f, \"median_us\": %.2f, \"pct_of_floor\": %.1f}\n",
                  c.name.c_str(), hq, hkv, esize == 2 ? "bf16" : "fp8", kv_bytes / 1e6, random_order ? "random" : "inorder",
                  ef ? "_ef" : "", copies, floor_us, t.mean_us, t.median_us, 100.0 * floor_us / t.mean_us);
              std::fflush(stdout);
            }
          }
          continue;
        }
        for (int chunk_kb : {16, 32}) {
          const int chunk = chunk_kb << 10;
          const int chunks = static_cast<int>((kv_bytes + chunk - 1) / chunk);  // last chunk may read a little past
          const int stages = std::min(kMaxStages, kSmemBudget / chunk);
          for (int random_order : {1, 0}) {
            upload_order(order, chunks, random_order, rng);
            for (int ef : {1, 0}) {
              for (int read_flush : {0, 1}) {
                auto before = [&] {
                  if (read_flush) read_all<<<4 * fs.sms, 512, 0, fs.stream>>>(rbuf, rbytes / 16, sink);
                };
                auto call = [&] {
                  chunk_stream<<<fs.sms, 160, kSmemBudget, fs.stream>>>(kv, order, chunks, chunk, stages, ef, sink);
                };
                const GraphTiming t = fs.time(before, call);
                std::printf(
                    "{\"case\": \"%s\", \"Hq\": %d, \"Hkv\": %d, \"kv_dtype\": \"%s\", \"kv_mb\": %.1f, "
                    "\"variant\": \"chunk%dk_%s%s\", \"flush\": \"%s\", \"floor_us\": %.2f, \"mean_us\": %.3f, "
                    "\"median_us\": %.2f, \"pct_of_floor\": %.1f}\n",
                    c.name.c_str(), hq, hkv, esize == 2 ? "bf16" : "fp8", kv_bytes / 1e6, chunk_kb,
                    random_order ? "random" : "inorder", ef ? "_ef" : "", read_flush ? "read" : "written", floor_us,
                    t.mean_us, t.median_us, 100.0 * floor_us / t.mean_us);
                std::fflush(stdout);
              }
            }
          }
        }
      }
    }
  }
  CK(cudaGetLastError());
  return 0;
}
