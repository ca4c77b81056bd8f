// Down GEMM of the fused MoE with the top-k weighted reduce and the shared-expert add:
// out[t] = sum_j w[t, j] * W2[e_j] inter[(t, j)] (+ shared[t]), BF16 out. DESIGN.md, step 3.
//
// A CTA owns a 16-row tile of H and a chunk of tokens. Before its PDL wait it builds the chunk's
// routing index in shared memory (topk_ids is final: the Gate-Up kernel ahead passed its own wait)
// and prefetches its w2 tile of every active expert into L2, so the Down weights stream while
// Gate-Up runs. After the wait warp w takes the chunk's active experts w, w + 4, ...: an MMA over
// the expert's pairs (<= 16 columns per pass, K = I through a register ring), into y[pair][16] in
// shared memory. Each pair has its own row of y, so no atomics; then out[t] sums w[t, j] * y over
// j = 0..K-1 in order (bitwise deterministic, duplicates included) and every row of the chunk is
// written, tokens without a local expert included.
//
// Split over experts (expert_splits = S > 1, gridDim.z = S): when the grid (chunks x H/16) is too
// small to keep HBM busy (H = 2048: 128 CTAs, ~24 KB of loads in flight each), S CTAs share a
// (chunk, tile); CTA z's warp w takes active experts 4z + w, 4z + w + 4S, ... and writes its pairs'
// 16 columns as BF16 into the partial rows y[pair][H] (each (pair, column) by exactly one CTA), and
// moe_topk_reduce.cuh sums them in j order, as after the expert form.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_down_mma.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

// One stage: 64 elements of I (two 32-element groups, four BF16 MMA steps). A warp's stages run
// through one register ring across its passes (expert, <= 16 pairs), so the next pass's loads are
// in flight while the current one finishes: at I = 192 a pass is 3 stages. BF16 holds 3 stages
// (157 registers at 4 would leave 2 CTAs per SM instead of 3), FP8 4.
template <Format F>
__host__ __device__ constexpr int down_stages() { return F == Format::kFp8 ? 4 : 3; }

// Where one pass reads: the expert's w2 tile, the intermediate rows of its B columns, its scales.
struct DownPass {
  const char* tile;
  const char* brow[2];
  const float* scale;
  int base, n, nb;  // pairs x.list[base, base + n)
};

template <Format F>
__device__ __forceinline__ DownPass down_pass(const DownParams& p, const SmemIndex& x, int e, int c0, int u, int p0,
                                              int lane) {
  const int elem = F == Format::kFp8 ? 1 : 2;
  DownPass d;
  d.base = x.start[e] + c0;
  d.n = min(kChunkPairs, x.cnt[e] - c0);
  d.nb = d.n > 8 ? 2 : 1;
  d.tile = static_cast<const char*>(p.w2) + (int64_t(e) * (p.H / 16) + u) * (int64_t(16) * p.I * elem);
  const int g = lane >> 2;
#pragma unroll
  for (int j = 0; j < 2; ++j)
    d.brow[j] = static_cast<const char*>(p.inter) + int64_t(p0 + x.list[d.base + min(j * 8 + g, d.n - 1)]) * p.I * 2;
  d.scale = F == Format::kFp8 ? p.w2s + (int64_t(e) * (p.H / 128) + u / 8) * ((p.I + 127) / 128) : nullptr;
  return d;
}

template <Format F>
__device__ __forceinline__ void down_load(DownStage& st, const DownPass& d, int s, int lane, uint64_t policy) {
  if constexpr (F == Format::kFp8) {
    const char* a = d.tile + s * 1024 + lane * 16;
    st.a[0] = ld_weight(a, policy);
    st.a[1] = ld_weight(a + 512, policy);
    st.sc = ld_f32(d.scale + s / 2);
  } else {
    const char* a = d.tile + s * 2048 + lane * 16;
#pragma unroll
    for (int i = 0; i < 4; ++i) st.a[i] = ld_weight(a + i * 512, policy);
  }
  const int q = lane & 3;
#pragma unroll
  for (int j = 0; j < 2; ++j)
    if (j < d.nb) {
#pragma unroll
      for (int g = 0; g < 2; ++g) st.b[j][g] = ld_act(d.brow[j] + s * 128 + g * 64 + q * 16);
    }
}

