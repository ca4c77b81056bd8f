// What a planner-like kernel pays per line of table it writes after the benchmarks' flush (twenty-third
// session: the 64/8 plan reads ~1.1 us over the 8/1 plan with the same per-CTA work and 8x the table bytes,
// attention_plan64_probe_grid.*; plan_floor.cu's lens_store_wide read +0.16 us over lens_store for ~6 KB
// more tables). Each CTA of 512 threads loads one cold length per thread (the plan's first dependent
// round trip), then writes `kb` KB of int4 (coalesced, values from the length). Same method as the other
// probes (graph_timing.cuh). Variants:
//   <n>cta_<kb>k           n CTAs, each writing its own kb KB (n x kb KB of distinct lines)
//   <n>cta_<kb>k_same      n CTAs all writing the same kb KB
//   ..._pf                 every thread first issues prefetch.global.L2 for its store lines (parameters only:
//                          at entry, before the length's load), so the lines' L2 misses overlap that load
//   ..._rd                 a 128 MB read after the written flush (clean lines in the L2, as a read flush)
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -o /tmp/sl packages/hpc-attention/scripts/store_lines.cu && /tmp/sl
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "graph_timing.cuh"

__global__ void read_all(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    acc ^= buf[i].x;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

template <bool kPrefetch>
__global__ void __launch_bounds__(512, 1) store_lines(const int* lens, int4* out, int vecs_per_cta, bool same) {
  int4* mine = out + (same ? 0 : size_t(blockIdx.x) * vecs_per_cta);
  if constexpr (kPrefetch) {
    for (int v = threadIdx.x * 8; v < vecs_per_cta; v += 512 * 8) {  // one per 128-byte line
      asm volatile("prefetch.global.L2 [%0];" ::"l"(mine + v));
    }
  }
  const int len = lens[threadIdx.x];
  for (int v = threadIdx.x; v < vecs_per_cta; v += 512) mine[v] = make_int4(len, v, blockIdx.x, 0);
}

int main() {
  const FlushedStream fs;
  int* lens;
  CK(cudaMalloc(&lens, 512 * 4));
  CK(cudaMemset(lens, 1, 512 * 4));
  int4* out;
  CK(cudaMalloc(&out, size_t(8) << 20));
  uint4* rd;
  unsigned* sink;
  CK(cudaMalloc(&rd, FlushedStream::kFlushBytes));
  CK(cudaMemset(rd, 0, FlushedStream::kFlushBytes));
  CK(cudaMalloc(&sink, 4));
  struct Shape {
    int ctas, kb;
    bool same;
  };
  const Shape shapes[] = {{1, 0}, {1, 4}, {1, 16}, {1, 40}, {1, 80}, {8, 5}, {8, 10}, {8, 5, true}, {8, 10, true}};
  for (int round = 0; round < 2; ++round) {
    for (const Shape& s : shapes) {
      for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 prefetch, 2 read after the flush
        const int vecs = s.kb * 1024 / 16;
        auto call = [&] {
          if (mode == 1) {
            store_lines<true><<<s.ctas, 512, 0, fs.stream>>>(lens, out, vecs, s.same);
          } else {
            store_lines<false><<<s.ctas, 512, 0, fs.stream>>>(lens, out, vecs, s.same);
          }
        };
        auto before = [&] {
          if (mode == 2) read_all<<<4 * fs.sms, 512, 0, fs.stream>>>(rd, FlushedStream::kFlushBytes / 16, sink);
        };
        const GraphTiming g = fs.time(before, call);
        const std::string name = std::to_string(s.ctas) + "cta_" + std::to_string(s.kb) + "k" + (s.same ? "_same" : "") +
                                 (mode == 1 ? "_pf" : mode == 2 ? "_rd" : "");
        std::printf("{\"round\": %d, \"case\": \"%s\", \"ctas\": %d, \"kb_per_cta\": %d, \"same_lines\": %s, "
                    "\"mode\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"mean_us\": %.3f}\n",
                    round, name.c_str(), s.ctas, s.kb, s.same ? "true" : "false",
                    mode == 1 ? "prefetch" : mode == 2 ? "read_flush" : "written_flush", g.median_us, g.p10_us,
                    g.p90_us, g.mean_us);
      }
    }
  }
  return 0;
}
