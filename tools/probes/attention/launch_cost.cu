// What a one-CTA kernel costs under the benchmarks' method before it does any work (for the planner's
// <= 5 us target). One CUDA graph of [a 128 MB written flush, event,
// kernel, event] per variant, replayed; median of the in-graph event pair, as hpc_common.bench times
// every call. Variants: an empty kernel of 32 / 512 threads, the same with the planner's 17 KB of
// static shared memory, with 48 / 200 KB of dynamic shared memory, and launched with the programmatic
// stream serialization attribute (PDL), as the library launches its kernels.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I packages/hpc-common/src/hpc_common/include \
//        -I packages/hpc-attention/src/hpc_attention/include -o /tmp/lc tools/probes/attention/launch_cost.cu && /tmp/lc
#include <cuda_runtime.h>

#include <cstdio>

#include "graph_timing.cuh"

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
  const FlushedStream fs;
  CK(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
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
      const GraphTiming t = fs.time([] {}, [&] {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1);
        cfg.blockDim = dim3(v.threads);
        cfg.dynamicSmemBytes = v.dyn_smem;
        cfg.stream = fs.stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = v.pdl ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, v.kernel, static_cast<int*>(nullptr)));
      });
      std::printf("{\"round\": %d, \"case\": \"%s\", \"threads\": %d, \"dynamic_smem\": %d, \"pdl\": %s, \"median_us\": %.2f, "
                  "\"p10_us\": %.2f, \"p90_us\": %.2f}\n",
                  round, v.name, v.threads, v.dyn_smem, v.pdl ? "true" : "false", t.median_us, t.p10_us, t.p90_us);
    }
  }
  return 0;
}
