// Runs decode_plan_kernel (the real source, decode_plan.cuh) on the host for the CPU test
// tests/attention/test_planner_emulated.py: one fiber (ucontext) per thread of the block,
// switched only at barriers and warp collectives, which are emulated (cuda_runtime.h here).
// A grid of several CTAs (plan_ctas) runs one CTA after another, the last first, each with its
// shared memory refilled with garbage: a CTA that relied on another's writes or shared state, or
// left its share of the tables unwritten, gives tables that differ from the twin's.
// Reads cases from stdin (a line of parameters, a line of lengths), prints the tables.
// The page table, when a case has one, is pt_val(b, j); the test computes the same ids.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <iostream>
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __restrict__
#include "hpc_attention/decode_plan.cuh"

namespace emu {
Fiber* cur;
dim3 block;
dim3 grid;
uint3_ cta;
unsigned long long xbuf[kMaxThreads];
static Fiber fibers[kMaxThreads];
static ucontext_t sched;
static int nthreads;
static int bar_count;
static unsigned bar_gen;
static int wcount[32];
static unsigned wgen[32];
static unsigned long long progress;
void yield() { swapcontext(&cur->ctx, &sched); }
void block_barrier() {
  ++progress;
  unsigned g = bar_gen;
  if (++bar_count == nthreads) { bar_count = 0; ++bar_gen; } else { while (bar_gen == g) yield(); ++progress; }
}
// bar.sync id, count: released when `count` threads have arrived (ids 1..15; 0 is __syncthreads).
static int nbar_count[16];
static unsigned nbar_gen[16];
void named_barrier(int id, int count) {
  ++progress;
  unsigned g = nbar_gen[id];
  if (++nbar_count[id] == count) { nbar_count[id] = 0; ++nbar_gen[id]; } else { while (nbar_gen[id] == g) yield(); ++progress; }
}
void named_barrier_arrive(int id, int count) {
  ++progress;
  if (++nbar_count[id] == count) { nbar_count[id] = 0; ++nbar_gen[id]; }
}
void warp_barrier() {
  ++progress;
  int w = cur->tid.x >> 5;
  unsigned g = wgen[w];
  if (++wcount[w] == 32) { wcount[w] = 0; ++wgen[w]; } else { while (wgen[w] == g) yield(); ++progress; }
}
static const hpc::attn::DecodePlanParams* gp;
static void entry() { hpc::attn::plan_kernel_for(*gp)(*gp); cur->done = true; ++progress; }
void launch_cta(const hpc::attn::DecodePlanParams& p, int threads) {
  gp = &p; nthreads = threads; block = dim3(threads); bar_count = 0;
  for (int w = 0; w < 32; ++w) wcount[w] = 0;
  for (int i = 0; i < 16; ++i) nbar_count[i] = 0;
  for (int t = 0; t < threads; ++t) {
    Fiber& f = fibers[t];
    f.tid = {unsigned(t), 0, 0}; f.done = false;
    if (f.stack.empty()) f.stack.resize(1 << 16);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data(); f.ctx.uc_stack.ss_size = f.stack.size(); f.ctx.uc_link = &sched;
    makecontext(&f.ctx, entry, 0);
  }
  while (true) {
    bool all = true; unsigned long long before = progress;
    for (int t = 0; t < threads; ++t) {
      if (fibers[t].done) continue;
      all = false; cur = &fibers[t]; swapcontext(&sched, &fibers[t].ctx);
    }
    if (all) break;
    if (progress == before) {  // a pass in which no thread reached or left a barrier
      fprintf(stderr, "deadlock: a barrier or warp collective that not every thread reaches\n");
      exit(3);
    }
  }
}
void launch(const hpc::attn::DecodePlanParams& p, int threads, int ctas) {
  grid = dim3(ctas);
  for (int c = ctas - 1; c >= 0; --c) {
    cta = {unsigned(c), 0, 0};
    std::memset(&hpc::attn::plan_shared(), 0x5b, sizeof(hpc::attn::PlanShared));
    launch_cta(p, threads);
  }
}
}  // namespace emu

