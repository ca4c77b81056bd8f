// Expert-form Down GEMM of the fused MoE: y[p] = W2[e_p] inter[p] for every pair p routed to a local
// expert, BF16 partial rows; moe_topk_reduce.cuh then sums each token's top-k. DESIGN.md, "Down: two
// forms". For large T, where the tile form (moe_down.cuh) is latency bound on 3-6 KB passes.
//
// Tasks: (active expert a, slab s of <= slab_pairs of its pairs) in the order of the DownIndex that the
// Gate-Up kernel's CTA 0 wrote (active experts ascending, slabs in list order); gridDim.y bounds the
// tasks of any routing (CTAs past the real count exit at once), gridDim.x = blocks of
// 4 * tiles_per_warp 16-row tiles of H. Consecutive CTAs share an (expert, slab): the same intermediate
// rows in L2 and consecutive w2 bytes.
//
// A CTA: warp w copies its tiles of the block (contiguous in the prepared w2p [E, H/16, 16*I]) into
// shared memory with one bulk copy (L2 evict_first) on its own mbarrier, then per chunk of 16 pairs:
// all threads stage the chunk's intermediate rows in shared memory in B-fragment order (one 512-byte
// conflict-free read per fragment), each warp multiplies its tiles by them (K = I, FP8 converted to
// BF16 in registers, per-block scales) into a BF16 staging tile, and the staging tile goes out as
// contiguous 16-byte stores into y. A pair's row of y is written by exactly the CTAs of its expert's
// slab, one per block of H: no atomics, no dependence on the order of pairs in the index.
//
// PDL: nothing of the index or the intermediate exists before the wait, so the CTA only initialises
// its barriers before it (the weights' address depends on the task).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "hpc_common/pdl.cuh"
#include "hpc_common/sm90.cuh"
#include "hpc_moe/moe_bulk_ring.cuh"
#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_down_mma.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

constexpr int kExpertDownWarps = kThreads / 32;
// FP8: the w2 block scales of a CTA's rows, [128-row blocks][ceil(I/128)]: a block of <= 16 tiles touches
// at most 4 blocks of 128 rows, and the expert form takes I <= 768 (6 scales per row block).
constexpr int kExpertDownMaxBlockTiles = 16;
constexpr int kExpertDownScaleWords = 4 * 8;

// Shared memory of one CTA (bytes, 16-byte aligned pieces): the weight block, the B chunk
// [2 n-blocks][I/32 groups][32 lanes] x 16 bytes, the output staging [16 pairs][rows + 8] BF16 (the pad
// spreads the fragment stores over the banks and keeps rows 16-byte aligned), the warps' barriers,
// the chunk's pair ids, the FP8 scales of the block and the task table (range starts and slab prefix
// of every active expert).
struct ExpertDownSmem {
  size_t weights, bchunk, staging, bars, pairs, scales, table, total;
  int stage_stride;  // bytes per staging row

  __host__ __device__ static ExpertDownSmem layout(int I, int elem, int block_tiles, int max_active) {
    ExpertDownSmem s;
    const size_t tile_bytes = size_t(16) * I * elem;
    s.stage_stride = (block_tiles * 16 + 8) * 2;
    s.weights = 0;
    s.bchunk = s.weights + block_tiles * tile_bytes;
    s.staging = s.bchunk + size_t(32) * I;
    s.bars = s.staging + size_t(kChunkPairs) * s.stage_stride;
    s.pairs = s.bars + kExpertDownWarps * sizeof(uint64_t);
    s.scales = s.pairs + kChunkPairs * sizeof(int);
    s.table = s.scales + kExpertDownScaleWords * sizeof(float);
    s.total = s.table + size_t(2) * (max_active + 1) * sizeof(int);
    return s;
  }
};

// One warp's slice of a block of `nt` tiles: tiles [lo, hi).
__device__ __forceinline__ void warp_tiles(int nt, int warp, int& lo, int& hi) {
  lo = warp * nt / kExpertDownWarps;
  hi = (warp + 1) * nt / kExpertDownWarps;
}

