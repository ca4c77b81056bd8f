// Gate-Up GEMM of the fused MoE with SiLU(gate) * up: inter[p] = silu(W13g[e] x[t]) * (W13u[e] x[t])
// for every pair p = (t, j) routed to a local expert e. DESIGN.md, "Pipeline" step 2.
//
// Persistent grid: every CTA builds the routing index in shared memory and enumerates the same
// tasks (active local expert ascending, w13 tile of 8 gate + 8 up rows); CTA c takes tasks c,
// c + gridDim.x, ... A task is one 16-row tile times all the expert's pairs, 16 columns at a time.
// Warp w owns bytes [s0 * 2 KB, s1 * 2 KB) of every w13 tile (its K quarter: 16 KB of a 64 KB FP8
// tile, 32 KB of a 128 KB BF16 tile, contiguous in the prepared layout) and streams them through
// its own shared-memory ring (moe_bulk_ring.cuh) in 4 KB bulk copies, across chunks and tasks: the
// next task's part streams while the current chunk's epilogue runs, and the first copies are issued
// before the PDL wait (weights are never written by an earlier kernel). The ring holds a warp's whole
// quarter of an FP8 tile (4 slots, 64 KB per CTA, 3 CTAs per SM), 6 of 8 pieces for BF16 (96 KB, 2
// per SM). B (token rows of x / xq through the index, L2-resident) stays in registers, loaded two K
// stages ahead of its use. The warps' partial sums meet in shared memory and are added in warp
// order. A chunk of more than 16 pairs streams the tile again (L2 hits).
// Measured against per-lane 16-byte register loads of the same tiles (H200, cold, Hy3 TP8, Gate-Up
// alone, us): FP8 T = 1 / 16 / 256: 15.4 / 54.1 / 135.2 against 15.7 / 69.5 / 154.6; BF16 15.6 / 86.6
// / 169.8 against 17.0 / 88.4 / 180.8 (DESIGN.md, "Measured").
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_common/sm90.cuh"
#include "hpc_moe/moe_bulk_ring.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_gate_up_operands.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

constexpr int kGateUpStageBytes = 2048;                     // 128 bytes of each of 16 rows
constexpr int kGateUpSlotStages = 2;                        // K stages per copy
constexpr int kGateUpSlotBytes = kGateUpSlotStages * kGateUpStageBytes;
constexpr int gate_up_slots(Format f) { return f == Format::kFp8 ? 4 : 6; }  // per warp
constexpr int gate_up_ctas_per_sm(Format f) { return f == Format::kFp8 ? 3 : 2; }
constexpr size_t gate_up_ring_bytes(Format f) {
  return size_t(4) * gate_up_slots(f) * kGateUpSlotBytes;
}

// The warp's copy sequence (task, chunk, piece): the order in which the consumer loop below reads.
struct GateUpCursor {
  int task, e, t, cnt, c0, q;
  bool valid;

  __device__ __forceinline__ void set_task(const SmemIndex& x, int E) {
    e = task_expert(x, E, task);
    cnt = x.cnt[e];
    t = task - x.tstart[e];
  }
  __device__ __forceinline__ void start(const SmemIndex& x, int E, int total, int pieces) {
    task = blockIdx.x, c0 = 0, q = 0;
    valid = pieces > 0 && task < total;
    if (valid) set_task(x, E);
  }
  __device__ __forceinline__ void advance(const SmemIndex& x, int E, int total, int pieces) {
    if (!valid || ++q < pieces) return;
    q = 0;
    c0 += kChunkPairs;
    if (c0 < cnt) return;
    c0 = 0;
    task += gridDim.x;
    valid = task < total;
    if (valid) set_task(x, E);
  }
};

// The window's index for the expert-form Down kernel (moe_params.h, DownIndex), from this CTA's
// shared-memory index. Called after the PDL wait, like every global write of the pipeline (an earlier
// window's Down may still be reading the previous index until then).
__device__ __forceinline__ void write_down_index(const SmemIndex& x, int E, int cap, int* w) {
  const int nact = x.active_n[0];
  if (threadIdx.x == 0) {
    w[0] = nact;
    w[1 + cap + nact] = x.start[E];
  }
  for (int a = threadIdx.x; a < nact; a += kThreads) {
    w[1 + a] = x.active[a];
    w[1 + cap + a] = x.start[x.active[a]];
  }
  for (int s = threadIdx.x; s < x.start[E]; s += kThreads) w[2 + 2 * cap + s] = x.list[s];
}

__device__ __forceinline__ void gate_up_load_a(GateUpStage& st, const char* stage, int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) st.a[i] = lds128(stage + i * 512 + lane * 16);
}

