// The benchmarks' timing method for the standalone probe programs of this folder (launch_cost.cu,
// code_fetch_cost.cu): one CUDA graph of [128 MB written flush, before(), event, call(), event],
// replayed 60 times, median / p10 / p90 / mean of the last 50 in-graph event pairs (the event pairs read
// in steps of ~0.22 us on the H200, so the mean resolves differences the median rounds away) -- what
// hpc_common.bench.bench_us measures for a Python call, here without torch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hpc_common/check.h"

#define CK(x) HPC_CUDA_CHECK((x), #x)

// The written flush: every 16 bytes of the buffer read and written back inverted.
__global__ void flush_write(uint4* buf, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 v = buf[i];
    buf[i] = make_uint4(~v.x, ~v.y, ~v.z, ~v.w);
  }
}

struct GraphTiming {
  float median_us, p10_us, p90_us, mean_us;
};

// One CUDA graph of [before(), event, call(), event] captured on `stream` and replayed `replays` times: median / p10 /
// p90 / mean of the event pairs after the first `skip` replays, each divided by `calls_per_pair` (the calls call()
// issues, for a per-call time of a stream of calls).
template <typename Before, typename Call>
GraphTiming time_graph(cudaStream_t stream, Before before, Call call, int replays = 60, int skip = 10,
                       int calls_per_pair = 1) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  before();
  CK(cudaEventRecordWithFlags(e0, stream, cudaEventRecordExternal));
  call();
  CK(cudaEventRecordWithFlags(e1, stream, cudaEventRecordExternal));
  CK(cudaStreamEndCapture(stream, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  std::vector<float> t;
  for (int r = 0; r < replays; ++r) {
    CK(cudaGraphLaunch(ge, stream));
    CK(cudaStreamSynchronize(stream));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= skip) t.push_back(ms * 1000.f / calls_per_pair);
  }
  std::sort(t.begin(), t.end());
  float sum = 0.f;
  for (float x : t) sum += x;
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return {t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10], sum / t.size()};
}

// The flush buffer and stream the probes share.
struct FlushedStream {
  static constexpr size_t kFlushBytes = size_t(128) << 20;
  uint4* buf = nullptr;
  cudaStream_t stream = nullptr;
  int sms = 0;
  FlushedStream() {
    CK(cudaMalloc(&buf, kFlushBytes));
    CK(cudaMemset(buf, 0, kFlushBytes));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  }
  // before() and call() enqueue on `stream` (they are captured, not run, here).
  template <typename Before, typename Call>
  GraphTiming time(Before before, Call call) const {
    return time_graph(
        stream,
        [&] {
          flush_write<<<4 * sms, 512, 0, stream>>>(buf, kFlushBytes / 16);
          before();
        },
        call);
  }
};
