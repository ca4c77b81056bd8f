// Gate-Up GEMM of the fused MoE with SiLU(gate) * up: inter[p] = silu(W13g[e] x[t]) * (W13u[e] x[t])
// for every pair p = (t, j) routed to a local expert e. DESIGN.md, "Pipeline" step 2.
//
// Persistent grid: every CTA builds the routing index in shared memory and enumerates the same
// tasks (active local expert ascending, w13 tile of 8 gate + 8 up rows); CTA c takes tasks c,
// c + gridDim.x, ... A task is one 16-row tile times all the expert's pairs, 16 columns (a chunk)
// at a time. The 4 warps split K: each streams its contiguous part of the tile (16-byte loads, one
// per lane per MMA step, in the prepared fragment order) with the token rows (B) read straight
// from x through the index. A warp's stages of all its chunks and tasks run through one register
// ring, so the next chunk's loads are in flight while the current one is reduced. The warps'
// partial sums meet in shared memory and are added in warp order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

// One stage is 128 bytes of every row along K (two 64-byte groups, four MMA steps): one 128-wide
// scale block for FP8, 64 elements for BF16. Three stages in flight per warp: 6 KB per warp.
constexpr int kGateUpStages = 3;
constexpr int kPrefetchStages = 4;  // stages of the next task each warp asks L2 for ahead

struct GateUpStage {
  uint4 a[4];      // A fragments of steps (group 0, step 0), (0, 1), (1, 0), (1, 1)
  uint4 b[2][2];   // B: [n-block][group], words 0-1 step 0, words 2-3 step 1
  float2 ws;       // FP8: gate and up weight scale of this K block
  float xs[2][2];  // FP8: activation scale of the lane's two C columns per n-block
};

// One chunk of one task as a lane sees it.
struct GateUpChunk {
  int e, t;        // expert, tile
  int base, n, nb;  // pairs x.list[base, base + n), n-blocks
  int btok[2];     // token of the lane's B column per n-block
  int xtok[2][2];  // FP8: token of the lane's two C columns per n-block
};

// Position in a warp's (task, chunk, stage) sequence.
struct GateUpCursor {
  int task, e, t, c0, s;
};

template <Format F>
struct GateUpCta {
  const GateUpParams& p;
  const SmemIndex& x;
  int E, tiles, total, s0, s1, lane, kb_count;
  int64_t tile_bytes;
  uint64_t policy;

  __device__ __forceinline__ const char* tile_ptr(int e, int t) const {
    return static_cast<const char*>(p.w13) + (int64_t(e) * tiles + t) * tile_bytes;
  }

  __device__ __forceinline__ void start(GateUpCursor& c, int task) const {
    c.task = task, c.c0 = 0, c.s = s0;
    if (task < total) c.e = task_expert(x, E, task), c.t = task - x.tstart[c.e];
  }

  // Next stage; true when a new chunk starts (the cursor may then be past the last task).
  __device__ __forceinline__ bool advance(GateUpCursor& c) const {
    if (++c.s < s1) return false;
    c.s = s0;
    c.c0 += kChunkPairs;
    if (c.c0 >= x.cnt[c.e]) start(c, c.task + gridDim.x);
    return true;
  }

  __device__ __forceinline__ GateUpChunk chunk(const GateUpCursor& c) const {
    GateUpChunk k;
    k.e = c.e, k.t = c.t;
    k.base = x.start[c.e] + c.c0;
    k.n = min(kChunkPairs, x.cnt[c.e] - c.c0);
    k.nb = k.n > 8 ? 2 : 1;
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      k.btok[j] = x.list[k.base + min(j * 8 + g, k.n - 1)] / p.K;  // a column past n repeats a valid row
#pragma unroll
      for (int h = 0; h < 2; ++h) k.xtok[j][h] = x.list[k.base + min(j * 8 + 2 * q + h, k.n - 1)] / p.K;
    }
    return k;
  }

  __device__ __forceinline__ void load(GateUpStage& st, const GateUpChunk& k, int s) const {
    const char* a = tile_ptr(k.e, k.t) + s * 2048 + lane * 16;
#pragma unroll
    for (int i = 0; i < 4; ++i) st.a[i] = ld_weight(a + i * 512, policy);
    const int q = lane & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (j < k.nb) {
        const char* b = static_cast<const char*>(p.x) + k.btok[j] * p.x_row_bytes + s * 128 + q * 16;
        st.b[j][0] = ld_act(b);
        st.b[j][1] = ld_act(b + 64);
      }
    }
    if constexpr (F == Format::kFp8) {
      st.ws = ld_f32x2(p.w13s + ((int64_t(k.e) * tiles + k.t) * kb_count + s) * 2);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (j < k.nb) {
#pragma unroll
          for (int h = 0; h < 2; ++h) st.xs[j][h] = ld_f32(p.xs + k.xtok[j][h] * p.xs_stride_t + s * p.xs_stride_kb);
        }
      }
    }
  }

  // Ask L2 for the first stages of this warp's part of task `task` (if it exists).
  __device__ __forceinline__ void prefetch_task(int task, int stages) const {
    if (lane != 0 || task >= total) return;
    const int e = task_expert(x, E, task);
    prefetch_l2(tile_ptr(e, task - x.tstart[e]) + s0 * 2048, static_cast<uint32_t>(min(stages, s1 - s0) * 2048));
  }
};

