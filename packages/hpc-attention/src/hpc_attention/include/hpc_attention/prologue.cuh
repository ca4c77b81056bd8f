// The fused attention prologue: one kernel between the QKV projection and the attention.
//
// For every token t of qkv [T, (Hq + 2 Hkv) * 128] (BF16) it
//   - normalises each query and key head with RMSNorm (optional, weights [128], eps given),
//   - rotates them with RoPE at positions[t] (neox or GPT-J pairs over the first rotary_dim values,
//     cos / sin from cos_sin_cache[position], the vLLM / SGLang layout),
//   - writes Q as BF16, or as E4M3 with one scale per (token, head) (amax / 448, the layout
//     decode(q_scale=...) reads),
//   - writes the rotated K and the plain V at slot_mapping[t] into the paged caches
//     [num_pages, page_size, Hkv, 128], BF16 or E4M3 with per-tensor scales (value * (1 / scale),
//     RNE, saturating: hpc_common's FP8 rule); negative slots (padding) write nothing.
// All arithmetic is float32; the order of every sum and max is fixed, so results are bitwise
// reproducible.
//
// Work split: a team of 16 lanes owns one (token, head) row, 8 consecutive values per lane, so
// every row is one 256-byte coalesced read and the RMSNorm sum and the FP8 amax are 4 shuffles. Rows
// are numbered token-major (the heads of a token share one CTA and its cos / sin row in L1); each team
// takes kPrologueRows consecutive rows and issues their loads together, the grid covers every row once.
// A team loads a token's cos / sin once for all its rows of that token; with two rows per team its q / k
// rows are always of one token (a pair crosses a token boundary only after the last head, a V row), so
// one dependent cos / sin load per team. GPT-J pairs sit in one lane; neox pairs are one shuffle apart
// (rotary_dim a multiple of 16) or go through shared memory (other rotary dims).
//
// PDL: the kernel waits for the previous kernel (the QKV projection) before its first load and then
// lets the next kernel (decode) launch at once, so the decode's start-up overlaps this kernel. With no
// shared memory (every rotary dim that is a multiple of 16), shared memory does not keep a decode CTA
// (~222 KB of the SM's 228) off an SM that runs prologue CTAs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/prologue_params.h"
#include "hpc_common/fp8_primitives.cuh"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

namespace prologue {

constexpr int kVec = kPrologueHeadDim / kPrologueTeam;  // values per lane
static_assert(kVec == 8, "one 16-byte BF16 vector per lane");

__device__ __forceinline__ float team_sum(float v, unsigned mask) {
#pragma unroll
  for (int o = kPrologueTeam / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, kPrologueTeam);
  return v;
}

__device__ __forceinline__ uint32_t team_max(uint32_t v, unsigned mask) {
#pragma unroll
  for (int o = kPrologueTeam / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(mask, v, o, kPrologueTeam));
  return v;
}

__device__ __forceinline__ void bf16x8_to_f32(const uint4& u, float (&x)[kVec]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    x[2 * j] = __uint_as_float(w[j] << 16);
    x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 f32_to_bf16x8(const float (&x)[kVec]) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(x[2 * j], x[2 * j + 1]);  // .x (low half) = x[2 j]
    w[j] = *reinterpret_cast<const uint32_t*>(&b);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// E4M3 codes of x * inv (IEEE product, RNE, saturating, one NaN code), 8 bytes.
__device__ __forceinline__ uint2 f32_to_e4m3x8(const float (&x)[kVec], float inv) {
  uint32_t w[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float f[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = fp8::mul_rn(x[4 * j + e], inv);
    w[j] = fp8::canonical_nan4(fp8::e4m3x2(f[0], f[1]) | (fp8::e4m3x2(f[2], f[3]) << 16));
  }
  return make_uint2(w[0], w[1]);
}

// 8 consecutive FP32 or BF16 values from a 16-byte aligned address (the norm weights).
__device__ __forceinline__ void load8(const void* base, int first, bool f32, float (&w)[kVec]) {
  if (f32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + first);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else {
    bf16x8_to_f32(__ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(base) + first)), w);
  }
}

__device__ __forceinline__ float load1(const void* base, long long i, bool f32) {
  if (f32) return __ldg(static_cast<const float*>(base) + i);
  return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(base) + i)) << 16);
}

__device__ __forceinline__ long long load_index(const void* base, long long i, bool i64) {
  return i64 ? __ldg(static_cast<const long long*>(base) + i) : __ldg(static_cast<const int*>(base) + i);
}

