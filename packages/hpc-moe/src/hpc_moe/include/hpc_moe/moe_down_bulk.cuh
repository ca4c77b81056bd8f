// Down GEMM of the fused MoE with the top-k reduce, bulk-copy path: the same CTAs (a 16-row H tile
// u and a token chunk), passes (warp w: active experts w, w + 4, ..., <= 16 pairs each), K order,
// y rows and final reduce as moe_down.cuh (so the same output, bitwise), with the w2 tiles streamed
// into shared memory by the bulk copy engine. DESIGN.md, "Bulk-copy path".
//
// A warp's copy sequence is its passes' w2 tiles (16 x I contiguous bytes each: 3 KB FP8 / 6 KB
// BF16 at I = 192), back to back across experts, each tile one copy or, when it is larger than
// kDownBulkMaxSlotBytes, pieces of whole 64-wide K stages. The ring (moe_bulk_ring.cuh) has
// `slots` slots of one piece each (host-chosen by down_bulk_slots: up to 24 KB per warp), and its
// first copies are issued before the PDL wait, so the Down weights stream while Gate-Up runs; at
// T = 1 every tile of the CTA is in flight at once. B (rows of `inter`, written by Gate-Up) is
// read after the wait, in registers two K stages ahead of its use (across passes).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_common/sm90.cuh"
#include "hpc_moe/moe_bulk_ring.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_down.cuh"
#include "hpc_moe/moe_index.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

constexpr int kDownBulkMaxSlotBytes = 8192;
constexpr int kDownBulkMaxWarpRingBytes = 24 * 1024;
constexpr int kDownBulkMaxSlots = 24;  // kDownBulkMaxWarpRingBytes / the smallest slot (1 KB)
// Shared memory per CTA the host sizes the rings for (two CTAs per SM), unless the index and y
// alone leave less than two slots per warp.
constexpr size_t kDownBulkSmemTarget = 110 * 1024;

__host__ __device__ constexpr int down_bulk_stage_bytes(Format f) { return f == Format::kFp8 ? 1024 : 2048; }
// K stages (64 elements of I) per copy.
__host__ __device__ constexpr int down_bulk_slot_stages(Format f, int I) {
  return I / 64 < kDownBulkMaxSlotBytes / down_bulk_stage_bytes(f) ? I / 64
                                                                  : kDownBulkMaxSlotBytes / down_bulk_stage_bytes(f);
}

// The warp's copy sequence (active expert index, pair chunk, piece), the consumer's pass order.
struct DownBulkCursor {
  int ai, c0, q;
  bool valid;
  __device__ __forceinline__ void advance(const SmemIndex& x, int nact, int pieces) {
    if (!valid || ++q < pieces) return;
    q = 0;
    c0 += kChunkPairs;
    if (c0 >= x.cnt[x.active[ai]]) c0 = 0, ai += 4;
    valid = ai < nact;
  }
};

template <Format F>
__device__ __forceinline__ void down_bulk_load_b(DownStage& st, const DownPass& d, int s, int lane) {
  if constexpr (F == Format::kFp8) st.sc = ld_f32(d.scale + s / 2);
  const int q = lane & 3;
#pragma unroll
  for (int j = 0; j < 2; ++j)
    if (j < d.nb) {
#pragma unroll
      for (int g = 0; g < 2; ++g) st.b[j][g] = ld_act(d.brow[j] + s * 128 + g * 64 + q * 16);
    }
}

template <Format F>
__device__ __forceinline__ void down_bulk_load_a(DownStage& st, const char* stage, int lane) {
  if constexpr (F == Format::kFp8) {
    st.a[0] = lds128(stage + lane * 16);
    st.a[1] = lds128(stage + 512 + lane * 16);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) st.a[i] = lds128(stage + i * 512 + lane * 16);
  }
}

