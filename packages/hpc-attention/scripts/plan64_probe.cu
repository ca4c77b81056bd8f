// The 64/8 plan (batch 256, head-major line on a grid of 8 CTAs) as the library launches it, against
// variants in kernels of their own. Same method as the other probes (graph_timing.cuh). `ours_plan`'s
// 64/8 case: every 7th request 100 tokens, the rest 4096, 132 bins (cut into 128), BF16 task cost.
//   plan64            the library's launch (launch_decode_plan: the aligned kernel on plan_ctas CTAs; PDL on)
//   aligned_only      prologue, plan_head_major_aligned (block scans), first pages, on plan_ctas CTAs
//   aligned_touch     the same with touch_param_lines by the last warp at entry
//   aligned_g<n>      decode_plan_aligned_kernel on n CTAs (the heads split n ways; the same tables)
//   rows81_g<n>       the 8/1 row plan (decode_plan_rows_kernel, its own 8/1 tables) on n CTAs, every CTA
//                     writing the same tables: what a grid costs the same per-CTA work
// Twenty-third session (benchmarks/results/h200/attention_plan64_probe_grid.*, run at d91005b with an
// aligned row plan, since reverted, in place of aligned_g<n>): the 8/1 row plan reads 4.99-5.18 us on 1, 2
// and 8 CTAs, and the 64/8 plan 6.11 on 8 CTAs in either form (7.42 on one): the ~1.1 us over 8/1 goes with
// the 8x table bytes (41 KB of distinct lines), not the per-CTA arithmetic or the grid.
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

// rows81_idle_loads: the 8/1 row kernel with warps 8-14 (no row) first loading all 256 lengths as pass 1
// does (8 per lane) and summing them: is it the idle warps' loads that cost (64/8, 5.89-5.92 us with the idle
// warps in pass 1 against 5.22-5.28)? (No: 4.77-4.80 against 4.93-4.96 without them, twenty-third session.)
// kMode 0: plain loads by the idle warps at entry; 1: the same with 128-bit loads; 2: the idle warps' loads
// after griddepcontrol.wait (legal under PDL); 3: no idle loads, the touch warp issues prefetch.global.L2
// for the lengths' lines at entry (legal before the wait: the load after it reads the L2, which holds
// every write).
template <int kMode>
__global__ void __launch_bounds__(hpc::attn::kPlanThreads, 1) rows81_idle_loads(const __grid_constant__ DecodePlanParams p) {
  using namespace hpc::attn;
  constexpr bool kWide = kMode == 1;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (kMode == 3 && w == kPlanWarps - 1 && lane * 32 < p.batch) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p.kv_lens + lane * 32));
  }
  if (kMode != 3 && w >= 8 && w < kPlanWarps - 1) {
    if (kMode == 2) hpc::pdl_wait();
    int acc = 0;
    if constexpr (kWide) {
      const int4* l4 = reinterpret_cast<const int4*>(p.kv_lens);
      for (int k = 0; k < 2; ++k) {
        const int4 v = l4[k * 32 + lane];
        acc += v.x + v.y + v.z + v.w;
      }
    } else {
      for (int k = 0; k < kRowMax; ++k) acc += p.kv_lens[32 * k + lane];
    }
    acc = warp_sum(acc);
    if (acc == 0x7fffffff) p.counters[7] = acc;  // never: keeps the loads
    return;
  }
  if (w == kPlanWarps - 1) touch_param_lines(p);
  plan_fast_rows<false>(p, plan_pdl_entry(p));
}

using Launch = void (*)(const DecodePlanParams&, cudaStream_t, int);
template <void (*K)(DecodePlanParams), int kCtas>
void launch_on(const DecodePlanParams& q, cudaStream_t s, int) {
  CK(hpc::launch_kernel(K, dim3(kCtas), dim3(hpc::attn::kPlanThreads), 0, s, true, q));
}