template <Format F>
__global__ void __launch_bounds__(kThreads) moe_down_kernel(const DownParams p) {
  extern __shared__ __align__(16) int smem[];
  const int E = p.num_local_experts;
  const int u = blockIdx.y;
  const int t0 = blockIdx.x * p.chunk_tokens;
  const int nt = min(p.chunk_tokens, p.T - t0);
  const int np = nt * p.K, p0 = t0 * p.K;
  const int splits = p.expert_splits, z = blockIdx.z;
  const SmemIndex x = SmemIndex::carve(smem, E);
  float* y = reinterpret_cast<float*>(smem + ((SmemIndex::words(E, np) + 3) & ~3));  // [np][16], splits == 1

  build_index(x, p.topk_ids, p.ids_int64, p0, np, p.expert_start, E, 0);
  const int elem = F == Format::kFp8 ? 1 : 2;
  const int nact = x.active_n[0];
  if (p.prefetch_w2) {
    const int64_t tile_bytes = int64_t(16) * p.I * elem;
    for (int i = threadIdx.x; i < nact; i += kThreads)
      if ((i >> 2) % splits == z)
        prefetch_l2(static_cast<const char*>(p.w2) + (int64_t(x.active[i]) * (p.H / 16) + u) * tile_bytes,
                    static_cast<uint32_t>(tile_bytes));
  }
  if (splits == 1)
    for (int i = threadIdx.x; i < np * 16; i += kThreads) y[i] = 0.f;
  hpc::pdl_wait();  // inter (Gate-Up), shared_output and out's previous readers are done
  hpc::pdl_launch_dependents();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int num_stages = p.I / 64;
  const uint64_t policy = evict_first_policy();
  // Two cursors over the warp's (pass, stage) sequence: passes are (active expert ai = 4z + warp,
  // 4z + warp + 4S, ..., pairs c0 = 0, 16, ...). `l` is kDownStages units ahead of `c`.
  const int ai_step = 4 * splits;
  auto advance = [&](int& ai, int& c0, int& s) {  // true when a new pass starts
    if (++s < num_stages) return false;
    s = 0;
    c0 += kChunkPairs;
    if (c0 >= x.cnt[x.active[ai]]) c0 = 0, ai += ai_step;
    return true;
  };
  int lai = 4 * z + warp, lc0 = 0, ls = 0;
  int cai = lai, cc0 = 0, cs = 0;
  DownPass L{}, C{};
  if (lai < nact) L = C = down_pass<F>(p, x, x.active[lai], 0, u, p0, lane);
  constexpr int kDownStages = down_stages<F>();
  DownStage ring[kDownStages];
#pragma unroll
  for (int d = 0; d < kDownStages; ++d) {
    if (lai < nact) {
      down_load<F>(ring[d], L, ls, lane, policy);
      if (advance(lai, lc0, ls) && lai < nact) L = down_pass<F>(p, x, x.active[lai], lc0, u, p0, lane);
    }
  }
  float acc[2][4] = {};
  while (cai < nact) {
#pragma unroll
    for (int d = 0; d < kDownStages; ++d) {
      if (cai < nact) {
        down_compute<F>(ring[d], C.nb, acc);
        if (lai < nact) {
          down_load<F>(ring[d], L, ls, lane, policy);
          if (advance(lai, lc0, ls) && lai < nact) L = down_pass<F>(p, x, x.active[lai], lc0, u, p0, lane);
        }
        if (cs == num_stages - 1) {  // the pass is complete: its columns into y (unweighted)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int col = j * 8 + 2 * q + h;
              if (col < C.n) {
                const int pl = x.list[C.base + col];
                if (splits == 1) {
                  y[pl * 16 + g] = acc[j][h];
                  y[pl * 16 + g + 8] = acc[j][2 + h];
                } else {
                  __nv_bfloat16* yg = static_cast<__nv_bfloat16*>(p.y) + int64_t(p0 + pl) * p.H + u * 16;
                  yg[g] = __float2bfloat16_rn(acc[j][h]);
                  yg[g + 8] = __float2bfloat16_rn(acc[j][2 + h]);
                }
              }
            }
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[j][v] = 0.f;
        }
        if (advance(cai, cc0, cs) && cai < nact) C = down_pass<F>(p, x, x.active[cai], cc0, u, p0, lane);
      }
    }
  }
  if (splits > 1) return;  // the top-k reduce kernel sums the partial rows
  __syncthreads();

  for (int i = threadIdx.x; i < nt * 16; i += kThreads) {
    const int tl = i >> 4, r = i & 15;
    const float* wt = p.topk_weights + p0 + tl * p.K;
    float s = 0.f;
    for (int j = 0; j < p.K; ++j) s += ld_f32(wt + j) * y[(tl * p.K + j) * 16 + r];
    const int64_t t = t0 + tl;
    const int col = u * 16 + r;
    if (p.shared) s += __bfloat162float(static_cast<const __nv_bfloat16*>(p.shared)[t * p.shared_stride + col]);
    static_cast<__nv_bfloat16*>(p.out)[t * p.out_stride + col] = __float2bfloat16_rn(s);
  }
}

// The chunk's index, and its y [pairs][16] FP32 unless the CTAs are split over experts (they write
// partial rows to global memory instead).
inline size_t down_smem_bytes_impl(int num_pairs, int E, bool y_rows) {
  const size_t words = ((size_t(5) * E + 3 + num_pairs) + 3) & ~size_t(3);
  return words * 4 + (y_rows ? size_t(num_pairs) * 16 * sizeof(float) : 0);
}

template <Format F>
cudaError_t launch_moe_down(const DownParams& p, cudaStream_t stream, bool pdl) {
  const int chunk_tokens = p.chunk_tokens;
  // Chunks fastest: the CTAs of one w2 tile run together and share its L2 lines (one HBM read).
  const dim3 grid((p.T + chunk_tokens - 1) / chunk_tokens, p.H / 16, p.expert_splits);
  const size_t smem = down_smem_bytes_impl(chunk_tokens * p.K, p.num_local_experts, p.expert_splits == 1);
  return hpc::launch_kernel(moe_down_kernel<F>, grid, dim3(kThreads), smem, stream, pdl, p);
}

}  // namespace hpc::moe
