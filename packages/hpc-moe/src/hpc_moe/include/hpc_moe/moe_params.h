// The fused-MoE kernels' parameter structs and C entry points (no torch types: bindings.cpp
// passes raw pointers, sizes and the stream). DESIGN.md describes the pipeline and the layouts.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hpc::moe {

// Weight format of a kernel: BF16 weights, or FP8 E4M3 weights with FP32 block scales (per-tensor
// scales are expanded into the block layout at prepare time, so both FP8 formats share kernels).
enum class Format : int { kBf16 = 0, kFp8 = 1 };

// Pairs (t, j) of topk_ids [T, K] are numbered p = t * K + j; `inter` is indexed by p.
struct GateUpParams {
  const void* x;            // BF16 hidden [T, H] or FP8 xq [T, H]
  int64_t x_row_bytes;      // row stride of x in bytes (a multiple of 16)
  const float* xs;          // FP8: activation scale of (t, kb) at xs[t * xs_stride_t + kb * xs_stride_kb]
  int64_t xs_stride_t;
  int64_t xs_stride_kb;
  const void* w13;          // prepared [E_local, I/8, 16*H]
  const float* w13s;        // FP8: prepared [E_local, I/8, H/128, 2]
  const void* topk_ids;     // [T, K] int32 or int64, global expert ids
  int ids_int64;
  void* inter;              // BF16 [T*K, I]: silu(gate) * up per pair
  int T, K, H, I;
  int expert_start;         // global id of local expert 0
  int num_local_experts;
  int ids_before_wait;      // 1: the previous kernel on the stream has passed its PDL wait
  int* down_index;          // or null: CTA 0 writes the window's index here for the expert-form Down
};

struct DownParams {
  const void* inter;        // BF16 [T*K, I]
  const void* w2;           // prepared [E_local, H/16, 16*I]
  const float* w2s;         // FP8: [E_local, H/128, ceil(I/128)]
  const void* topk_ids;
  int ids_int64;
  const float* topk_weights;  // [T, K] FP32
  const void* shared;       // BF16 [T, H] rows `shared_stride` elements apart, or null
  int64_t shared_stride;
  void* out;                // BF16 [T, H] rows `out_stride` elements apart
  int64_t out_stride;
  int T, K, H, I;
  int expert_start;
  int num_local_experts;
  int chunk_tokens;         // tokens per CTA (gridDim.x = ceil(T / chunk_tokens), gridDim.y = H / 16)
  int prefetch_w2;          // 1: prefetch the active experts' w2 tiles to L2 before the PDL wait
  int expert_splits;        // gridDim.z: CTAs sharing a (chunk, tile), each over every splits-th group of
                            // 4 active experts; > 1 writes per-pair partials to y (the top-k reduce sums them)
  void* y;                  // BF16 [T*K, H] partial rows when expert_splits > 1, else unused
};

// The routing index of one window as the Gate-Up kernel's CTA 0 writes it for the expert-form Down
// (int32 words, `cap` = the window's pairs): [0] the number of active local experts n; [1, 1 + n) the
// active experts ascending; [1 + cap, 2 + cap + n) the start of each one's range in the list and, last,
// the pairs kept; [2 + 2 cap, ...) the list of pair indices (relative to the window), each expert's
// range contiguous. Inside a range the order is CTA 0's (shared atomics): every Down CTA reads this one
// copy, so slabs of a range taken by different CTAs never overlap or miss a pair.
struct DownIndex {
  const int* w;
  int cap;
  __host__ __device__ int num_active() const { return w[0]; }
  __host__ __device__ int expert(int a) const { return w[1 + a]; }
  __host__ __device__ int start(int a) const { return w[1 + cap + a]; }
  __host__ __device__ int pair(int slot) const { return w[2 + 2 * cap + slot]; }
};

// Expert-form Down GEMM (moe_down_experts.cuh): per-pair partial rows, no reduce.
struct DownExpertParams {
  const void* inter;        // BF16 [cap, I] (the window's pairs)
  const void* w2;           // prepared [E_local, H/16, 16*I]
  const float* w2s;         // FP8: [E_local, H/128, ceil(I/128)]
  const int* index;         // DownIndex words of the window (written by the Gate-Up kernel ahead)
  void* y;                  // BF16 [cap, H]: y[p] = W2[e_p] inter[p] for the pairs routed here
  int cap;                  // the window's pairs (T * K)
  int H, I;
  int num_local_experts;
  int tiles_per_warp;       // 16-row tiles per warp and CTA (heuristics.expert_down_tiles_per_warp)
  int slab_pairs;           // pairs per task at most (heuristics.EXPERT_DOWN_SLAB_PAIRS)
  int task_bound;           // gridDim.y: an upper bound on the (expert, slab) tasks of any routing
};

// The top-k weighted reduce of the expert form (moe_topk_reduce.cuh):
// out[t] = sum_j topk_weights[t, j] * y[t * K + j] over the local pairs in j order (+ shared[t]).
struct TopkReduceParams {
  const void* y;            // BF16 [T*K, H]
  const void* topk_ids;
  int ids_int64;
  const float* topk_weights;
  const void* shared;       // BF16 [T, H] rows `shared_stride` elements apart, or null
  int64_t shared_stride;
  void* out;                // BF16 [T, H] rows `out_stride` elements apart, 16-byte aligned rows
  int64_t out_stride;
  int T, K, H;
  int expert_start;
  int num_local_experts;
};

constexpr int kThreads = 128;    // 4 warps split K (Gate-Up), take experts in turn (tile-form Down) or tiles (expert form)
constexpr int kChunkPairs = 16;  // pairs (MMA columns) per Gate-Up task and per Down MMA pass

cudaError_t run_gate_up(Format f, const GateUpParams& p, int num_sms, cudaStream_t stream, bool pdl);
cudaError_t run_down(Format f, const DownParams& p, cudaStream_t stream, bool pdl);
cudaError_t run_down_experts(Format f, const DownExpertParams& p, cudaStream_t stream, bool pdl);
cudaError_t run_topk_reduce(const TopkReduceParams& p, cudaStream_t stream, bool pdl);

}  // namespace hpc::moe
