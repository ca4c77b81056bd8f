// Top-k weighted reduce of the expert-form Down (moe_down_experts.cuh): out[t] = sum over j = 0..K-1
// of topk_weights[t, j] * y[t * K + j] for the pairs whose expert is local (+ shared[t]), FP32 sums in
// j order, BF16 out. Every output element is written (zeros, or shared, for a token without a local
// expert); a pair's row of y is read only when its expert is local (the other rows were never written).
//
// A thread owns 8 consecutive columns (16 bytes of y per pair) of one token. Before its PDL wait it reads
// the token's ids and weights (final: the Down kernel ahead passed its own wait), after it y and shared.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

constexpr int kReduceThreads = 256;
constexpr int kMaxTopK = 16;

__device__ __forceinline__ void add_bf16x8(float (&s)[8], uint4 v, float w) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[i]));
    s[2 * i] += w * f.x;
    s[2 * i + 1] += w * f.y;
  }
}

__global__ void __launch_bounds__(kReduceThreads) moe_topk_reduce_kernel(const TopkReduceParams p) {
  const int vecs = p.H / 8;
  const int64_t item = int64_t(blockIdx.x) * kReduceThreads + threadIdx.x;
  const bool live = item < int64_t(p.T) * vecs;
  const int t = live ? static_cast<int>(item / vecs) : 0;
  const int c = live ? static_cast<int>(item % vecs) * 8 : 0;

  int local[kMaxTopK];
  float wt[kMaxTopK];
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    local[j] = -1;
    wt[j] = 0.f;
    if (live && j < p.K) {
      local[j] = local_expert(p.topk_ids, p.ids_int64, t * p.K + j, p.expert_start, p.num_local_experts);
      wt[j] = ld_f32(p.topk_weights + int64_t(t) * p.K + j);
    }
  }
  hpc::pdl_wait();  // y (the Down kernel), shared_output, and out's previous readers
  hpc::pdl_launch_dependents();
  if (!live) return;

  float s[8] = {};
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j)
    if (j < p.K && local[j] >= 0)
      add_bf16x8(s, ld_act(static_cast<const __nv_bfloat16*>(p.y) + (int64_t(t) * p.K + j) * p.H + c), wt[j]);
  if (p.shared) {
    const __nv_bfloat16* sh = static_cast<const __nv_bfloat16*>(p.shared) + int64_t(t) * p.shared_stride + c;
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i] += __bfloat162float(sh[i]);
  }
  uint4 o;
  uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(s[2 * i], s[2 * i + 1]);
    ow[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + int64_t(t) * p.out_stride + c) = o;
}

inline cudaError_t launch_moe_topk_reduce(const TopkReduceParams& p, cudaStream_t stream, bool pdl) {
  if (p.K < 1 || p.K > kMaxTopK || p.H % 8) return cudaErrorInvalidValue;
  const int64_t items = int64_t(p.T) * (p.H / 8);
  const dim3 grid(static_cast<unsigned>((items + kReduceThreads - 1) / kReduceThreads));
  return hpc::launch_kernel(moe_topk_reduce_kernel, grid, dim3(kReduceThreads), 0, stream, pdl, p);
}

}  // namespace hpc::moe
