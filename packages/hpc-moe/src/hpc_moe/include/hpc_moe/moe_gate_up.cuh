// Gate-Up GEMM of the fused MoE with SiLU(gate) * up: inter[p] = silu(W13g[e] x[t]) * (W13u[e] x[t])
// for every pair p = (t, j) routed to a local expert e. DESIGN.md, "Pipeline" step 2.
//
// Persistent grid: every CTA builds the routing index in shared memory and enumerates the same
// tasks (active local expert ascending, w13 tile of 8 gate + 8 up rows); CTA c takes tasks c,
// c + gridDim.x, ... A task is one 16-row tile times all the expert's pairs, 16 columns at a time:
// the 4 warps split K, each streaming its contiguous part of the tile (16-byte loads, one per lane
// per MMA step, in the prepared fragment order) through a register ring kStages deep, with the
// token rows (B) read straight from x through the index. The warps' partial sums meet in shared
// memory and are added in warp order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

// One stage is 128 bytes of every row along K (two 64-byte groups, four MMA steps): one 128-wide
// scale block for FP8, 64 elements for BF16. Three stages in flight per warp: 6 KB per warp,
// 24 KB per CTA.
constexpr int kGateUpStages = 3;

struct GateUpStage {
  uint4 a[4];     // A fragments of steps (group 0, step 0), (0, 1), (1, 0), (1, 1)
  uint4 b[2][2];  // B: [n-block][group], words 0-1 step 0, words 2-3 step 1
  float2 ws;      // FP8: gate and up weight scale of this K block
  float xs[2][2];  // FP8: activation scale of the lane's two C columns per n-block
};

template <Format F>
struct GateUpWarp {
  const GateUpParams& p;
  const char* tile;       // the task's w13 tile (16 rows, fragment order)
  const char* brow[2];    // x row of the lane's B column per n-block
  const float* xsrow[2][2];  // FP8: xs row of the lane's C columns
  const float* wsrow;     // FP8: w13s of the tile: [kb][2]
  int lane, nb;
  uint64_t policy;

  __device__ __forceinline__ void load(GateUpStage& st, int s) const {
    const char* a = tile + s * 2048 + lane * 16;
#pragma unroll
    for (int i = 0; i < 4; ++i) st.a[i] = ld_weight(a + i * 512, policy);
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

  // Stages [s0, s1) through the register ring.
  __device__ __forceinline__ void run(int s0, int s1, float (&acc)[2][4]) const {
    GateUpStage ring[kGateUpStages];
#pragma unroll
    for (int d = 0; d < kGateUpStages; ++d)
      if (s0 + d < s1) load(ring[d], s0 + d);
    for (int s = s0; s < s1; s += kGateUpStages) {
#pragma unroll
      for (int d = 0; d < kGateUpStages; ++d) {
        if (s + d < s1) {
          compute(ring[d], acc);
          if (s + d + kGateUpStages < s1) load(ring[d], s + d + kGateUpStages);
        }
      }
    }
  }
};

template <Format F>
__global__ void __launch_bounds__(kThreads, gate_up_ctas_per_sm(F)) moe_gate_up_kernel(const GateUpParams p) {
  extern __shared__ __align__(16) int smem[];
  const int E = p.num_local_experts;
  const int num_pairs = p.T * p.K;
  const SmemIndex x = SmemIndex::carve(smem, E);
  float* red = reinterpret_cast<float*>(smem + ((SmemIndex::words(E, num_pairs) + 3) & ~3));  // [4][8][32]
  const int tiles = p.I / 8;

  if (p.ids_before_wait) {
    build_index(x, p.topk_ids, p.ids_int64, 0, num_pairs, p.expert_start, E, tiles);
    hpc::pdl_wait();
  } else {
    hpc::pdl_wait();
    build_index(x, p.topk_ids, p.ids_int64, 0, num_pairs, p.expert_start, E, tiles);
  }
  // The Down kernel may start now: it reads only topk_ids before its own wait.
  hpc::pdl_launch_dependents();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int elem = F == Format::kFp8 ? 1 : 2;
  const int num_stages = p.H * elem / 128;
  const int s0 = warp * num_stages / 4, s1 = (warp + 1) * num_stages / 4;
  const int64_t tile_bytes = int64_t(16) * p.H * elem;
  const int kb_count = p.H / 128;
  const uint64_t policy = evict_first_policy();
  const int total = x.tstart[E];

  for (int task = blockIdx.x; task < total; task += gridDim.x) {
    const int e = task_expert(x, E, task);
    const int cnt = x.cnt[e];
    const int t = task - x.tstart[e];
    for (int c0 = 0; c0 < cnt; c0 += kChunkPairs) {
      const int* pairs = x.list + x.start[e] + c0;
      const int n = min(kChunkPairs, cnt - c0);

      GateUpWarp<F> w{p};
      w.tile = static_cast<const char*>(p.w13) + (int64_t(e) * tiles + t) * tile_bytes;
      w.lane = lane;
      w.nb = n > 8 ? 2 : 1;
      w.policy = policy;
      const int g = lane >> 2, q = lane & 3;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int tok = pairs[min(j * 8 + g, n - 1)] / p.K;  // a column past n repeats a valid row
        w.brow[j] = static_cast<const char*>(p.x) + tok * p.x_row_bytes;
        if constexpr (F == Format::kFp8) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int tk = pairs[min(j * 8 + 2 * q + h, n - 1)] / p.K;
            w.xsrow[j][h] = p.xs + tk * p.xs_stride_t;
          }
        }
      }
      if constexpr (F == Format::kFp8) w.wsrow = p.w13s + (int64_t(e) * tiles + t) * kb_count * 2;

      float acc[2][4] = {};
      w.run(s0, s1, acc);

#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) red[(warp * 8 + j * 4 + v) * 32 + lane] = acc[j][v];
      __syncthreads();
      {  // thread -> (n-block, column parity, lane of the C fragment)
        const int j = threadIdx.x >> 6, h = (threadIdx.x >> 5) & 1, l = threadIdx.x & 31;
        const int col = j * 8 + 2 * (l & 3) + h;
        if (col < n) {
          float gate = 0.f, up = 0.f;
#pragma unroll
          for (int ww = 0; ww < 4; ++ww) {
            gate += red[(ww * 8 + j * 4 + h) * 32 + l];
            up += red[(ww * 8 + j * 4 + 2 + h) * 32 + l];
          }
          const int row = 8 * t + (l >> 2);
          static_cast<__nv_bfloat16*>(p.inter)[int64_t(pairs[col]) * p.I + row] =
              __float2bfloat16_rn(silu_mul(gate, up));
        }
      }
      __syncthreads();
    }
  }
}

inline size_t gate_up_smem_bytes_impl(int num_pairs, int E) {
  const size_t words = ((size_t(5) * E + 3 + num_pairs) + 3) & ~size_t(3);
  return words * 4 + 4 * 8 * 32 * sizeof(float);
}

template <Format F>
cudaError_t launch_moe_gate_up(const GateUpParams& p, int grid, cudaStream_t stream, bool pdl) {
  const size_t smem = gate_up_smem_bytes_impl(p.T * p.K, p.num_local_experts);
  return hpc::launch_kernel(moe_gate_up_kernel<F>, dim3(grid), dim3(kThreads), smem, stream, pdl, p);
}

}  // namespace hpc::moe
