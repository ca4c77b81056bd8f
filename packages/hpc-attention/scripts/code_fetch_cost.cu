// What cold instruction fetch costs a one-CTA kernel under the benchmarks' method (twenty-first
// session; NOTES.md: the planner's chain and the decode prologue stall on instruction fetch after the
// L2 flush). One warp runs N straight-line FFMAs (16 bytes of SASS each, 8 independent chains, so
// ~1 per cycle when the code is at hand). Per N: one CUDA graph of [128 MB written flush, event,
// kernel, event] (cold: the flush evicts the code from the L2), and one of [flush, the same kernel
// once, event, kernel, event] (warm: the code was just fetched), replayed, median of the in-graph
// event pair. cold - warm = what fetching N x 16 bytes of code costs at the call's start.
// Status: written and compiled (sm_90a, all 5392 FFMAs kept) in the twenty-first session, not yet
// run: the session's device time ran out. The planner's hot path is ~14 KB of SASS, the decode
// kernel's 73 KB (BF16 TMA, G <= 8).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -o /tmp/cfc packages/hpc-attention/scripts/code_fetch_cost.cu && /tmp/cfc
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "hpc_common/check.h"

#define CK(x) HPC_CUDA_CHECK((x), #x)

__global__ void flush_write(uint4* buf, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 v = buf[i];
    buf[i] = make_uint4(~v.x, ~v.y, ~v.z, ~v.w);
  }
}

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
void run(uint4* buf, size_t flush_bytes, float* out, cudaStream_t st, int sms) {
  for (int warm = 0; warm < 2; ++warm) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    flush_write<<<4 * sms, 512, 0, st>>>(buf, flush_bytes / 16);
    if (warm) straight_line<N><<<1, 32, 0, st>>>(out, 1.0001f, 0.5f);
    CK(cudaEventRecordWithFlags(e0, st, cudaEventRecordExternal));
    straight_line<N><<<1, 32, 0, st>>>(out, 1.0001f, 0.5f);
    CK(cudaEventRecordWithFlags(e1, st, cudaEventRecordExternal));
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<float> t;
    for (int r = 0; r < 60; ++r) {
      CK(cudaGraphLaunch(ge, st));
      CK(cudaStreamSynchronize(st));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 10) t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    std::printf("{\"case\": \"ffma_%d\", \"code_kb\": %.1f, \"code\": \"%s\", \"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f}\n",
                N, N * 16 / 1024.0, warm ? "warm" : "cold", t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10]);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
  }
}

int main() {
  const size_t flush_bytes = size_t(128) << 20;
  uint4* buf;
  float* out;
  CK(cudaMalloc(&buf, flush_bytes));
  CK(cudaMemset(buf, 0, flush_bytes));
  CK(cudaMalloc(&out, 4096));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int round = 0; round < 2; ++round) {
    run<16>(buf, flush_bytes, out, st, sms);
    run<256>(buf, flush_bytes, out, st, sms);
    run<1024>(buf, flush_bytes, out, st, sms);
    run<4096>(buf, flush_bytes, out, st, sms);
  }
  return 0;
}
