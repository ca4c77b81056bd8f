// Down GEMM of the fused MoE with the top-k weighted reduce and the shared-expert add:
// out[t] = sum_j w[t, j] * W2[e_j] inter[(t, j)] (+ shared[t]), BF16 out. DESIGN.md, step 3.
//
// A CTA owns a 16-row tile of H and a chunk of tokens. Before its PDL wait it builds the chunk's
// routing index in shared memory (topk_ids is final: the Gate-Up kernel ahead passed its own wait)
// and prefetches its w2 tile of every active expert into L2, so the Down weights stream while
// Gate-Up runs. After the wait warp w takes the chunk's active experts w, w + 4, ...: an MMA over
// the expert's pairs (<= 16 columns per pass, K = I through a register ring), times the pair's
// top-k weight, into y[pair][16] in shared memory. Each pair has its own row of y, so no atomics;
// then out[t] sums y over j = 0..K-1 in order (bitwise deterministic, duplicates included) and
// every row of the chunk is written, tokens without a local expert included.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

// One stage: 64 elements of I (two 32-element groups, four BF16 MMA steps).
constexpr int kDownStages = 3;

struct DownStage {
  uint4 a[4];     // BF16: steps (group 0, step 0), (0, 1), (1, 0), (1, 1); FP8: a[0], a[1] = groups 0, 1
  uint4 b[2][2];  // [n-block][group]
};

template <Format F>
struct DownWarp {
  const char* tile;
  const char* brow[2];
  int lane, nb;
  uint64_t policy;

  __device__ __forceinline__ void load(DownStage& st, int s) const {
    if constexpr (F == Format::kFp8) {
      const char* a = tile + s * 1024 + lane * 16;
      st.a[0] = ld_weight(a, policy);
      st.a[1] = ld_weight(a + 512, policy);
    } else {
      const char* a = tile + s * 2048 + lane * 16;
#pragma unroll
      for (int i = 0; i < 4; ++i) st.a[i] = ld_weight(a + i * 512, policy);
    }
    const int q = lane & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (j < nb) {
#pragma unroll
        for (int g = 0; g < 2; ++g) st.b[j][g] = ld_act(brow[j] + s * 128 + g * 64 + q * 16);
      }
  }

  __device__ __forceinline__ void compute(const DownStage& st, float (&d)[2][4]) const {
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
  }
};

template <Format F>
__global__ void __launch_bounds__(kThreads) moe_down_kernel(const DownParams p) {
  extern __shared__ __align__(16) int smem[];
  const int E = p.num_local_experts;
  const int u = blockIdx.y;
  const int t0 = blockIdx.x * p.chunk_tokens;
  const int nt = min(p.chunk_tokens, p.T - t0);
  const int np = nt * p.K, p0 = t0 * p.K;
  const SmemIndex x = SmemIndex::carve(smem, E);
  float* y = reinterpret_cast<float*>(smem + ((SmemIndex::words(E, np) + 3) & ~3));  // [np][16]

  build_index(x, p.topk_ids, p.ids_int64, p0, np, p.expert_start, E, 0);
  const int elem = F == Format::kFp8 ? 1 : 2;
  const int64_t tile_bytes = int64_t(16) * p.I * elem;
  const int h_tiles = p.H / 16;
  const int nact = x.active_n[0];
  for (int i = threadIdx.x; i < nact; i += kThreads)
    prefetch_l2(static_cast<const char*>(p.w2) + (int64_t(x.active[i]) * h_tiles + u) * tile_bytes,
                static_cast<uint32_t>(tile_bytes));
  for (int i = threadIdx.x; i < np * 16; i += kThreads) y[i] = 0.f;
  hpc::pdl_wait();  // inter (Gate-Up), shared_output and out's previous readers are done
  hpc::pdl_launch_dependents();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int num_stages = p.I / 64;
  const uint64_t policy = evict_first_policy();
  const int i_blocks = (p.I + 127) / 128;
  for (int ai = warp; ai < nact; ai += 4) {
    const int e = x.active[ai];
    const int cnt = x.cnt[e];
    const float* scale = F == Format::kFp8 ? p.w2s + (int64_t(e) * (p.H / 128) + u / 8) * i_blocks : nullptr;
    for (int c0 = 0; c0 < cnt; c0 += kChunkPairs) {
      const int* pairs = x.list + x.start[e] + c0;
      const int n = min(kChunkPairs, cnt - c0);
      DownWarp<F> w;
      w.tile = static_cast<const char*>(p.w2) + (int64_t(e) * h_tiles + u) * tile_bytes;
      w.lane = lane;
      w.nb = n > 8 ? 2 : 1;
      w.policy = policy;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        w.brow[j] = static_cast<const char*>(p.inter) + int64_t(p0 + pairs[min(j * 8 + g, n - 1)]) * p.I * 2;

      float acc[2][4] = {};
      DownStage ring[kDownStages];
#pragma unroll
      for (int d = 0; d < kDownStages; ++d)
        if (d < num_stages) w.load(ring[d], d);
      for (int s = 0; s < num_stages; s += kDownStages) {
#pragma unroll
        for (int d = 0; d < kDownStages; ++d) {
          if (s + d < num_stages) {
            if constexpr (F == Format::kFp8) {
              float part[2][4] = {};
              w.compute(ring[d], part);
              const float sc = ld_f32(scale + (s + d) / 2);  // 128-wide I block of this stage
#pragma unroll
              for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[j][v] += part[j][v] * sc;
            } else {
              w.compute(ring[d], acc);
            }
            if (s + d + kDownStages < num_stages) w.load(ring[d], s + d + kDownStages);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = j * 8 + 2 * q + h;
          if (col < n) {
            const int pl = pairs[col];
            const float wt = ld_f32(p.topk_weights + p0 + pl);
            y[pl * 16 + g] = wt * acc[j][h];
            y[pl * 16 + g + 8] = wt * acc[j][2 + h];
          }
        }
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < nt * 16; i += kThreads) {
    const int tl = i >> 4, r = i & 15;
    float s = 0.f;
    for (int j = 0; j < p.K; ++j) s += y[(tl * p.K + j) * 16 + r];
    const int64_t t = t0 + tl;
    const int col = u * 16 + r;
    if (p.shared) s += __bfloat162float(static_cast<const __nv_bfloat16*>(p.shared)[t * p.shared_stride + col]);
    static_cast<__nv_bfloat16*>(p.out)[t * p.out_stride + col] = __float2bfloat16_rn(s);
  }
}

inline size_t down_smem_bytes_impl(int num_pairs, int E) {
  const size_t words = ((size_t(5) * E + 3 + num_pairs) + 3) & ~size_t(3);
  return words * 4 + size_t(num_pairs) * 16 * sizeof(float);
}

template <Format F>
cudaError_t launch_moe_down(const DownParams& p, cudaStream_t stream, bool pdl) {
  const int chunk_tokens = p.chunk_tokens;
  // Chunks fastest: the CTAs of one w2 tile run together and share its L2 lines (one HBM read).
  const dim3 grid((p.T + chunk_tokens - 1) / chunk_tokens, p.H / 16);
  const size_t smem = down_smem_bytes_impl(chunk_tokens * p.K, p.num_local_experts);
  return hpc::launch_kernel(moe_down_kernel<F>, grid, dim3(kThreads), smem, stream, pdl, p);
}

}  // namespace hpc::moe
