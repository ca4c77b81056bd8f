// The library's planner kernel next to skeletons of its memory chain, in one process under the
// benchmarks' method (twenty-second session; plan_floor.cu has the skeletons alone). `ours_plan`'s
// case: batch 256, one KV head, every 7th request 100 tokens, the rest 4096, 132 bins, BF16 task
// cost, no page table. Variants:
//   plan_pdl / plan_nopdl   decode_plan_kernel<false> through launch_decode_plan, PDL attribute on / off
//   rows_stop<k>            the row plan copied into a kernel of its own, stopped after step k (below)
//   *_after_spin / *_code_warm  the graph holds a spin kernel / a batch-1 plan of the same kernel between
//                           the flush and the timed launch (does cold code cost? PDL off)
//   skel                    one request per thread: length loaded, one int4 stored (plan_floor's lens_store)
//   skel_bigparams          the same reading its pointers out of a DecodePlanParams (the plan's param block)
//   skel_pdl                skel_bigparams plus griddepcontrol.wait / launch_dependents, PDL attribute on
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr --use_fast_math -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -I packages/hpc-attention/src/hpc_attention/include \
//        -o /tmp/pp packages/hpc-attention/scripts/plan_probe.cu && /tmp/pp
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "graph_timing.cuh"
#include "plan_tables.cuh"
#include "hpc_attention/decode_plan.cuh"

using hpc::attn::DecodePlanParams;

__global__ void __launch_bounds__(512, 1) skel(const int* lens, int4* tasks, int batch) {
  const int b = threadIdx.x;
  if (b < batch) tasks[b] = make_int4(b, 0, lens[b], -1);
}

template <bool kPdl>
__global__ void __launch_bounds__(512, 1) skel_params(const __grid_constant__ DecodePlanParams p) {
  if constexpr (kPdl) {
    hpc::pdl_wait();
    hpc::pdl_launch_dependents();
  }
  const int b = threadIdx.x;
  if (b < p.batch) p.tasks[b] = make_int4(b, 0, p.kv_lens[b], -1);
}


// %clock read once `dep` is available (predicated on it, as decode_timeline.cuh's tl_clock_after), and
// ordered after every earlier memory access of the thread (the clobber).
__device__ __forceinline__ unsigned clock_after(int dep) {
  unsigned t = 0;
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.s32 p, %1, -2147483647;\n\t@p mov.u32 %0, %%clock;\n\t}"
               : "+r"(t)
               : "r"(dep)
               : "memory");
  return t;
}
unsigned* g_stamps;  // kFlags 16: [warp][8] clock stamps of rows_stamped, lane 0 of each warp
__device__ unsigned* d_stamps;

// touch_param_lines (decode_plan_common.cuh): one lane per 16 bytes of the parameter block loads a
// word at entry into a volatile shared sink. Its first measurement here (a plain sink) was of nothing:
// ptxas dropped the unread stores and their loads.