template <Format F>
__global__ void __launch_bounds__(kThreads, gate_up_ctas_per_sm(F))
    moe_gate_up_kernel(const GateUpParams p) {
  extern __shared__ __align__(128) char gate_up_smem[];
  constexpr int kSlots = gate_up_slots(F);
  const int E = p.num_local_experts;
  const int num_pairs = p.T * p.K;
  char* ring_buf = gate_up_smem;
  uint64_t* bars = reinterpret_cast<uint64_t*>(gate_up_smem + gate_up_ring_bytes(F));  // [4][kSlots]
  float* red = reinterpret_cast<float*>(bars + 4 * kSlots);                                     // [4][8][32]
  const SmemIndex x = SmemIndex::carve(reinterpret_cast<int*>(red + 4 * 8 * 32), E);
  const int tiles = p.I / 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) WarpRing::init_barriers(bars, 4 * kSlots);
  if (p.ids_before_wait) {
    build_index(x, p.topk_ids, p.ids_int64, 0, num_pairs, p.expert_start, E, tiles);  // syncs the init
  } else {
    hpc::pdl_wait();
    build_index(x, p.topk_ids, p.ids_int64, 0, num_pairs, p.expert_start, E, tiles);
  }

  const int elem = F == Format::kFp8 ? 1 : 2;
  const int num_stages = p.H * elem / 128;
  const int s0 = warp * num_stages / 4, s1 = (warp + 1) * num_stages / 4;
  const int mw = s1 - s0;
  const int pieces = (mw + kGateUpSlotStages - 1) / kGateUpSlotStages;
  const int64_t tile_bytes = int64_t(16) * p.H * elem;
  const int kb_count = p.H / 128;
  const int total = x.tstart[E];

  WarpRing ring{ring_buf + size_t(warp) * kSlots * kGateUpSlotBytes, bars + warp * kSlots, kSlots,
                kGateUpSlotBytes, 0, 0, sm90::l2_evict_first_policy()};
  const char* wpart = static_cast<const char*>(p.w13) + int64_t(s0) * kGateUpStageBytes;
  GateUpCursor cur;
  cur.start(x, E, total, pieces);
  auto src = [&]() {
    return wpart + (int64_t(cur.e) * tiles + cur.t) * tile_bytes + int64_t(cur.q) * kGateUpSlotBytes;
  };
  auto bytes = [&]() {
    return static_cast<uint32_t>(min(kGateUpSlotStages, mw - cur.q * kGateUpSlotStages) *
                                 kGateUpStageBytes);
  };
  for (int s = 0; s < kSlots && cur.valid; ++s) {
    if (lane == 0) ring.issue(s, src(), bytes());
    cur.advance(x, E, total, pieces);
  }
  __syncwarp();
  if (p.ids_before_wait) hpc::pdl_wait();  // x / xq (the quantiser) and inter's earlier readers
  if (p.down_index != nullptr && blockIdx.x == 0) write_down_index(x, E, num_pairs, p.down_index);
  // The Down kernel may start now: it reads only topk_ids before its own wait.
  hpc::pdl_launch_dependents();

  for (int task = blockIdx.x; task < total; task += gridDim.x) {
    const int e = task_expert(x, E, task);
    const int cnt = x.cnt[e];
    const int t = task - x.tstart[e];
    for (int c0 = 0; c0 < cnt; c0 += kChunkPairs) {
      const int* pairs = x.list + x.start[e] + c0;
      const int n = min(kChunkPairs, cnt - c0);

      GateUpWarp<F> w{p};
      w.lane = lane;
      w.nb = n > 8 ? 2 : 1;
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
      GateUpStage st[2];
      if (mw > 0) w.load_b(st[0], s0);
      if (mw > 1) w.load_b(st[1], s0 + 1);
      for (int k = 0; k < mw; k += kGateUpSlotStages) {  // one slot (piece) per iteration
        const char* a = ring.wait();
        gate_up_load_a(st[0], a, lane);
        w.compute(st[0], acc);
        if (k + 2 < mw) w.load_b(st[0], s0 + k + 2);
        if (k + 1 < mw) {
          gate_up_load_a(st[1], a + kGateUpStageBytes, lane);
          w.compute(st[1], acc);
          if (k + 3 < mw) w.load_b(st[1], s0 + k + 3);
        }
        ring.release(lane == 0, cur.valid, src(), bytes());
        cur.advance(x, E, total, pieces);
      }

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

inline size_t gate_up_smem_bytes_impl(Format f, int num_pairs, int E) {
  const size_t words = size_t(5) * E + 3 + num_pairs;
  return gate_up_ring_bytes(f) + size_t(4) * gate_up_slots(f) * sizeof(uint64_t) +
         4 * 8 * 32 * sizeof(float) + words * 4;
}

// grid: the caller's bound on the tasks, capped here at the CTAs resident at once.
template <Format F>
cudaError_t launch_moe_gate_up(const GateUpParams& p, int task_bound, int num_sms, cudaStream_t stream,
                                    bool pdl) {
  const size_t smem = gate_up_smem_bytes_impl(F, p.T * p.K, p.num_local_experts);
  if (cudaError_t e = hpc::allow_dynamic_smem(moe_gate_up_kernel<F>, smem); e != cudaSuccess) return e;
  int per_sm = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_gate_up_kernel<F>, kThreads,
                                                                    smem);
      e != cudaSuccess)
    return e;
  const long long resident = static_cast<long long>(num_sms) * (per_sm > 0 ? per_sm : 1);
  const int grid = static_cast<int>(task_bound < resident ? task_bound : resident);
  return hpc::launch_kernel(moe_gate_up_kernel<F>, dim3(grid > 0 ? grid : 1), dim3(kThreads), smem, stream,
                            pdl, p);
}

}  // namespace hpc::moe