// 4 consecutive FP32 or BF16 values from a 16-byte (FP32) or 8-byte (BF16) aligned address.
__device__ __forceinline__ void load4(const void* base, long long first, bool f32, float (&w)[4]) {
  if (f32) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(base) + first));
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
  } else {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(base) + first));
    w[0] = __uint_as_float(u.x << 16), w[1] = __uint_as_float(u.x & 0xffff0000u);
    w[2] = __uint_as_float(u.y << 16), w[3] = __uint_as_float(u.y & 0xffff0000u);
  }
}

// cos / sin of the values this lane rotates, read as soon as the position is known (before the norm's
// reduction, so their latency overlaps it). Neox: value i < rotary_dim pairs with i +- rotary_dim / 2 and
// uses entry i mod (rotary_dim / 2); GPT-J: values 2 j, 2 j + 1 use entry j (kept in c[2 j'], s[2 j']).
// With cos_sin_vec (rotary_dim a multiple of 16, rows 16-byte aligned) a lane's entries are consecutive
// and aligned: 4 vector loads (neox) or 2 (GPT-J) instead of 16 scalar ones.
__device__ __forceinline__ void load_cos_sin(const PrologueParams& p, long long pos, int l, float (&c)[kVec],
                                             float (&s)[kVec]) {
  const int rot = p.rotary_dim, half = rot >> 1;
  pos = pos < 0 ? 0 : (pos >= p.max_pos ? p.max_pos - 1 : pos);  // never read outside the cache
  const long long row = pos * p.cos_sin_stride;
  if (p.cos_sin_vec) {
    if (l * kVec >= rot) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) c[e] = 1.f, s[e] = 0.f;
    } else if (p.neox) {
      const int j0 = l * kVec < half ? l * kVec : l * kVec - half;
      float a[4], b[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        load4(p.cos_sin, row + j0 + 4 * h, p.cos_sin_f32, a);
        load4(p.cos_sin, row + half + j0 + 4 * h, p.cos_sin_f32, b);
#pragma unroll
        for (int e = 0; e < 4; ++e) c[4 * h + e] = a[e], s[4 * h + e] = b[e];
      }
    } else {
      float a[4], b[4];
      load4(p.cos_sin, row + l * (kVec / 2), p.cos_sin_f32, a);
      load4(p.cos_sin, row + half + l * (kVec / 2), p.cos_sin_f32, b);
#pragma unroll
      for (int e = 0; e < 4; ++e) c[2 * e] = a[e], s[2 * e] = b[e], c[2 * e + 1] = 1.f, s[2 * e + 1] = 0.f;
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    const int i = l * kVec + e;
    const int j = p.neox ? (i < half ? i : i - half) : (i >> 1);
    const bool used = i < rot && (p.neox || (e & 1) == 0);
    c[e] = used ? load1(p.cos_sin, row + j, p.cos_sin_f32) : 1.f;
    s[e] = used ? load1(p.cos_sin, row + half + j, p.cos_sin_f32) : 0.f;
  }
}

// RMSNorm (when `weight`) then RoPE of one q / k row held as 8 values per lane (lane `l` of the team).
// Neox pairs (i, i + rotary_dim / 2) cross lanes: with cos_sin_vec (rotary_dim a multiple of 16) the partner
// of a lane's 8 values is the 8 values of lane l +- rotary_dim / 16, one shuffle each; other rotary dims go
// through `row`, the team's 128 floats of dynamic shared memory (the launch asks for it only then).
__device__ __forceinline__ void norm_rope(float (&x)[kVec], const PrologueParams& p, const void* weight,
                                          const float (&c)[kVec], const float (&s)[kVec], int l, unsigned mask,
                                          float* row) {
  if (weight != nullptr) {
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) ss = fmaf(x[e], x[e], ss);
    const float r = rsqrtf(team_sum(ss, mask) * (1.f / kPrologueHeadDim) + p.eps);
    float w[kVec];
    load8(weight, l * kVec, p.norm_f32, w);
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = x[e] * r * w[e];
  }
  const int rot = p.rotary_dim, half = rot >> 1;
  if (rot == 0) return;
  if (p.neox) {
    float other[kVec];
    if (p.cos_sin_vec) {
      const int lanes = half / kVec;  // lanes per half of the rotated span
      const int src = l * kVec < half ? l + lanes : (l * kVec < rot ? l - lanes : l);
#pragma unroll
      for (int e = 0; e < kVec; ++e) other[e] = __shfl_sync(mask, x[e], src, kPrologueTeam);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) row[l * kVec + e] = x[e];
      __syncwarp(mask);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int i = l * kVec + e;
        other[e] = i < half ? row[i + half] : (i < rot ? row[i - half] : 0.f);
      }
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int i = l * kVec + e;
      // (x_i, x_{i+half}) -> (x_i cos - x_{i+half} sin, x_{i+half} cos + x_i sin)
      if (i < rot) x[e] = x[e] * c[e] + (i < half ? -other[e] : other[e]) * s[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < kVec; e += 2) {
      if (l * kVec + e < rot) {
        const float a = x[e], b = x[e + 1];
        x[e] = a * c[e] - b * s[e];
        x[e + 1] = b * c[e] + a * s[e];
      }
    }
  }
}

