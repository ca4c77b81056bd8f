// Parameter struct and host entry point of the fused attention prologue (prologue.cuh): plain data
// and raw pointers, no torch. Host-only code (csrc/bindings.cpp) includes this file, never the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hpc::attn {

constexpr int kPrologueHeadDim = 128;
constexpr int kPrologueThreads = 256;
// A team of 16 lanes owns (token, head) rows of 128 values, 8 per lane (16-byte loads): a warp
// holds two teams, a block 16, and each team kPrologueRows rows whose loads are issued together.
constexpr int kPrologueTeam = 16;
constexpr int kPrologueRows = 2;

struct PrologueParams {
  // Inputs. qkv row t holds Hq query heads, then Hkv key heads, then Hkv value heads, 128 BF16 each.
  const void* qkv;             // BF16, [T, (Hq + 2 Hkv) * 128], row stride qkv_stride_t elements
  long long qkv_stride_t;
  const void* positions;       // [T] int32 or int64 (positions_i64); clamped into [0, max_pos)
  const void* cos_sin;         // [max_pos, rotary_dim] FP32 or BF16 (cos_sin_f32): cos half, then sin half
  long long cos_sin_stride;    // elements between positions
  const void* q_norm_weight;   // [128] FP32 or BF16 (norm_f32), nullptr: no RMSNorm on q
  const void* k_norm_weight;   // [128], nullptr: no RMSNorm on k
  const void* slot_mapping;    // [T] int32 or int64 (slots_i64): page * page_size + offset, < 0: skip
  // Outputs. Q: BF16 or E4M3 (kernel template) [T, Hq, 128]; with E4M3, q_scale [T, Hq] float32.
  void* q_out;
  long long q_stride_t, q_stride_h;
  float* q_scale;
  long long q_scale_stride_t, q_scale_stride_h;
  // Paged caches [num_pages, page_size, Hkv, 128] (NHD), BF16 or E4M3 (kernel template).
  void* k_cache;
  void* v_cache;
  long long k_stride_page, k_stride_tok, k_stride_head;
  long long v_stride_page, v_stride_tok, v_stride_head;
  long long num_slots;         // num_pages * page_size: slots at or above it are skipped
  int page_size;
  // Per-tensor KV scales (E4M3 caches): the device scalars when non-null, else the floats.
  const float* k_scale_ptr;
  const float* v_scale_ptr;
  float k_scale, v_scale;
  long long num_tokens;        // T
  int num_qo_heads, num_kv_heads;
  int max_pos;
  int rotary_dim;              // even, <= 128; 0: no rotation
  int neox;                    // 1: rotate (i, i + rotary_dim / 2); 0: GPT-J, rotate (2 j, 2 j + 1)
  float eps;                   // RMSNorm epsilon (> 0)
  int positions_i64, slots_i64, cos_sin_f32, norm_f32;
  int cos_sin_vec;             // rotary_dim % 16 == 0 and 16-byte aligned rows: vector loads of cos / sin
};

// Launches the prologue on `stream` (PDL attribute when `pdl`). fp8_kv: the caches are E4M3 (else
// BF16); fp8_q: Q out is E4M3 with per-(token, head) scales (else BF16). Returns the launch error,
// or cudaErrorInvalidValue for a head layout or rotary dim the kernel does not take.
cudaError_t run_qk_norm_rope_store(const PrologueParams& p, bool fp8_kv, bool fp8_q, cudaStream_t stream, bool pdl);

}  // namespace hpc::attn
