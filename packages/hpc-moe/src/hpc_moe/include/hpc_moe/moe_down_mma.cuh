// The MMAs of one Down K stage, shared by both Down forms (moe_down.cuh, moe_down_experts.cuh): 64
// elements of I (two 32-element groups, four BF16 m16n8k16 steps) of a 16-row w2 tile (A) times up
// to 16 pair columns of the intermediate (B, two 8-column blocks). FP8 weights are converted to BF16
// in registers (exact) and each stage's sums are scaled by its 128-wide block scale before they are
// added, so both forms compute every output column with the same operations in the same order.
#pragma once

#include <cuda_runtime.h>

#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

struct DownStage {
  uint4 a[4];     // BF16: steps (group 0, step 0), (0, 1), (1, 0), (1, 1); FP8: a[0], a[1] = groups 0, 1
  uint4 b[2][2];  // [n-block][group]
  float sc;       // FP8: the w2 block scale of this stage's 128-wide block of I
};

template <Format F>
__device__ __forceinline__ void down_compute(const DownStage& st, int nb, float (&acc)[2][4]) {
  float part[2][4] = {};
  float(&d)[2][4] = (F == Format::kFp8) ? part : acc;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int g = i >> 1, step = i & 1;
    uint32_t a0, a1, a2, a3;
    if constexpr (F == Format::kFp8) {
      const uint4 v = st.a[g];
      const uint32_t lo = step ? v.z : v.x, hi = step ? v.w : v.y;
      a0 = e4m3x2_to_bf16x2(lo & 0xffffu);
      a1 = e4m3x2_to_bf16x2(lo >> 16);
      a2 = e4m3x2_to_bf16x2(hi & 0xffffu);
      a3 = e4m3x2_to_bf16x2(hi >> 16);
    } else {
      a0 = st.a[i].x, a1 = st.a[i].y, a2 = st.a[i].z, a3 = st.a[i].w;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (j < nb) {
        const uint32_t b0 = step ? st.b[j][g].z : st.b[j][g].x;
        const uint32_t b1 = step ? st.b[j][g].w : st.b[j][g].y;
        mma_bf16(d[j], a0, a1, a2, a3, b0, b1);
      }
  }
  if constexpr (F == Format::kFp8) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[j][v] += part[j][v] * st.sc;
  }
}

}  // namespace hpc::moe