// The row plan (decode_plan_rows.cuh's plan_fast_rows, copied) stopped after step kStop, storing what
// the step produced so the compiler keeps it: 0 the lengths and the total, 1 + the line, the cut and
// my line position, 2 + the counts and the barrier, 3 + unused bins and totals, 4 the whole plan.
// kFlags (kStop 4 only): 1 no close_unused_bins, 2 no write_totals, 4 both after plan_fast_write, 8 the
// last warp touches the parameter lines at entry (touch_param_lines), 16 clock stamps per step into d_stamps
// (rows_stamped: the steps' cycles, warp by warp), 32 the first-page init at entry (a parameter test
// before the lengths' loads, as decode_plan_kernel has it), 64 pass 3 written for one request of one head
// per thread with pass 2's bins (rows_spec), 128 the charge test in 32 bits (rows_charge32).
template <int kStop, int kFlags = 0>
__global__ void __launch_bounds__(512, 1) rows_stop(const __grid_constant__ DecodePlanParams p) {
  using namespace hpc::attn;
  if constexpr ((kFlags & 8) != 0) {
    if (threadIdx.x >> 5 == hpc::attn::kPlanWarps - 1) hpc::attn::touch_param_lines(p);
  }
  FastDiv by_floor;
  by_floor.init(p.min_tiles > 0 ? p.min_tiles : 1);
  if constexpr ((kFlags & 32) != 0) {  // the library's first-page init at entry, as decode_plan_kernel has it
    if (p.page_table != nullptr && static_cast<int>(threadIdx.x >> 5) < ((p.batch + 31) >> 5)) {
      const int ns = min(p.num_bins + p.max_tail_bins, kFirstPageSmemBins);
      for (int c = threadIdx.x; c < ns; c += 256) plan_shared().first[c].x = -1;
    }
  }
  unsigned st[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  constexpr bool kStamp = (kFlags & 16) != 0;
  if constexpr (kStamp) st[0] = clock_after(0);
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const int B = p.batch, rows = (B + 31) >> 5;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (w >= rows) return;
  const unsigned ovh = p.task_cost > 0 ? p.task_cost : 0;
  int raw[kRowMax];
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) raw[k] = k < rows && 32 * k + lane < B ? p.kv_lens[32 * k + lane] : 0;
  int n[kRowMax];
  int lane_tiles = 0, lane_clamped = 0;
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) {
    n[k] = tiles_of(clamp_len(p, raw[k]));
    lane_tiles += n[k];
    lane_clamped += raw[k] < 0 || raw[k] > p.max_len ? 1 : 0;
  }
  if constexpr (kStamp) st[1] = clock_after(raw[0] ^ raw[7]);
  const int total = warp_sum(lane_tiles);
  const int clamped = warp_sum(lane_clamped);
  if constexpr (kStamp) st[2] = clock_after(total);
  const int b = w * 32 + lane;
  if constexpr (kStop == 0) {
    if (b < B) p.tasks[b] = make_int4(total, clamped, raw[0], n[7]);
    return;
  }
  const unsigned nb0 = static_cast<unsigned>(bins_for(by_floor, static_cast<unsigned>(total), p.cut_bins));
  int lane_charged = 0, lane_before = 0, my_len = 0, my_n = 0;
  unsigned my_ovh = 0;
