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
};

constexpr int kThreads = 128;    // 4 warps split K (Gate-Up) or take experts in turn (Down)
constexpr int kChunkPairs = 16;  // pairs (MMA columns) per Gate-Up task and per Down MMA pass

cudaError_t run_gate_up(Format f, const GateUpParams& p, int num_sms, cudaStream_t stream, bool pdl);
cudaError_t run_down(Format f, const DownParams& p, cudaStream_t stream, bool pdl);

}  // namespace hpc::moe
