// The floor of the planner's memory chain under the benchmarks' method (the planner's <= 5 us target at
// batch 256). The batch-256 plan reads 5.25-5.47 us; any one-CTA kernel reads 2.62 (launch_cost.cu) and
// cold straight-line code costs nothing measurable. What is left of the plan is a chain: the cold parameter
// block, the KV lengths' DRAM round trip, the arithmetic, the stores draining before the kernel
// completes. These skeletons keep the chain's memory steps and drop the arithmetic step by step, so
// `ours_plan` minus the skeleton is what the plan's arithmetic costs and the skeleton is the least
// any plan of this shape can read. One CTA of 512 threads (the planner's), batch 256:
//   store_only      thread b < 256 stores one int4 (parameters read, no load)
//   lens_store      thread b loads lens[b], stores int4(len, ...) to tasks[b]
//   lens_sum_store  + the block's total (warp sums, shared memory, one barrier) in every store
//   rows_sum_store  every warp of 8 loads all 256 lengths (8 per lane), one warp sum, no barrier (the row
//                   plan's first pass), warp w's lane l stores request 32 w + l
//   rows_chain      rows_sum_store + a 16-shuffle dependent chain before the stores (~1 warp scan +
//                   warp sum of extra arithmetic; a unit to scale the plan's arithmetic by)
//   lens_store_wide lens_store plus the other tables a plan writes at this batch (bin_start and
//                   bin_first for 132 bins, slot_meta for 256 slots, combine for 64 entries, totals)
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -I packages/hpc-attention/src/hpc_attention/include -o /tmp/pf tools/probes/attention/plan_floor.cu && /tmp/pf
#include <cuda_runtime.h>

#include <cstdio>

#include "graph_timing.cuh"

struct Tables {
  const int* lens;
  int4* tasks;
  int* bin_start;
  int4* bin_first;
  int2* slot_meta;
  int4* combine;
  int* totals;
  int batch;
};

__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(512, 1) store_only(const __grid_constant__ Tables t) {
  const int b = threadIdx.x;
  if (b < t.batch) t.tasks[b] = make_int4(b, 0, 64, -1);
}

__global__ void __launch_bounds__(512, 1) lens_store(const __grid_constant__ Tables t) {
  const int b = threadIdx.x;
  if (b < t.batch) t.tasks[b] = make_int4(b, 0, t.lens[b], -1);
}

__global__ void __launch_bounds__(512, 1) lens_sum_store(const __grid_constant__ Tables t) {
  __shared__ int part[16];
  const int b = threadIdx.x, lane = b & 31, w = b >> 5;
  const int len = b < t.batch ? t.lens[b] : 0;
  const int s = warp_sum(len);
  if (lane == 0) part[w] = s;
  __syncthreads();
  const int total = warp_sum(lane < 16 ? part[lane] : 0);
  if (b < t.batch) t.tasks[b] = make_int4(b, total, len, -1);
}

template <int kChain>
__global__ void __launch_bounds__(512, 1) rows_sum_store(const __grid_constant__ Tables t) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int rows = (t.batch + 31) >> 5;
  if (w >= rows) return;
  int raw[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) raw[k] = 32 * k + lane < t.batch ? t.lens[32 * k + lane] : 0;
  int lane_sum = 0, mine = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    lane_sum += (raw[k] + 63) >> 6;
    if (k == w) mine = raw[k];
  }
  int total = warp_sum(lane_sum);
#pragma unroll
  for (int i = 0; i < kChain; ++i) total = __shfl_xor_sync(0xffffffffu, total + i, 1 << (i & 3));
  const int b = 32 * w + lane;
  if (b < t.batch) t.tasks[b] = make_int4(b, total, mine, -1);
}

__global__ void __launch_bounds__(512, 1) lens_store_wide(const __grid_constant__ Tables t) {
  const int b = threadIdx.x;
  const int len = b < t.batch ? t.lens[b] : 0;
  if (b < t.batch) {
    t.tasks[b] = make_int4(b, 0, len, -1);
    t.slot_meta[b] = make_int2(b, len);
  }
  if (b < 132) {
    t.bin_start[b] = len;
    t.bin_first[b] = make_int4(b, len, 0, 0);
  }
  if (b < 64) t.combine[b] = make_int4(b, len, 2, 0);
  if (b < 8) t.totals[b] = len;
}

int main() {
  const FlushedStream fs;
  Tables t{};
  t.batch = 256;
  int* lens;
  CK(cudaMalloc(&lens, 4096));
  int h[256];
  for (int i = 0; i < 256; ++i) h[i] = i % 7 == 0 ? 100 : 4096;  // ours_plan's lengths
  CK(cudaMemcpy(lens, h, sizeof h, cudaMemcpyHostToDevice));
  t.lens = lens;
  CK(cudaMalloc(&t.tasks, 1024 * 16));
  CK(cudaMalloc(&t.bin_start, 1024 * 4));
  CK(cudaMalloc(&t.bin_first, 1024 * 16));
  CK(cudaMalloc(&t.slot_meta, 1024 * 8));
  CK(cudaMalloc(&t.combine, 1024 * 16));
  CK(cudaMalloc(&t.totals, 64));
  struct V {
    const char* name;
    void (*k)(Tables);
  };
  const V vs[] = {{"store_only", store_only},         {"lens_store", lens_store},
                  {"lens_sum_store", lens_sum_store}, {"rows_sum_store", rows_sum_store<0>},
                  {"rows_chain16", rows_sum_store<16>}, {"rows_chain64", rows_sum_store<64>},
                  {"lens_store_wide", lens_store_wide}};
  for (int round = 0; round < 2; ++round) {
    for (const V& v : vs) {
      const GraphTiming g = fs.time([] {}, [&] { v.k<<<1, 512, 0, fs.stream>>>(t); });
      std::printf("{\"round\": %d, \"case\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f}\n", round,
                  v.name, g.median_us, g.p10_us, g.p90_us);
    }
  }
  return 0;
}