#pragma unroll
  for (int k = 0; k < kRowMax; ++k) {
    const bool charged = (kFlags & 128) != 0
                             ? n[k] > 0 && static_cast<unsigned>(n[k]) * nb0 <= static_cast<unsigned>(total)
                             : n[k] > 0 && static_cast<unsigned long long>(n[k]) * nb0 <= static_cast<unsigned>(total);
    lane_charged += charged ? 1 : 0;
    const int span = n[k] + (charged ? static_cast<int>(ovh) : 0);
    if (k < w) lane_before += span;
    if (k == w) {
      my_len = clamp_len(p, raw[k]);
      my_n = n[k];
      my_ovh = charged ? ovh : 0u;
    }
  }
  const unsigned line = static_cast<unsigned>(total) + ovh * static_cast<unsigned>(warp_sum(lane_charged));
  const unsigned line0 = static_cast<unsigned>(warp_sum(lane_before) + warp_exclusive_scan(my_n + static_cast<int>(my_ovh)));
  const unsigned nb = static_cast<unsigned>(bins_for(by_floor, line, p.cut_bins));
  FastCut cut;
  cut.init(line, nb);
  if constexpr (kStamp) st[3] = clock_after(static_cast<int>(cut.budget ^ line0 ^ cut.L.by_line.m));
  if constexpr (kStop == 1) {
    if (b < B) p.tasks[b] = make_int4(line0, cut.budget, cut.L.by_line.m, my_len);
    return;
  }
  int cnt[4] = {0, 0, 0, 0};
  const unsigned my_first = cut.L.bin_of(line0 + my_ovh), my_last = cut.L.bin_of(line0 + my_ovh + my_n - 1);
  if (b < B) {
    if (my_n == 0) {
      cnt[2] = 1;
    } else {
      count_parts(cnt, static_cast<int>(my_last - my_first) + 1, 1);
    }
  }
  int4* row_sums = plan_shared().scan[2];
  const int r_tasks = warp_sum(cnt[0]), r_slots = warp_sum(cnt[1]), r_comb = warp_sum(cnt[2]);
  if (lane == 0) row_sums[w] = make_int4(r_tasks, r_slots, r_comb, 0);
  const int e_tasks = warp_exclusive_scan(cnt[0]), e_slots = warp_exclusive_scan(cnt[1]),
            e_comb = warp_exclusive_scan(cnt[2]);
  if constexpr (kStamp) st[4] = clock_after(e_tasks ^ e_slots ^ e_comb);
  hpc::sm90::named_barrier(1, rows * 32);
  const int4 r = lane < rows ? row_sums[lane] : make_int4(0, 0, 0, 0);
  const bool before = lane < w;
  const int task = warp_sum(before ? r.x : 0) + e_tasks, slot = warp_sum(before ? r.y : 0) + e_slots,
            comb = warp_sum(before ? r.z : 0) + e_comb;
  const int num_tasks = warp_sum(r.x), num_slots = warp_sum(r.y), num_comb = warp_sum(r.z);
  if constexpr (kStamp) st[5] = clock_after(task ^ slot ^ comb ^ num_tasks ^ num_slots ^ num_comb);
  if constexpr (kStop == 2) {
    if (b < B) p.tasks[b] = make_int4(task + num_tasks, slot + num_slots, comb + num_comb, line0 + my_len);
    return;
  }
  const int nb_used = line > 0 ? static_cast<int>(nb) : 0;
  if constexpr ((kFlags & 5) == 0) close_unused_bins(p, nb_used, num_tasks, rows * 32);
  if constexpr ((kFlags & 6) == 0) {
    write_totals(p, {num_tasks, num_comb, line > 0 ? static_cast<int>(cut.budget) : 0, total, num_slots, nb_used,
                     clamped, 0});
  }
  if constexpr (kStop == 3) {
    if (b < B) p.tasks[b] = make_int4(task, slot, comb, line0 + my_len);
    return;
  }
  if constexpr (kStamp) st[6] = clock_after(0);
  const bool mine = b < B;
  if constexpr ((kFlags & 64) != 0) {
    // Pass 3 for one request of one head per thread, with the bins of pass 2 (no recomputation).
    const unsigned span = static_cast<unsigned>(my_n) + my_ovh;
    const bool is_long = my_n > 0 && span > cut.long_units;
    if (mine && my_n == 0) {
      p.combine[comb] = make_int4(b, 0, 0, 0);
    } else if (mine && !is_long) {
      const unsigned s0 = line0, s = s0 + my_ovh, e = s + my_n;
      const int parts = static_cast<int>(my_last - my_first) + 1;
      const bool split = parts > 1;
      if (cut.nests(ovh) && my_ovh > 0) write_nested_bins(p, cut.L, s0, my_first, task);
      for_each_part(cut.L, s0, s, e, my_len, my_first, my_last, [&](int q, unsigned c, int tile, int token_end, bool opens) {
        const int4 t4 = make_int4(b, tile, token_end, split ? slot + q : -1);
        p.tasks[task + q] = t4;
        if (split) p.slot_meta[slot + q] = make_int2(slot, parts);
        if (opens) {
          p.bin_start[c] = task + q;
          p.bin_first[c] = t4;
          note_first(static_cast<int>(c), b, tile);
        }
      });
      if (split) p.combine[comb] = make_int4(b, slot, parts, 0);
    }
    unsigned mask = __ballot_sync(0xffffffffu, mine && is_long);
    while (mask) {
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      write_long_request<false>(p, cut.L, src, b, my_len, my_n, line0, my_ovh, 0, 1, task, slot, comb);
    }
  } else {
    // the uncapped charge this probe measured (the library's ItemCharge with cost_cap off)
    const ItemCharge charge{ovh, nb0, static_cast<unsigned>(total), 0xffffffffu};
    plan_fast_write<false>(p, cut, mine ? b : B, mine ? b + 1 : B, 0, 1, 1, my_len, line0, charge, task, slot, comb);
  }
  if constexpr ((kFlags & 4) != 0) {
    close_unused_bins(p, nb_used, num_tasks, rows * 32);
    write_totals(p, {num_tasks, num_comb, line > 0 ? static_cast<int>(cut.budget) : 0, total, num_slots, nb_used,
                     clamped, 0});
  }
  if constexpr (kStamp) {
    st[7] = clock_after(0);
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) d_stamps[w * 8 + i] = st[i];
    }
  }
}

