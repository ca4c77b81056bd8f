// The planner probes' pieces (plan_probe.cu, plan64_probe.cu): the benchmark's batch-256 plan case, a
// workspace's device tables for a DecodePlanParams, and a byte snapshot of them after one launch, to check
// that a variant writes the library plan's tables.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>


#include "graph_timing.cuh"
#include "hpc_attention/decode_params.h"

struct PlanTables {
  size_t sizes[6];
  void* ptrs[6];
  // tasks / combine / slot_meta for `caps` entries, bin_start / bin_first for `bins` bins (owned and tail).
  PlanTables(hpc::attn::DecodePlanParams& p, int caps, int bins)
      : sizes{size_t(caps) * 16, size_t(bins + 1) * 4, size_t(bins) * 16, size_t(caps) * 16, 64 * 4, size_t(caps) * 8} {
    CK(cudaMalloc(&p.tasks, sizes[0]));
    CK(cudaMalloc(&p.bin_start, sizes[1]));
    CK(cudaMalloc(&p.bin_first, sizes[2]));
    CK(cudaMalloc(&p.combine, sizes[3]));
    CK(cudaMalloc(&p.counters, sizes[4]));
    CK(cudaMalloc(&p.slot_meta, sizes[5]));
    void* const q[6] = {p.tasks, p.bin_start, p.bin_first, p.combine, p.counters, p.slot_meta};
    for (int i = 0; i < 6; ++i) ptrs[i] = q[i];
  }
  // Poison, launch, read back every table.
  template <typename Launch>
  std::vector<char> snapshot(cudaStream_t stream, Launch launch) const {
    for (int i = 0; i < 6; ++i) CK(cudaMemsetAsync(ptrs[i], 0x5a, sizes[i], stream));
    launch();
    CK(cudaStreamSynchronize(stream));
    std::vector<char> all;
    for (int i = 0; i < 6; ++i) {
      std::vector<char> h(sizes[i]);
      CK(cudaMemcpy(h.data(), ptrs[i], sizes[i], cudaMemcpyDeviceToHost));
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  }
};

// `ours_plan`'s case (bench_decode_attention.py, bench_plan_256): batch 256, every 7th request 100 tokens,
// the rest 4096; kBenchBins bins, work floor 4, the BF16 task cost, no tail, no page table; the line
// head-major from 2 KV heads (set_line_order, as plan_decode sets it). Tables not allocated (PlanTables).
constexpr int kBenchBatch = 256, kBenchBins = 132, kBenchTailBins = 2 * kBenchBins;
inline hpc::attn::DecodePlanParams bench_plan_params(int num_kv_heads) {
  int* lens;
  CK(cudaMalloc(&lens, kBenchBatch * 4));
  std::vector<int> h(kBenchBatch);
  for (int i = 0; i < kBenchBatch; ++i) h[i] = i % 7 == 0 ? 100 : 4096;
  CK(cudaMemcpy(lens, h.data(), kBenchBatch * 4, cudaMemcpyHostToDevice));
  hpc::attn::DecodePlanParams p{};
  p.kv_lens = lens;
  p.batch = kBenchBatch;
  p.num_kv_heads = num_kv_heads;
  p.num_bins = kBenchBins;
  p.min_tiles = 4;
  p.max_len = 4096;
  p.task_cost = 2;
  p.tail_bin = 4;
  p.max_tail_bins = kBenchTailBins;
  hpc::attn::set_line_order(p, num_kv_heads > 1, true);
  return p;
}