static int pt_val(long long b, long long j) { return int((b * 7919 + j * 104729 + 13) % (1 << 20)) - 5; }

int main() {
  using namespace hpc::attn;
  int B;
  while (std::cin >> B) {
    int hkv, C, floor_, splits, max_len, cost, pct, tbin, maxtail, page, head_major, cut_to_heads, cost_cap;
    std::cin >> hkv >> C >> floor_ >> splits >> max_len >> cost >> pct >> tbin >> maxtail >> page >> head_major >>
        cut_to_heads >> cost_cap;
    std::vector<int> lens(B);
    for (auto& x : lens) std::cin >> x;
    const int nbins = C + maxtail;
    const long long N = (long long)B * hkv;
    const long long cap_tasks = splits > 0 ? N * splits + 1 : N + nbins + 1;
    std::vector<int4> tasks(cap_tasks + 16, int4{-7, -7, -7, -7}), combine(N + nbins + 16, int4{-7, -7, -7, -7});
    std::vector<int4> bin_first(nbins + 1, int4{-7, -7, -7, -7});
    std::vector<int> bin_start(nbins + 2, -7), counters(8, -7), first_page(nbins + 1, -7);
    std::vector<int2> slot_meta(cap_tasks + 2 * nbins + 16, int2{-7, -7});
    const long long stride = (max_len + 63) / 64 * 64 / (page ? page : 1) + 3;
    std::vector<int> pt;
    DecodePlanParams p{};
    p.kv_lens = lens.data(); p.batch = B; p.num_kv_heads = hkv; p.num_bins = C; p.min_tiles = floor_;
    p.static_splits = splits; p.max_len = max_len; p.task_cost = cost; p.cost_cap = cost_cap; p.tail_percent = pct; p.tail_bin = tbin;
    p.max_tail_bins = maxtail; p.tasks = tasks.data(); p.bin_start = bin_start.data(); p.bin_first = bin_first.data();
    p.combine = combine.data(); p.counters = counters.data(); p.slot_meta = slot_meta.data();
    if (page) {
      pt.resize(B * stride);
      for (long long b = 0; b < B; ++b) for (long long j = 0; j < stride; ++j) pt[b * stride + j] = pt_val(b, j);
      p.page_table = pt.data(); p.page_table_stride = stride; p.page_size_log2 = __builtin_ctz(page);
      p.bin_first_page = first_page.data();
    }
    set_line_order(p, head_major != 0, cut_to_heads != 0);
    emu::launch(p, kPlanThreads, plan_ctas(p));
    const int nt = counters[0], nc = counters[1], ns = counters[4];
    printf("counters"); for (int v : counters) printf(" %d", v); printf("\n");
    printf("bin_start"); for (int c = 0; c <= nbins; ++c) printf(" %d", bin_start[c]); printf("\n");
    printf("tasks"); for (int i = 0; i < nt; ++i) printf(" %d %d %d %d", tasks[i].x, tasks[i].y, tasks[i].z, tasks[i].w); printf("\n");
    printf("combine"); for (int i = 0; i < nc; ++i) printf(" %d %d %d %d", combine[i].x, combine[i].y, combine[i].z, combine[i].w); printf("\n");
    printf("slot_meta"); for (int i = 0; i < ns; ++i) printf(" %d %d", slot_meta[i].x, slot_meta[i].y); printf("\n");
    printf("bin_first"); for (int c = 0; c < nbins; ++c) printf(" %d %d %d %d", bin_first[c].x, bin_first[c].y, bin_first[c].z, bin_first[c].w); printf("\n");
    printf("first_page"); for (int c = 0; c < nbins; ++c) printf(" %d", first_page[c]); printf("\n");
    fflush(stdout);
  }
}