// Spins ~4 us on the global timer (the control for a warm-up launch: no shared code).
__global__ void spin_kernel() {
  const uint64_t t0 = hpc::sm90::global_timer_ns();
  while (hpc::sm90::global_timer_ns() - t0 < 4000) {
  }
}

// SM clock right after the flush: clock64 ticks over ~3 us of global time (MHz into out[0]).
__global__ void clock_kernel(double* out) {
  const uint64_t t0 = hpc::sm90::global_timer_ns();
  const long long c0 = clock64();
  uint64_t t1;
  while ((t1 = hpc::sm90::global_timer_ns()) - t0 < 3000) {
  }
  const long long c1 = clock64();
  out[0] = double(c1 - c0) * 1e3 / double(t1 - t0);
}

// decode_plan_rows_kernel's body (plan_fast_rows itself from the header), with or without its
// touch_param_lines by warp 15 (idle in the row plan: rows <= 8).
template <bool kTouch>
__global__ void __launch_bounds__(512, 1) rows_lib(const __grid_constant__ DecodePlanParams p) {
  using namespace hpc::attn;
  if constexpr (kTouch) {
    if (threadIdx.x >> 5 == kPlanWarps - 1) hpc::attn::touch_param_lines(p);
  }
  FastDiv by_floor;
  by_floor.init(p.min_tiles > 0 ? p.min_tiles : 1);
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  plan_fast_rows<false>(p, by_floor);
  if (p.page_table != nullptr) write_first_pages(p);
}

DecodePlanParams g_warm;  // a batch-1 plan on its own tables: the warm-up launch of rows_stop4_warm

