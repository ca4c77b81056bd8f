// What cold instruction fetch costs a one-CTA kernel under the benchmarks' method (twenty-first
// session; NOTES.md: the planner's chain and the decode prologue stall on instruction fetch after the
// L2 flush). One warp runs N straight-line FFMAs (16 bytes of SASS each, 8 independent chains, so
// ~1 per cycle when the code is at hand). Per N: one CUDA graph of [128 MB written flush, event,
// kernel, event] (cold: the flush evicts the code from the L2), and one of [flush, the same kernel
// once, event, kernel, event] (warm: the code was just fetched), replayed, median of the in-graph
// event pair. cold - warm = what fetching N x 16 bytes of code costs at the call's start.
// Result (twenty-second session, H200, attention_code_fetch_cost.*): cold and warm read the same within
// 0.1-0.16 us from 0.25 to 64 KB of code, so fetching straight-line code after the flush costs nothing
// measurable for straight-line code; plan_probe.cu found the same for the planner's branching code (a
// batch-1 plan of the same kernel before the timed one read as a spin kernel did).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -o /tmp/cfc packages/hpc-attention/scripts/code_fetch_cost.cu && /tmp/cfc
#include <cuda_runtime.h>

#include <cstdio>

#include "graph_timing.cuh"

template <int N>
__global__ void straight_line(float* out, float b, float c) {
  float a[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) a[k] = threadIdx.x + k;
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(a[i & 7]) : "f"(b), "f"(c));
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += a[k];
  if (s == 1234.5f) out[threadIdx.x] = s;  // never taken: keeps the chains
}

template <int N>
void run(const FlushedStream& fs, float* out) {
  for (int warm = 0; warm < 2; ++warm) {
    auto launch = [&] { straight_line<N><<<1, 32, 0, fs.stream>>>(out, 1.0001f, 0.5f); };
    const GraphTiming t = fs.time([&] { if (warm) launch(); }, launch);
    std::printf("{\"case\": \"ffma_%d\", \"code_kb\": %.1f, \"code\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f}\n",
                N, N * 16 / 1024.0, warm ? "warm" : "cold", t.median_us, t.p10_us, t.p90_us);
  }
}

int main() {
  const FlushedStream fs;
  float* out;
  CK(cudaMalloc(&out, 4096));
  for (int round = 0; round < 2; ++round) {
    run<16>(fs, out);
    run<256>(fs, out);
    run<1024>(fs, out);
    run<4096>(fs, out);
  }
  return 0;
}
