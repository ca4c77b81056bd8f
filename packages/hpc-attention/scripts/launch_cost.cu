// What a one-CTA kernel costs under the benchmarks' method before it does any work (twenty-first
// session, the planner's <= 5 us target: NOTES.md). One CUDA graph of [a 128 MB written flush, event,
// kernel, event] per variant, replayed; median of the in-graph event pair, as hpc_common.bench times
// every call. Variants: an empty kernel of 32 / 512 threads, the same with the planner's 17 KB of
// static shared memory, with 48 / 200 KB of dynamic shared memory, and launched with the programmatic
// stream serialization attribute (PDL), as the library launches its kernels.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -o /tmp/lc packages/hpc-attention/scripts/launch_cost.cu && /tmp/lc
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

__global__ void empty_kernel(int* flag) {
  if (flag != nullptr && threadIdx.x == 1023) *flag = 1;  // never taken: keeps the parameter
}

__global__ void static_smem_kernel(int* flag) {
  __shared__ int s[17152 / 4];  // the planner's static shared memory
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (flag != nullptr && s[(threadIdx.x + 1) % blockDim.x] == -1) *flag = 1;
}

__global__ void dynamic_smem_kernel(int* flag) {
  extern __shared__ int d[];
  d[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (flag != nullptr && d[(threadIdx.x + 1) % blockDim.x] == -1) *flag = 1;
}

struct Variant {
  const char* name;
  void (*kernel)(int*);
  int threads;
  int dyn_smem;
  bool pdl;
};

int main() {
  const size_t flush_bytes = size_t(128) << 20;
  uint4* buf;
  CK(cudaMalloc(&buf, flush_bytes));
  CK(cudaMemset(buf, 0, flush_bytes));
  CK(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const Variant vs[] = {
      {"empty_32", empty_kernel, 32, 0, false},
      {"empty_512", empty_kernel, 512, 0, false},
      {"static_smem_17k_512", static_smem_kernel, 512, 0, false},
      {"dynamic_smem_48k_512", dynamic_smem_kernel, 512, 48 << 10, false},
      {"dynamic_smem_200k_512", dynamic_smem_kernel, 512, 200 << 10, false},
      {"empty_512_pdl", empty_kernel, 512, 0, true},
      {"static_smem_17k_512_pdl", static_smem_kernel, 512, 0, true},
  };
  for (int round = 0; round < 2; ++round) {
    for (const Variant& v : vs) {
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
      flush_write<<<4 * sms, 512, 0, st>>>(buf, flush_bytes / 16);
      CK(cudaEventRecordWithFlags(e0, st, cudaEventRecordExternal));
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1);
      cfg.blockDim = dim3(v.threads);
      cfg.dynamicSmemBytes = v.dyn_smem;
      cfg.stream = st;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = v.pdl ? 1 : 0;
      CK(cudaLaunchKernelEx(&cfg, v.kernel, static_cast<int*>(nullptr)));
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
      std::printf("{\"round\": %d, \"case\": \"%s\", \"threads\": %d, \"dynamic_smem\": %d, \"pdl\": %s, \"median_us\": %.2f, "
                  "\"p10_us\": %.2f, \"p90_us\": %.2f}\n",
                  round, v.name, v.threads, v.dyn_smem, v.pdl ? "true" : "false", t[t.size() / 2], t[t.size() / 10],
                  t[t.size() * 9 / 10]);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
    }
  }
  return 0;
}