// One 16-row tile of the block times the chunk's B columns, K = I, into acc. `scale`: FP8, the tile's
// row-block scales in shared memory (one per 128 of I).
template <Format F>
__device__ __forceinline__ void expert_down_tile(const char* tile, const char* bchunk, const float* scale, int I,
                                                 int nb, int lane, float (&acc)[2][4]) {
  const int stages = I / 64, groups = I / 32;
  for (int s = 0; s < stages; ++s) {
    DownStage st;
    if constexpr (F == Format::kFp8) {
      const char* a = tile + s * 1024 + lane * 16;
      st.a[0] = lds128(a);
      st.a[1] = lds128(a + 512);
      st.sc = scale[s / 2];
    } else {
      const char* a = tile + s * 2048 + lane * 16;
#pragma unroll
      for (int i = 0; i < 4; ++i) st.a[i] = lds128(a + i * 512);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (j < nb) {
#pragma unroll
        for (int g = 0; g < 2; ++g) st.b[j][g] = lds128(bchunk + ((j * groups + 2 * s + g) * 32 + lane) * 16);
      }
    down_compute<F>(st, nb, acc);
  }
}

template <Format F>
__global__ void __launch_bounds__(kThreads) moe_down_experts_kernel(const DownExpertParams p) {
  extern __shared__ __align__(128) char xd_smem[];
  const int elem = F == Format::kFp8 ? 1 : 2;
  const int block_tiles = kExpertDownWarps * p.tiles_per_warp;
  const int max_active = min(p.num_local_experts, p.cap);
  const ExpertDownSmem L = ExpertDownSmem::layout(p.I, elem, block_tiles, max_active);
  char* wsm = xd_smem + L.weights;
  char* bchunk = xd_smem + L.bchunk;
  char* staging = xd_smem + L.staging;
  uint64_t* bars = reinterpret_cast<uint64_t*>(xd_smem + L.bars);
  int* chunk_pairs = reinterpret_cast<int*>(xd_smem + L.pairs);
  float* block_scales = reinterpret_cast<float*>(xd_smem + L.scales);
  int* range_start = reinterpret_cast<int*>(xd_smem + L.table);  // [nact + 1]
  int* task_start = range_start + max_active + 1;                // [nact + 1]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  if (tid == 0) WarpRing::init_barriers(bars, kExpertDownWarps);
  hpc::pdl_wait();  // the index and inter (Gate-Up), y's readers of the previous window (the reduce)
  hpc::pdl_launch_dependents();

  const DownIndex ix{p.index, p.cap};
  const int nact = max(0, min(ix.num_active(), max_active));  // clamped: never index past the table
  for (int a = tid; a <= nact; a += kThreads) range_start[a] = ix.start(a);
  __syncthreads();
  if (warp == 0) {  // slab prefix: each lane a contiguous run of active experts
    const int per = (nact + 31) / 32;
    const int a0 = min(nact, lane * per), a1 = min(nact, a0 + per);
    int mine = 0;
    for (int a = a0; a < a1; ++a) mine += (range_start[a + 1] - range_start[a] + p.slab_pairs - 1) / p.slab_pairs;
    int incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    int t = incl - mine;
    for (int a = a0; a < a1; ++a) {
      task_start[a] = t;
      t += (range_start[a + 1] - range_start[a] + p.slab_pairs - 1) / p.slab_pairs;
    }
    if (lane == 31) task_start[nact] = incl;
  }
  __syncthreads();
  const int task = blockIdx.y;
  if (task >= task_start[nact]) return;  // no copy was issued: nothing in flight
  int lo = 0, hi = nact - 1;              // the last active expert whose tasks start at or before `task`
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (task_start[mid] <= task) lo = mid; else hi = mid - 1;
  }
  const int a = lo;
  const int e = ix.expert(a);
  const int b0 = range_start[a] + (task - task_start[a]) * p.slab_pairs;
  const int b1 = min(b0 + p.slab_pairs, range_start[a + 1]);

  const int h_tiles = p.H / 16;
  const int tile0 = blockIdx.x * block_tiles;
  const int nt = min(block_tiles, h_tiles - tile0);
  const int64_t tile_bytes = int64_t(16) * p.I * elem;
  int wlo, whi;
  warp_tiles(nt, warp, wlo, whi);
  if (lane == 0 && whi > wlo) {
    const uint32_t bytes = static_cast<uint32_t>((whi - wlo) * tile_bytes);
    sm90::mbar_arrive_expect_tx(bars + warp, bytes);
    sm90::bulk_load(wsm + wlo * tile_bytes,
                    static_cast<const char*>(p.w2) + ((int64_t(e) * h_tiles + tile0 + wlo) * tile_bytes), bytes,
                    bars + warp, sm90::l2_evict_first_policy());
  }

  const int groups = p.I / 32;
  const int g = lane >> 2, q = lane & 3;
  const int rows = nt * 16;
  const int kb = (p.I + 127) / 128;
  const int blk0 = tile0 / 8;  // the first 128-row block of the CTA's rows
  if constexpr (F == Format::kFp8) {  // published by the first chunk's __syncthreads
    const int nblk = (tile0 + nt - 1) / 8 - blk0 + 1;
    for (int i = tid; i < nblk * kb; i += kThreads)
      block_scales[i] = ld_f32(p.w2s + (int64_t(e) * (p.H / 128) + blk0) * kb + i);
  }
  bool landed = false;
  for (int c0 = b0; c0 < b1; c0 += kChunkPairs) {
    const int n = min(kChunkPairs, b1 - c0);
    const int nb = n > 8 ? 2 : 1;
    if (tid < kChunkPairs) chunk_pairs[tid] = tid < n ? ix.pair(c0 + tid) : 0;
    __syncthreads();
    // B chunk in fragment order: item i = ((j * groups + gi) * 32 + l) holds bytes [gi*64 + 16*(l&3), +16)
    // of column 8j + (l >> 2); columns past n are zeros (their results are never stored).
    for (int i = tid; i < 2 * groups * 32; i += kThreads) {
      const int l = i & 31, gi = (i >> 5) % groups, j = i / (32 * groups);
      const int col = 8 * j + (l >> 2);
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (col < n)
        v = ld_act(static_cast<const char*>(p.inter) + int64_t(chunk_pairs[col]) * p.I * 2 + gi * 64 + (l & 3) * 16);
      *reinterpret_cast<uint4*>(bchunk + size_t(i) * 16) = v;
    }
    __syncthreads();
    if (whi > wlo) {
      if (!landed) sm90::mbar_wait(bars + warp, 0u);  // each barrier completes once (phase 0)
      landed = true;
      for (int t = wlo; t < whi; ++t) {
        float acc[2][4] = {};
        const float* sc = block_scales + ((tile0 + t) / 8 - blk0) * kb;
        expert_down_tile<F>(wsm + t * tile_bytes, bchunk, sc, p.I, nb, lane, acc);
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            __nv_bfloat16* col = reinterpret_cast<__nv_bfloat16*>(staging + (j * 8 + 2 * q + h) * L.stage_stride);
            col[t * 16 + g] = __float2bfloat16_rn(acc[j][h]);
            col[t * 16 + g + 8] = __float2bfloat16_rn(acc[j][2 + h]);
          }
      }
    }
    __syncthreads();
    const int vecs = rows / 8;  // 16-byte pieces of one pair's slice of y
    for (int i = tid; i < n * vecs; i += kThreads) {
      const int col = i / vecs, v = i - col * vecs;
      const uint4 val = *reinterpret_cast<const uint4*>(staging + col * L.stage_stride + v * 16);
      char* dst = static_cast<char*>(p.y) + (int64_t(chunk_pairs[col]) * p.H + int64_t(tile0) * 16) * 2 + v * 16;
      *reinterpret_cast<uint4*>(dst) = val;
    }
    __syncthreads();  // chunk_pairs, the B chunk and the staging are rewritten by the next chunk
  }
}

template <Format F>
cudaError_t launch_moe_down_experts(const DownExpertParams& p, cudaStream_t stream, bool pdl) {
  const int block_tiles = kExpertDownWarps * p.tiles_per_warp;
  const int h_tiles = p.H / 16;
  if (p.I % 64 || p.H % 128 || p.tiles_per_warp < 1 || block_tiles > kExpertDownMaxBlockTiles ||
      (p.I + 127) / 128 * 4 > kExpertDownScaleWords || p.slab_pairs < 1 || p.task_bound < 1 || p.cap < 1)
    return cudaErrorInvalidValue;
  const ExpertDownSmem L = ExpertDownSmem::layout(p.I, F == Format::kFp8 ? 1 : 2, block_tiles,
                                                  p.num_local_experts < p.cap ? p.num_local_experts : p.cap);
  const dim3 grid((h_tiles + block_tiles - 1) / block_tiles, p.task_bound);
  return hpc::launch_kernel(moe_down_experts_kernel<F>, grid, dim3(kThreads), L.total, stream, pdl, p);
}

}  // namespace hpc::moe