// Dynamic shared memory of the launch: kPrologueRows x teams x 128 floats for neox without cos_sin_vec, else none.
__host__ __device__ constexpr int smem_bytes(bool neox_rows) {
  return neox_rows ? kPrologueRows * (kPrologueThreads / kPrologueTeam) * kPrologueHeadDim * 4 : 0;
}

// Where slot `slot` of head `head` starts in a [num_pages, page_size, Hkv, 128] cache (elements).
__device__ __forceinline__ long long cache_offset(long long slot, int page_size, long long s_page, long long s_tok,
                                                  long long s_head, int head) {
  const long long page = slot / page_size;
  return page * s_page + (slot - page * page_size) * s_tok + head * s_head;
}

// One 16-byte store of 8 BF16 values at element `at`, spelled out: written as a uint4 assignment, nvcc 13.0
// split these stores into four 4-byte ones (st.global.u32 x 4 in the PTX: four times the store instructions
// and L2 write requests per row), and __stwb makes them strong (STG.E.128.STRONG.SM). The 8-byte FP8
// stores compile to single weak vector stores as written.
__device__ __forceinline__ void store_bf16x8(void* base, long long at, const uint4& v) {
  uint4* ptr = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(base) + at);
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
#else
  *ptr = v;  // host emulation (tests/attention/prologue_emu)
#endif
}

template <bool kFp8>
__device__ __forceinline__ void store_kv(void* cache, long long at, const float (&x)[kVec], float inv) {
  if constexpr (kFp8) {
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(cache) + at) = f32_to_e4m3x8(x, inv);
  } else {
    store_bf16x8(cache, at, f32_to_bf16x8(x));
  }
}

}  // namespace prologue

