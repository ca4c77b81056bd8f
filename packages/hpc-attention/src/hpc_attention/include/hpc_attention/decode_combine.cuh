// Combine kernel of the decode attention: merges the partial outputs of the items (request,
// KV head) that the plan split over several CTAs, with the exact global softmax weights,
// and writes zeros for empty requests. Items that fit one CTA were written by the decode
// kernel directly and do not appear here.
//
// One work unit = (combine entry, query row of the group); units are strided over a fixed
// grid so that the launch shape does not depend on the lengths (CUDA-graph safe). In a unit,
// warp w merges parts w, w + 8, ... with a running max, then warp 0 merges the 8 warps in a
// fixed order: results are bitwise reproducible.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {


__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeCombineParams p) {
  __shared__ float s_m[8], s_l[8];
  __shared__ float4 s_acc[8][32];
  hpc::pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = p.group;
  const int units = p.counters[1] * G;
  const float kNegInf = -__int_as_float(0x7f800000);
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int4 e = p.combine[u / G];
    const int row = u - (u / G) * G;
    const int b = e.x / p.num_kv_heads, h = e.x - b * p.num_kv_heads;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + b * p.out_stride_b + (h * G + row) * p.out_stride_h;
    const int parts = e.z;
    if (parts == 0) {  // empty request: softmax over no keys, defined as 0
      if (warp == 0) reinterpret_cast<uint2*>(out)[lane] = make_uint2(0, 0);
      continue;
    }
    float m = kNegInf, l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int q = warp; q < parts; q += 8) {
      const long long sr = static_cast<long long>(e.y + q) * G + row;
      const float lse = p.partial_lse[sr];
      const float4 v = reinterpret_cast<const float4*>(p.partial_o + sr * 128)[lane];
      const float mn = fmaxf(m, lse);
      const float a = exp2f(m - mn), w = exp2f(lse - mn);
      l = l * a + w;
      acc.x = acc.x * a + w * v.x;
      acc.y = acc.y * a + w * v.y;
      acc.z = acc.z * a + w * v.z;
      acc.w = acc.w * a + w * v.w;
      m = mn;
    }
    s_acc[warp][lane] = acc;
    if (lane == 0) {
      s_m[warp] = m;
      s_l[warp] = l;
    }
    __syncthreads();
    if (warp == 0) {
      float mx = kNegInf;
#pragma unroll
      for (int w = 0; w < 8; ++w) mx = fmaxf(mx, s_m[w]);
      float L = 0.f;
      float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        if (s_l[w] == 0.f) continue;  // warp saw no part
        const float f = exp2f(s_m[w] - mx);
        const float4 v = s_acc[w][lane];
        L += f * s_l[w];
        r.x += f * v.x;
        r.y += f * v.y;
        r.z += f * v.z;
        r.w += f * v.w;
      }
      const float inv = 1.f / L;
      __nv_bfloat162 lo = __floats2bfloat162_rn(r.x * inv, r.y * inv);
      __nv_bfloat162 hi = __floats2bfloat162_rn(r.z * inv, r.w * inv);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      reinterpret_cast<uint2*>(out)[lane] = packed;
    }
    __syncthreads();
  }
}

inline cudaError_t launch_decode_combine(const DecodeCombineParams& p, int num_ctas, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(decode_combine_kernel, dim3(num_ctas), dim3(kCombineThreads), 0, stream, pdl, p);
}

}  // namespace hpc::attn