int main() {
  const FlushedStream fs;
  constexpr int kCaps = 16384;
  DecodePlanParams p = bench_plan_params(8);
  const PlanTables tables(p, kCaps, kBenchBins + kBenchTailBins);
  DecodePlanParams p1 = bench_plan_params(1);
  const PlanTables tables1(p1, kCaps, kBenchBins + kBenchTailBins);
  const int ctas = hpc::attn::plan_ctas(p);
  std::printf("{\"check\": \"plan_ctas\", \"value\": %d, \"cut_bins\": %d}\n", ctas, p.cut_bins);

  struct V {
    const char* name;
    Launch launch;
    bool one_head;  // on the 8/1 parameters
  };
  using hpc::attn::decode_plan_aligned_kernel;
  using hpc::attn::decode_plan_rows_kernel;
  const V vs[] = {
      {"plan64", [](const DecodePlanParams& q, cudaStream_t s, int) { CK(hpc::attn::launch_decode_plan(q, s, true)); },
       false},
      {"aligned_only",
       [](const DecodePlanParams& q, cudaStream_t s, int n) {
         CK(hpc::launch_kernel(aligned_only<false>, dim3(n), dim3(hpc::attn::kPlanThreads), 0, s, true, q));
       },
       false},
      {"aligned_touch",
       [](const DecodePlanParams& q, cudaStream_t s, int n) {
         CK(hpc::launch_kernel(aligned_only<true>, dim3(n), dim3(hpc::attn::kPlanThreads), 0, s, true, q));
       },
       false},
      {"aligned_g1", launch_on<decode_plan_aligned_kernel, 1>, false},
      {"aligned_g2", launch_on<decode_plan_aligned_kernel, 2>, false},
      {"aligned_g4", launch_on<decode_plan_aligned_kernel, 4>, false},
      {"aligned_g8", launch_on<decode_plan_aligned_kernel, 8>, false},
      {"rows_aligned_g8", launch_on<hpc::attn::decode_plan_rows_aligned_kernel, 8>, false},
      {"rows81_g1", launch_on<decode_plan_rows_kernel, 1>, true},
      {"rows81_g2", launch_on<decode_plan_rows_kernel, 2>, true},
      {"rows81_g8", launch_on<decode_plan_rows_kernel, 8>, true},
      {"rows81_idle_loads", launch_on<rows81_idle_loads<0>, 1>, true},
      {"rows81_idle_loads_wide", launch_on<rows81_idle_loads<1>, 1>, true},
      {"rows81_idle_loads_after_wait", launch_on<rows81_idle_loads<2>, 1>, true},
      {"rows81_prefetch_l2", launch_on<rows81_idle_loads<3>, 1>, true},
  };
  constexpr int kNum = sizeof(vs) / sizeof(vs[0]);
  for (int round = 0; round < 2; ++round) {
    for (const V& v : vs) {
      const DecodePlanParams& q = v.one_head ? p1 : p;
      const GraphTiming g = fs.time([] {}, [&] { v.launch(q, fs.stream, ctas); });
      std::printf("{\"round\": %d, \"case\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"mean_us\": %.3f}\n",
                  round, v.name, g.median_us, g.p10_us, g.p90_us, g.mean_us);
    }
  }
  // Every variant's tables against the library's launch on the same parameters.
  auto snapshot = [&](const V& v) {
    const DecodePlanParams& q = v.one_head ? p1 : p;
    return (v.one_head ? tables1 : tables).snapshot(fs.stream, [&] { v.launch(q, fs.stream, ctas); });
  };
  const std::vector<char> want = snapshot(vs[0]);
  const std::vector<char> want1 =
      tables1.snapshot(fs.stream, [&] { CK(hpc::attn::launch_decode_plan(p1, fs.stream, true)); });
  for (int i = 1; i < kNum; ++i)
    std::printf("{\"check\": \"%s\", \"tables_equal_library\": %s}\n", vs[i].name,
                snapshot(vs[i]) == (vs[i].one_head ? want1 : want) ? "true" : "false");
  return 0;
}