template <Format F>
__global__ void __launch_bounds__(kThreads) moe_down_bulk_kernel(const DownParams p, int slots) {
  extern __shared__ __align__(128) char down_bulk_smem[];
  const int E = p.num_local_experts;
  const int u = blockIdx.y;
  const int t0 = blockIdx.x * p.chunk_tokens;
  const int nt = min(p.chunk_tokens, p.T - t0);
  const int np = nt * p.K, p0 = t0 * p.K;
  const int kb = down_bulk_stage_bytes(F);
  const int kpp = down_bulk_slot_stages(F, p.I);
  const int slot_bytes = kpp * kb;
  char* ring_buf = down_bulk_smem;
  uint64_t* bars = reinterpret_cast<uint64_t*>(down_bulk_smem + size_t(4) * slots * slot_bytes);  // [4][slots]
  const SmemIndex x = SmemIndex::carve(reinterpret_cast<int*>(bars + 4 * slots), E);
  float* y = reinterpret_cast<float*>(reinterpret_cast<int*>(bars + 4 * slots) +
                                      ((SmemIndex::words(E, np) + 3) & ~3));  // [np][16]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) WarpRing::init_barriers(bars, 4 * slots);
  build_index(x, p.topk_ids, p.ids_int64, p0, np, p.expert_start, E, 0);  // syncs the init
  const int nact = x.active_n[0];
  const int nk = p.I / 64;
  const int pieces = (nk + kpp - 1) / kpp;
  const int elem = F == Format::kFp8 ? 1 : 2;
  const int64_t tile_bytes = int64_t(16) * p.I * elem;

  WarpRing ring{ring_buf + size_t(warp) * slots * slot_bytes, bars + warp * slots, slots, slot_bytes, 0, 0,
                sm90::l2_evict_first_policy()};
  DownBulkCursor cur{warp, 0, 0, warp < nact};
  auto src = [&]() {
    return static_cast<const char*>(p.w2) + (int64_t(x.active[cur.ai]) * (p.H / 16) + u) * tile_bytes +
           int64_t(cur.q) * slot_bytes;
  };
  auto bytes = [&]() { return static_cast<uint32_t>(min(kpp, nk - cur.q * kpp) * kb); };
  // w2 is never written by an earlier kernel: its first copies go out before the PDL wait.
  for (int s = 0; s < slots && cur.valid; ++s) {
    if (lane == 0) ring.issue(s, src(), bytes());
    cur.advance(x, nact, pieces);
  }
  __syncwarp();
  for (int i = threadIdx.x; i < np * 16; i += kThreads) y[i] = 0.f;
  hpc::pdl_wait();  // inter (Gate-Up), shared_output and out's previous readers are done
  hpc::pdl_launch_dependents();
  __syncthreads();

  const int g = lane >> 2, q = lane & 3;
  // Two cursors over the warp's (pass, K stage) units, as in moe_down.cuh: B of unit i + 2 is
  // loaded while unit i computes, across passes, so a pass's first B rows are in flight before it
  // starts. Passes are (active expert ai = warp, warp + 4, ..., pairs c0 = 0, 16, ...).
  auto advance = [&](int& ai, int& c0, int& s) {  // true when a new pass starts
    if (++s < nk) return false;
    s = 0;
    c0 += kChunkPairs;
    if (c0 >= x.cnt[x.active[ai]]) c0 = 0, ai += 4;
    return true;
  };
  int lai = warp, lc0 = 0, ls = 0;
  int cai = warp, cc0 = 0, cs = 0;
  DownPass L{}, C{};
  if (lai < nact) L = C = down_pass<F>(p, x, x.active[lai], 0, u, p0, lane);
  DownStage st[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (lai < nact) {
      down_bulk_load_b<F>(st[i], L, ls, lane);
      if (advance(lai, lc0, ls) && lai < nact) L = down_pass<F>(p, x, x.active[lai], lc0, u, p0, lane);
    }
  }
  float acc[2][4] = {};
  const char* a = nullptr;
  int r = 0;  // K stage within the current slot: wait at its first, release after its last
  while (cai < nact) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (cai < nact) {
        if (r == 0) a = ring.wait();
        down_bulk_load_a<F>(st[i], a + r * kb, lane);
        down_compute<F>(st[i], C.nb, acc);
        if (lai < nact) {
          down_bulk_load_b<F>(st[i], L, ls, lane);
          if (advance(lai, lc0, ls) && lai < nact) L = down_pass<F>(p, x, x.active[lai], lc0, u, p0, lane);
        }
        if (++r == kpp || cs == nk - 1) {
          r = 0;
          ring.release(lane == 0, cur.valid, src(), bytes());
          cur.advance(x, nact, pieces);
        }
        if (cs == nk - 1) {  // the pass is complete: its columns into y (unweighted)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int col = j * 8 + 2 * q + h;
              if (col < C.n) {
                const int pl = x.list[C.base + col];
                y[pl * 16 + g] = acc[j][h];
                y[pl * 16 + g + 8] = acc[j][2 + h];
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
  __syncthreads();

  for (int i = threadIdx.x; i < nt * 16; i += kThreads) {
    const int tl = i >> 4, rr = i & 15;
    const float* wt = p.topk_weights + p0 + tl * p.K;
    float s = 0.f;
    for (int j = 0; j < p.K; ++j) s += ld_f32(wt + j) * y[(tl * p.K + j) * 16 + rr];
    const int64_t t = t0 + tl;
    const int col = u * 16 + rr;
    if (p.shared) s += __bfloat162float(static_cast<const __nv_bfloat16*>(p.shared)[t * p.shared_stride + col]);
    static_cast<__nv_bfloat16*>(p.out)[t * p.out_stride + col] = __float2bfloat16_rn(s);
  }
}

// Bytes of shared memory outside the rings (barriers excluded), and the ring slots per warp.
inline size_t down_bulk_fixed_bytes(int num_pairs, int E) {
  const size_t words = ((size_t(5) * E + 3 + num_pairs) + 3) & ~size_t(3);
  return words * 4 + size_t(num_pairs) * 16 * sizeof(float);
}

// Slots per warp: what kDownBulkSmemTarget leaves after the index and y (at least 2), and no more
// than a warp can ever fill: warp w takes active experts w, w + 4, ... of at most min(E, pairs), and
// an expert's pairs add a pass per 16, so a warp has at most ceil(min(E, pairs) / 4) + ceil(pairs /
// 16) passes. At T = 1 that keeps a CTA small enough to become resident next to the Gate-Up CTAs
// and stream its w2 tiles while they run.
inline int down_bulk_slots(Format f, int I, int num_pairs, int E) {
  const int kpp = down_bulk_slot_stages(f, I);
  const size_t slot = size_t(kpp) * down_bulk_stage_bytes(f);
  const size_t fixed = down_bulk_fixed_bytes(num_pairs, E);
  size_t per_warp = fixed < kDownBulkSmemTarget ? (kDownBulkSmemTarget - fixed) / 4 : 0;
  if (per_warp > size_t(kDownBulkMaxWarpRingBytes)) per_warp = kDownBulkMaxWarpRingBytes;
  long long n = static_cast<long long>(per_warp / slot);
  if (n < 2) n = 2;
  if (n > kDownBulkMaxSlots) n = kDownBulkMaxSlots;
  const long long experts = E < num_pairs ? E : num_pairs;
  const long long passes = (experts + 3) / 4 + (num_pairs + kChunkPairs - 1) / kChunkPairs;
  const long long stages = passes * ((I / 64 + kpp - 1) / kpp);
  if (n > stages) n = stages;
  return static_cast<int>(n > 0 ? n : 1);
}

inline size_t down_bulk_smem_bytes_impl(Format f, int I, int num_pairs, int E) {
  const int slots = down_bulk_slots(f, I, num_pairs, E);
  const size_t slot = size_t(down_bulk_slot_stages(f, I)) * down_bulk_stage_bytes(f);
  return size_t(4) * slots * (slot + sizeof(uint64_t)) + down_bulk_fixed_bytes(num_pairs, E);
}

template <Format F>
cudaError_t launch_moe_down_bulk(const DownParams& p, cudaStream_t stream, bool pdl) {
  const int chunk_tokens = p.chunk_tokens;
  // Chunks fastest: the CTAs of one w2 tile run together and share its L2 lines (one HBM read).
  const dim3 grid((p.T + chunk_tokens - 1) / chunk_tokens, p.H / 16);
  const int np = chunk_tokens * p.K;
  const int slots = down_bulk_slots(F, p.I, np, p.num_local_experts);
  const size_t smem = down_bulk_smem_bytes_impl(F, p.I, np, p.num_local_experts);
  return hpc::launch_kernel(moe_down_bulk_kernel<F>, grid, dim3(kThreads), smem, stream, pdl, p, slots);
}

}  // namespace hpc::moe
