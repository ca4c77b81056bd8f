// The 64/8 plan (batch 256, head-major line, the aligned plan on a grid of 8 CTAs) as the library
// launches it, against the aligned plan alone in a kernel of its own (twenty-second session: the row
// plan read ~0.45 us faster as a kernel of its own than as a branch of decode_plan_kernel; plan_probe.cu).
// Same method as the other probes (graph_timing.cuh). `ours_plan`'s 64/8 case: every 7th request 100
// tokens, the rest 4096, 132 bins (cut into 128), BF16 task cost.
//   plan64          decode_plan_kernel<true> through launch_decode_plan (PDL attribute on)
//   aligned_only    prologue, plan_head_major_aligned, first pages: no fallback (this case is aligned)
//   aligned_touch   the same with touch_param_lines by the last warp at entry
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr --use_fast_math -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
//        -I packages/hpc-common/src/hpc_common/include -I packages/hpc-attention/src/hpc_attention/include \
//        -o /tmp/p64 packages/hpc-attention/scripts/plan64_probe.cu && /tmp/p64
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "graph_timing.cuh"
#include "plan_tables.cuh"
#include "hpc_attention/decode_plan.cuh"

using hpc::attn::DecodePlanParams;

template <bool kTouch>
__global__ void __launch_bounds__(hpc::attn::kPlanThreads, 1) aligned_only(const __grid_constant__ DecodePlanParams p) {
  using namespace hpc::attn;
  if constexpr (kTouch) {
    if (threadIdx.x >> 5 == kPlanWarps - 1) touch_param_lines(p);
  }
  FastDiv by_floor;
  by_floor.init(p.min_tiles > 0 ? p.min_tiles : 1);
  if (p.page_table != nullptr) {
    const int ns = min(p.num_bins + p.max_tail_bins, kFirstPageSmemBins);
    for (int c = threadIdx.x; c < ns; c += kPlanThreads) plan_shared().first[c].x = -1;
  }
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  if (plan_head_major_aligned(p, by_floor) && p.page_table != nullptr) write_first_pages(p);
}

int main() {
  const FlushedStream fs;
  constexpr int kCaps = 16384;
  DecodePlanParams p = bench_plan_params(8);
  const PlanTables tables(p, kCaps, kBenchBins + kBenchTailBins);
  const int ctas = hpc::attn::plan_ctas(p);
  std::printf("{\"check\": \"plan_ctas\", \"value\": %d, \"cut_bins\": %d}\n", ctas, p.cut_bins);

  struct V {
    const char* name;
    void (*launch)(const DecodePlanParams&, cudaStream_t, int);
  };
  const V vs[] = {
      {"plan64", [](const DecodePlanParams& q, cudaStream_t s, int) { CK(hpc::attn::launch_decode_plan(q, s, true)); }},
      {"aligned_only",
       [](const DecodePlanParams& q, cudaStream_t s, int n) {
         CK(hpc::launch_kernel(aligned_only<false>, dim3(n), dim3(hpc::attn::kPlanThreads), 0, s, true, q));
       }},
      {"aligned_touch",
       [](const DecodePlanParams& q, cudaStream_t s, int n) {
         CK(hpc::launch_kernel(aligned_only<true>, dim3(n), dim3(hpc::attn::kPlanThreads), 0, s, true, q));
       }},
  };
  for (int round = 0; round < 2; ++round) {
    for (const V& v : vs) {
      const GraphTiming g = fs.time([] {}, [&] { v.launch(p, fs.stream, ctas); });
      std::printf("{\"round\": %d, \"case\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"mean_us\": %.3f}\n",
                  round, v.name, g.median_us, g.p10_us, g.p90_us, g.mean_us);
    }
  }
  // The alone-kernels' tables against the library's.
  auto snapshot = [&](const V& v) { return tables.snapshot(fs.stream, [&] { v.launch(p, fs.stream, ctas); }); };
  const std::vector<char> want = snapshot(vs[0]);
  for (int i = 1; i < 3; ++i)
    std::printf("{\"check\": \"%s\", \"tables_equal_library\": %s}\n", vs[i].name, snapshot(vs[i]) == want ? "true" : "false");
  return 0;
}