int main() {
  const FlushedStream fs;
  constexpr int caps = 4096;
  DecodePlanParams p = bench_plan_params(1);
  const PlanTables tables(p, caps, kBenchBins + kBenchTailBins);

  g_warm = p;
  g_warm.batch = 1;
  const PlanTables warm_tables(g_warm, caps, kBenchBins + kBenchTailBins);
  struct V {
    const char* name;
    void (*launch)(const DecodePlanParams&, cudaStream_t);
    void (*before)(cudaStream_t) = nullptr;
  };
  const V vs[] = {
      {"plan_pdl", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::attn::launch_decode_plan(q, s, true)); }},
      {"plan_nopdl", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::attn::launch_decode_plan(q, s, false)); }},
      {"skel", [](const DecodePlanParams& q, cudaStream_t s) { skel<<<1, 512, 0, s>>>(q.kv_lens, q.tasks, q.batch); }},
      {"skel_bigparams", [](const DecodePlanParams& q, cudaStream_t s) { skel_params<false><<<1, 512, 0, s>>>(q); }},
      {"skel_pdl",
       [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(skel_params<true>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop0", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<0>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop1", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<1>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop2", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<2>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop3", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<3>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop4", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop4_256thr", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4>, dim3(1), dim3(256), 0, s, true, q)); }},
      {"rows_noclose", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 1>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_nototals", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 2>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_late_close", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 4>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_touch", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 8>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_spec", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 64>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_charge32", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 128>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_spec_charge32", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 192>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_lib", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_lib<false>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_lib_touch", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_lib<true>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_entry_init", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 32>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stamped", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4, 16>, dim3(1), dim3(512), 0, s, true, q)); }},
      {"rows_stop4_after_spin", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4>, dim3(1), dim3(512), 0, s, false, q)); },
       [](cudaStream_t s) { spin_kernel<<<1, 32, 0, s>>>(); }},
      {"rows_stop4_code_warm", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4>, dim3(1), dim3(512), 0, s, false, q)); },
       [](cudaStream_t s) { CK(hpc::launch_kernel(rows_stop<4>, dim3(1), dim3(512), 0, s, false, g_warm)); }},
      {"plan_after_spin", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::attn::launch_decode_plan(q, s, false)); },
       [](cudaStream_t s) { spin_kernel<<<1, 32, 0, s>>>(); }},
      {"plan_code_warm", [](const DecodePlanParams& q, cudaStream_t s) { CK(hpc::attn::launch_decode_plan(q, s, false)); },
       [](cudaStream_t s) { CK(hpc::attn::launch_decode_plan(g_warm, s, false)); }},
  };
  {
    double* mhz;
    CK(cudaMalloc(&mhz, 8));
    fs.time([] {}, [&] { clock_kernel<<<1, 32, 0, fs.stream>>>(mhz); });
    double h_mhz;
    CK(cudaMemcpy(&h_mhz, mhz, 8, cudaMemcpyDeviceToHost));
    std::printf("{\"check\": \"sm_clock_after_flush_mhz\", \"value\": %.0f}\n", h_mhz);
  }
  CK(cudaMalloc(&g_stamps, 16 * 8 * 4));
  CK(cudaMemcpyToSymbol(d_stamps, &g_stamps, sizeof(g_stamps)));
  for (int round = 0; round < 2; ++round) {
    for (const V& v : vs) {
      const GraphTiming g = fs.time([&] { if (v.before) v.before(fs.stream); }, [&] { v.launch(p, fs.stream); });
      std::printf("{\"round\": %d, \"case\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"mean_us\": %.3f}\n",
                  round, v.name, g.median_us, g.p10_us, g.p90_us, g.mean_us);
    }
  }
  {  // rows_stamped's last replay (after the flush, as timed): cycles from entry, per warp
    unsigned h_st[16 * 8];
    CK(cudaMemcpy(h_st, g_stamps, sizeof h_st, cudaMemcpyDeviceToHost));
    for (int w = 0; w < 8; ++w) {
      std::printf("{\"stamps_warp\": %d, \"cycles_from_entry\": [", w);
      for (int i = 1; i < 8; ++i) std::printf("%s%u", i > 1 ? ", " : "", h_st[w * 8 + i] - h_st[w * 8]);
      std::printf("], \"steps\": \"lens, total, cut, counts, sums after the barrier, close+totals, pass 3\"}\n");
    }
  }
  // The copies' tables against the library plan's (same arithmetic, so the same bytes).
  auto snapshot = [&](const V& v) { return tables.snapshot(fs.stream, [&] { v.launch(p, fs.stream); }); };
  const std::vector<char> want = snapshot(vs[0]);
  for (const V& v : vs) {
    if (v.before == nullptr && (std::string(v.name).rfind("rows_stop4", 0) == 0 || std::string(v.name) == "rows_late_close" ||
                                 std::string(v.name) == "rows_touch" ||
                                 std::string(v.name).rfind("rows_lib", 0) == 0 || std::string(v.name).rfind("rows_spec", 0) == 0 ||
                                 std::string(v.name) == "rows_charge32"))
      std::printf("{\"check\": \"%s\", \"tables_equal_library\": %s}\n", v.name, snapshot(v) == want ? "true" : "false");
  }
  int counters[8];
  CK(cudaMemcpy(counters, p.counters, sizeof counters, cudaMemcpyDeviceToHost));
  std::printf("{\"check\": \"counters\", \"tasks\": %d, \"combine\": %d, \"budget\": %d, \"tiles\": %d, \"slots\": %d, \"bins\": %d}\n",
              counters[0], counters[1], counters[2], counters[3], counters[4], counters[5]);
  return 0;
}