template <Format F>
__device__ __forceinline__ void gate_up_compute(const GateUpStage& st, int nb, float (&acc)[2][4]) {
  float part[2][4] = {};
  float(&d)[2][4] = (F == Format::kFp8) ? part : acc;
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

// The chunk's split-K reduce (fixed warp order) and epilogue; every thread of the CTA calls it
// once per chunk, in the same chunk order. Leaves acc zeroed.
__device__ __forceinline__ void gate_up_reduce(const GateUpParams& p, const SmemIndex& x, const GateUpChunk& k,
                                               float (&acc)[2][4], float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) red[(warp * 8 + j * 4 + v) * 32 + lane] = acc[j][v], acc[j][v] = 0.f;
  __syncthreads();
  // thread -> (n-block, column parity, lane of the C fragment)
  const int j = threadIdx.x >> 6, h = (threadIdx.x >> 5) & 1, l = threadIdx.x & 31;
  const int col = j * 8 + 2 * (l & 3) + h;
  if (col < k.n) {
    float gate = 0.f, up = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      gate += red[(w * 8 + j * 4 + h) * 32 + l];
      up += red[(w * 8 + j * 4 + 2 + h) * 32 + l];
    }
    const int row = 8 * k.t + (l >> 2);
    static_cast<__nv_bfloat16*>(p.inter)[int64_t(x.list[k.base + col]) * p.I + row] =
        __float2bfloat16_rn(silu_mul(gate, up));
  }
  __syncthreads();
}

template <Format F>
__global__ void __launch_bounds__(kThreads, gate_up_ctas_per_sm(F)) moe_gate_up_kernel(const GateUpParams p) {
  extern __shared__ __align__(16) int smem[];
  const int E = p.num_local_experts;
  const int num_pairs = p.T * p.K;
  const SmemIndex x = SmemIndex::carve(smem, E);
  float* red = reinterpret_cast<float*>(smem + ((SmemIndex::words(E, num_pairs) + 3) & ~3));  // [4][8][32]

  const int warp = threadIdx.x >> 5;
  const int elem = F == Format::kFp8 ? 1 : 2;
  const int num_stages = p.H * elem / 128;
  GateUpCta<F> cta{p, x};
  cta.E = E;
  cta.tiles = p.I / 8;
  cta.s0 = warp * num_stages / 4;
  cta.s1 = (warp + 1) * num_stages / 4;
  cta.lane = threadIdx.x & 31;
  cta.kb_count = p.H / 128;
  cta.tile_bytes = int64_t(16) * p.H * elem;
  cta.policy = evict_first_policy();

  if (p.ids_before_wait) {
    build_index(x, p.topk_ids, p.ids_int64, 0, num_pairs, p.expert_start, E, cta.tiles);
    cta.total = x.tstart[E];
    // The weights never change: the first task's tile streams into L2 while the kernel ahead
    // (the input quantiser) finishes.
    cta.prefetch_task(blockIdx.x, num_stages);
    hpc::pdl_wait();
  } else {
    hpc::pdl_wait();
    build_index(x, p.topk_ids, p.ids_int64, 0, num_pairs, p.expert_start, E, cta.tiles);
    cta.total = x.tstart[E];
  }
  // The Down kernel may start now: it reads only topk_ids before its own wait.
  hpc::pdl_launch_dependents();

  float acc[2][4] = {};
  GateUpCursor lc, cc;
  cta.start(lc, blockIdx.x);
  cc = lc;
  if (cta.s1 == cta.s0) {  // a warp with no K stages (small H) still joins every chunk's reduce
    while (cc.task < cta.total) {
      gate_up_reduce(p, x, cta.chunk(cc), acc, red);
      cc.s = cta.s1 - 1;
      cta.advance(cc);
    }
    return;
  }
  GateUpChunk L{}, C{};
  if (lc.task < cta.total) L = C = cta.chunk(lc);
  cta.prefetch_task(blockIdx.x + gridDim.x, kPrefetchStages);
  GateUpStage ring[kGateUpStages];
#pragma unroll
  for (int d = 0; d < kGateUpStages; ++d) {
    if (lc.task < cta.total) {
      cta.load(ring[d], L, lc.s);
      if (cta.advance(lc) && lc.task < cta.total) L = cta.chunk(lc);
    }
  }
  while (cc.task < cta.total) {
#pragma unroll
    for (int d = 0; d < kGateUpStages; ++d) {
      if (cc.task < cta.total) {
        gate_up_compute<F>(ring[d], C.nb, acc);
        if (lc.task < cta.total) {
          cta.load(ring[d], L, lc.s);
          const int prev = lc.task;
          if (cta.advance(lc) && lc.task < cta.total) {
            L = cta.chunk(lc);
            if (lc.task != prev) cta.prefetch_task(lc.task + gridDim.x, kPrefetchStages);
          }
        }
        if (cc.s == cta.s1 - 1) gate_up_reduce(p, x, C, acc, red);
        if (cta.advance(cc) && cc.task < cta.total) C = cta.chunk(cc);
      }
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