// At least 3 CTAs per SM: 67-70 registers, no spills (without the minimum, ptxas held the FP8-KV / BF16-Q
// instantiation to 64 registers and spilled).
template <bool kFp8Kv, bool kFp8Q>
__global__ void __launch_bounds__(kPrologueThreads, 3) qk_norm_rope_store_kernel(const __grid_constant__ PrologueParams p) {
  using namespace prologue;
  constexpr int kTeams = kPrologueThreads / kPrologueTeam, R = kPrologueRows;
  extern __shared__ float prologue_rows[];  // [R][kTeams][128], one per row: no barrier between a team's rows
  const int team = threadIdx.x / kPrologueTeam, l = threadIdx.x % kPrologueTeam;
  const unsigned mask = 0xffffu << (threadIdx.x & 16);  // the 16 lanes of this team in its warp
  const int Hq = p.num_qo_heads, Hkv = p.num_kv_heads, heads = Hq + 2 * Hkv;

  hpc::pdl_wait();  // qkv, positions, slot_mapping and scale tensors come from the kernels before this one
  hpc::pdl_launch_dependents();

  // FP8 caches: the per-tensor scales (device scalars when given) are loaded here, with the rows, not at the
  // first K / V store (there they were a further dependent load after the row's math).
  float k_scale = p.k_scale, v_scale = p.v_scale;
  if constexpr (kFp8Kv) {
    if (p.k_scale_ptr != nullptr) k_scale = __ldg(p.k_scale_ptr);
    if (p.v_scale_ptr != nullptr) v_scale = __ldg(p.v_scale_ptr);
  }

  // Row r of the team is unit (block * kTeams + team) * R + r: the team's rows are neighbouring heads, so its
  // q / k rows share one cos / sin row (see the top of the file). All loads of all rows are issued before any
  // is processed (bytes in flight per SM: the grid is bandwidth-bound from a few thousand tokens up). Every
  // branch below is uniform over the team.
  long long t[R], slot[R], pos[R];
  int h[R], kind[R];
  uint4 raw[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long unit = (static_cast<long long>(blockIdx.x) * kTeams + team) * R + r;
    t[r] = unit / heads;
    h[r] = static_cast<int>(unit - t[r] * heads);
    kind[r] = t[r] >= p.num_tokens ? -1 : (h[r] < Hq ? 0 : (h[r] < Hq + Hkv ? 1 : 2));  // -1 none, q, k, v
    slot[r] = 0;
    pos[r] = 0;
    if (kind[r] >= 0) {  // the row is read whatever its slot says: the K / V store waits on one load, not two
      raw[r] = __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.qkv) +
                                                    t[r] * p.qkv_stride_t + h[r] * kPrologueHeadDim + l * kVec));
      if (kind[r] > 0) slot[r] = load_index(p.slot_mapping, t[r], p.slots_i64);
      if (kind[r] < 2 && p.rotary_dim > 0) pos[r] = load_index(p.positions, t[r], p.positions_i64);
    }
  }
  float c[kVec], s[kVec];
  long long cs_token = -1;  // the token whose cos / sin are in c, s
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (kind[r] < 0) continue;
    if (kind[r] > 0 && (slot[r] < 0 || slot[r] >= p.num_slots)) continue;  // padding (or past the cache): no write
    if (kind[r] == 2) {
      const long long at = cache_offset(slot[r], p.page_size, p.v_stride_page, p.v_stride_tok, p.v_stride_head,
                                        h[r] - Hq - Hkv) + l * kVec;
      if constexpr (kFp8Kv) {
        float x[kVec];
        bf16x8_to_f32(raw[r], x);
        store_kv<true>(p.v_cache, at, x, fp8::div_rn(1.f, v_scale));
      } else {
        store_bf16x8(p.v_cache, at, raw[r]);
      }
      continue;
    }
    if (p.rotary_dim > 0 && t[r] != cs_token) {
      load_cos_sin(p, pos[r], l, c, s);
      cs_token = t[r];
    }
    float x[kVec];
    bf16x8_to_f32(raw[r], x);
    norm_rope(x, p, kind[r] == 0 ? p.q_norm_weight : p.k_norm_weight, c, s, l, mask,
              prologue_rows + (r * kTeams + team) * kPrologueHeadDim);
    if (kind[r] == 1) {
      const long long at = cache_offset(slot[r], p.page_size, p.k_stride_page, p.k_stride_tok, p.k_stride_head,
                                        h[r] - Hq) + l * kVec;
      store_kv<kFp8Kv>(p.k_cache, at, x, kFp8Kv ? fp8::div_rn(1.f, k_scale) : 1.f);
      continue;
    }
    const long long at = t[r] * p.q_stride_t + h[r] * p.q_stride_h + l * kVec;
    if constexpr (kFp8Q) {
      // Per-(token, head) scale: finite amax of the rotated row / 448 (hpc_common.fp8's rule).
      uint32_t a = 0;
#pragma unroll
      for (int e = 0; e < kVec; ++e) a = max(a, fp8::finite_abs_bits(x[e]));
      const float scale = fp8::scale_from_amax_bits(team_max(a, mask), false);
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.q_out) + at) = f32_to_e4m3x8(x, fp8::div_rn(1.f, scale));
      if (l == 0) p.q_scale[t[r] * p.q_scale_stride_t + h[r] * p.q_scale_stride_h] = scale;
    } else {
      store_bf16x8(p.q_out, at, f32_to_bf16x8(x));
    }
  }
}

template <bool kFp8Kv, bool kFp8Q>
inline cudaError_t launch_qk_norm_rope_store(const PrologueParams& p, cudaStream_t stream, bool pdl) {
  constexpr int kRowsPerBlock = kPrologueThreads / kPrologueTeam * kPrologueRows;
  const long long units = p.num_tokens * (p.num_qo_heads + 2 * p.num_kv_heads);
  if (units <= 0) return cudaSuccess;
  const long long blocks = (units + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int smem = prologue::smem_bytes(p.neox && p.rotary_dim > 0 && !p.cos_sin_vec);
  return hpc::launch_kernel(qk_norm_rope_store_kernel<kFp8Kv, kFp8Q>, dim3(static_cast<unsigned>(blocks)),
                            dim3(kPrologueThreads), smem, stream, pdl, p);
}


}  // namespace hpc::attn
