// Device primitives of the FP8 quantisation kernels: exact float32 arithmetic that fast-math
// flags cannot change, E4M3 conversion, element packs, team reductions and segment indexing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/fp8_quant_params.h"

namespace hpc {
namespace fp8 {

// ---------------------------------------------------------------------------------------
// Device primitives
// ---------------------------------------------------------------------------------------

// IEEE float32 division, round to nearest even, denormals kept (explicit non-ftz PTX, so
// --use_fast_math / -ftz cannot change it).
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// |f| as bits if f is finite, else 0: an unsigned max over these is the finite amax, exact
// and independent of order and of flush-to-zero.
__device__ __forceinline__ uint32_t finite_abs_bits(float f) {
  uint32_t b = __float_as_uint(f) & 0x7fffffffu;
  return b < 0x7f800000u ? b : 0u;
}

__device__ __forceinline__ float scale_from_amax_bits(uint32_t amax_bits, bool ue8m0) {
  const uint32_t floor_bits = __float_as_uint(kAmaxFloor);
  float s = div_rn(__uint_as_float(amax_bits > floor_bits ? amax_bits : floor_bits), kE4M3Max);
  if (ue8m0) {
    uint32_t b = __float_as_uint(s);  // s is normal: kAmaxFloor / 448 > FLT_MIN
    if (b & 0x007fffffu) b = (b & 0x7f800000u) + 0x00800000u;
    s = __uint_as_float(b);
  }
  return s;
}

// Two floats -> two E4M3 bytes (lo in the low byte), RNE, saturating to +-448.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Every NaN byte (0x7F or 0xFF) becomes 0x7F.
__device__ __forceinline__ uint32_t canonical_nan4(uint32_t w) {
  return w & ~(__vcmpeq4(w, 0xffffffffu) & 0x80808080u);
}

// Raw element storage and its exact conversion to float32, per input dtype.
template <int DT>
struct Elem;
template <>
struct Elem<kBF16> {
  using raw = uint16_t;
  static __device__ __forceinline__ float to_f32(raw b) { return __uint_as_float(uint32_t(b) << 16); }
};
template <>
struct Elem<kFP16> {
  using raw = uint16_t;
  static __device__ __forceinline__ float to_f32(raw b) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
  }
};
template <>
struct Elem<kFP32> {
  using raw = uint32_t;
  static __device__ __forceinline__ float to_f32(raw b) { return __uint_as_float(b); }
};

// VEC elements loaded together (16 bytes when VEC > 1).
template <int DT, int VEC>
struct Pack {
  using raw = typename Elem<DT>::raw;
  raw v[VEC];
  __device__ __forceinline__ void load(const raw* p) {
    if constexpr (VEC == 1) {
      v[0] = __ldg(p);
    } else {
      static_assert(VEC * sizeof(raw) == 16, "vector path moves 16 bytes");
      uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
      *reinterpret_cast<uint4*>(v) = u;
    }
  }
  __device__ __forceinline__ uint32_t amax_bits() const {
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < VEC; ++i) m = max(m, finite_abs_bits(Elem<DT>::to_f32(v[i])));
    return m;
  }
  // Quantise with the reciprocal scale and store VEC bytes at q (VEC-byte aligned when VEC > 1).
  __device__ __forceinline__ void store_quantised(uint8_t* q, float inv) const {
    if constexpr (VEC == 1) {
      q[0] = uint8_t(canonical_nan4(e4m3x2(mul_rn(Elem<DT>::to_f32(v[0]), inv), 0.0f)) & 0xffu);
    } else {
      uint32_t w[VEC / 4];
#pragma unroll
      for (int j = 0; j < VEC / 4; ++j) {
        const float f0 = mul_rn(Elem<DT>::to_f32(v[4 * j + 0]), inv);
        const float f1 = mul_rn(Elem<DT>::to_f32(v[4 * j + 1]), inv);
        const float f2 = mul_rn(Elem<DT>::to_f32(v[4 * j + 2]), inv);
        const float f3 = mul_rn(Elem<DT>::to_f32(v[4 * j + 3]), inv);
        w[j] = canonical_nan4(e4m3x2(f0, f1) | (e4m3x2(f2, f3) << 16));
      }
      if constexpr (VEC == 8) {
        __stcs(reinterpret_cast<uint2*>(q), make_uint2(w[0], w[1]));
      } else {
        __stcs(reinterpret_cast<unsigned int*>(q), w[0]);
      }
    }
  }
};

// Max over the `team` threads that share a segment. team <= 32: shuffles inside the warp.
// team > 32: whole warps, through shared memory; every thread of the block must call it
// (the launcher guarantees uniform trip counts).
__device__ __forceinline__ uint32_t team_max(uint32_t v, int team, uint32_t* red) {
  if (team <= 32) {
    for (int off = team >> 1; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x >> 5;
  __syncthreads();  // the previous call's readers are done with red[]
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  const int wpt = team >> 5, first = (threadIdx.x / team) * wpt;
  v = 0;
  for (int w = 0; w < wpt; ++w) v = max(v, red[first + w]);
  return v;
}

__device__ __forceinline__ uint32_t block_max(uint32_t v, uint32_t* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) v = max(v, red[w]);
  return v;
}

// Where segment `seg` lives.
struct Segment {
  int64_t row, g, x_off, q_off, len;
};

// a / b with a 32-bit division when both fit (the common case; 64-bit division is slow).
__device__ __forceinline__ int64_t div_index(int64_t a, int64_t b) {
  if (b == 1) return a;
  if (((a | b) >> 32) == 0) return int64_t(uint32_t(a) / uint32_t(b));
  return a / b;
}

__device__ __forceinline__ Segment locate(const QuantParams& p, int64_t seg) {
  Segment s;
  s.row = div_index(seg, p.segs_per_row);
  s.g = seg - s.row * p.segs_per_row;
  const int64_t t = div_index(s.row, p.heads), h = s.row - t * p.heads;
  const int64_t col = s.g * p.seg_len;
  s.x_off = t * p.x_stride_t + h * p.x_stride_h + col;
  s.q_off = t * p.q_stride_t + h * p.q_stride_h + col;
  s.len = min(p.seg_len, p.row_len - col);
  return s;
}

// One pass over a segment: thread `lane` of the team loads vectors lane, lane + team, ...
// (vec_per_thread(VEC) of them, all issued before any is used; consecutive lanes read consecutive
// 16-byte vectors, so a warp's loads are coalesced).
template <int DT, int VEC>
__device__ __forceinline__ void load_pass(Pack<DT, VEC> (&pk)[vec_per_thread(VEC)], const typename Elem<DT>::raw* xs,
                                          int64_t first, int team, int64_t nvec) {
#pragma unroll
  for (int k = 0; k < vec_per_thread(VEC); ++k) {
    const int64_t v = first + int64_t(k) * team;
    if (v < nvec) pk[k].load(xs + v * VEC);
  }
}

template <int DT, int VEC>
__device__ __forceinline__ uint32_t amax_pass(const Pack<DT, VEC> (&pk)[vec_per_thread(VEC)], int64_t first, int team,
                                              int64_t nvec) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < vec_per_thread(VEC); ++k) {
    if (first + int64_t(k) * team < nvec) m = max(m, pk[k].amax_bits());
  }
  return m;
}

}  // namespace fp8
}  // namespace hpc
