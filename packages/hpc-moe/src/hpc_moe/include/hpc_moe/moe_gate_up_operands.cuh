// Operands of the Gate-Up GEMM (moe_gate_up.cuh): a K stage's A fragments (from the shared-memory
// weight ring), its B fragments (token rows of x / xq read through the routing index) and FP8 scales,
// and the MMAs of one stage with the per-128-K-block FP8 scaling. A stage is 128 bytes of every one
// of the tile's 16 rows along K (two 64-byte groups, four MMA steps): one 128-wide scale block for
// FP8, 64 elements for BF16.
#pragma once

#include <cuda_runtime.h>

#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

struct GateUpStage {
  uint4 a[4];     // A fragments of steps (group 0, step 0), (0, 1), (1, 0), (1, 1)
  uint4 b[2][2];  // B: [n-block][group], words 0-1 step 0, words 2-3 step 1
  float2 ws;      // FP8: gate and up weight scale of this K block
  float xs[2][2];  // FP8: activation scale of the lane's two C columns per n-block
};

template <Format F>
struct GateUpWarp {
  const GateUpParams& p;
  const char* brow[2];    // x row of the lane's B column per n-block
  const float* xsrow[2][2];  // FP8: xs row of the lane's C columns
  const float* wsrow;     // FP8: w13s of the tile: [kb][2]
  int lane, nb;

  // B operands (and FP8 scales) of K stage s into st; st.a is filled from shared memory at use.
  __device__ __forceinline__ void load_b(GateUpStage& st, int s) const {
    const int q = lane & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (j < nb) {
#pragma unroll
        for (int g = 0; g < 2; ++g) st.b[j][g] = ld_act(brow[j] + s * 128 + g * 64 + q * 16);
      }
    }
    if constexpr (F == Format::kFp8) {
      st.ws = ld_f32x2(wsrow + 2 * s);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (j < nb) {
          st.xs[j][0] = ld_f32(xsrow[j][0] + s * p.xs_stride_kb);
          st.xs[j][1] = ld_f32(xsrow[j][1] + s * p.xs_stride_kb);
        }
      }
    }
  }

  __device__ __forceinline__ void compute(const GateUpStage& st, float (&acc)[2][4]) const {
    float part[2][4];
    float(&d)[2][4] = (F == Format::kFp8) ? part : acc;
    if constexpr (F == Format::kFp8) {
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) part[j][c] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 a = st.a[i];
      const int g = i >> 1, step = i & 1;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (j < nb) {
          const uint32_t b0 = step ? st.b[j][g].z : st.b[j][g].x;
          const uint32_t b1 = step ? st.b[j][g].w : st.b[j][g].y;
          if constexpr (F == Format::kFp8) {
            mma_e4m3(d[j], a.x, a.y, a.z, a.w, b0, b1);
          } else {
            mma_bf16(d[j], a.x, a.y, a.z, a.w, b0, b1);
          }
        }
      }
    }
    if constexpr (F == Format::kFp8) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        acc[j][0] += part[j][0] * (st.ws.x * st.xs[j][0]);  // gate row, column 2q
        acc[j][1] += part[j][1] * (st.ws.x * st.xs[j][1]);  // gate row, column 2q + 1
        acc[j][2] += part[j][2] * (st.ws.y * st.xs[j][0]);  // up row, column 2q
        acc[j][3] += part[j][3] * (st.ws.y * st.xs[j][1]);
      }
    }
  }
};

}  // namespace hpc::moe
