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

// Every NaN byte (0x7F or 0xFF) becomes 0x7F: bit 7 of ((b & 0x7f) + 1) is set only when the
// low seven bits are all ones (no carry leaves the byte), so the XOR clears the sign of 0xFF
// bytes alone. 3 instructions per 4 bytes (__vcmpeq4 took 6 on sm_90).
__device__ __forceinline__ uint32_t canonical_nan4(uint32_t w) {
  return w ^ (((w & 0x7f7f7f7fu) + 0x01010101u) & w & 0x80808080u);
}

__device__ __forceinline__ uint32_t max_s16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.s16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ __forceinline__ uint32_t max_u16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
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
  __device__ __forceinline__ uint32_t word(int i) const { return reinterpret_cast<const uint32_t*>(v)[i]; }
  // Element i as float32 (exact). 16-bit types are read from their 32-bit word: a bf16 in the
  // high half is the word with the low half masked (one LOP3, where the uint16 element took a
  // PRMT and a shift).
  __device__ __forceinline__ float f32(int i) const {
    if constexpr (DT == kBF16 && VEC > 1) {
      const uint32_t w = word(i >> 1);
      return __uint_as_float((i & 1) ? (w & 0xffff0000u) : (w << 16));
    } else {
      return Elem<DT>::to_f32(v[i]);
    }
  }
  __device__ __forceinline__ uint32_t amax_bits() const;  // after AmaxAcc, below
  // The VEC / 4 words of FP8 codes (VEC > 1): IEEE product with the reciprocal scale, RNE
  // satfinite conversion, one NaN code.
  // kMayHoldNaN false: the caller knows every element is finite (MagnitudeMax::finite), so the NaN
  // code needs no fix-up (3 instructions per 4 bytes).
  template <bool kMayHoldNaN = true>
  __device__ __forceinline__ void quantised_words(float inv, uint32_t (&w)[VEC / 4]) const {
#pragma unroll
    for (int j = 0; j < VEC / 4; ++j) {
      float f[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) f[e] = mul_rn(f32(4 * j + e), inv);
      w[j] = e4m3x2(f[0], f[1]) | (e4m3x2(f[2], f[3]) << 16);
      if constexpr (kMayHoldNaN) w[j] = canonical_nan4(w[j]);
    }
  }
  // Zero the elements outside [lo, hi) (a masked vector of fp8_quant_small_seg.cuh: +0 leaves a
  // finite amax unchanged). Branch-free on whole words: the lanes of a team hold boundary and
  // inner vectors side by side, and a per-element branch diverged there (H200: the masked
  // kernel issue-bound at ~2x the unmasked kernel's instructions).
  __device__ __forceinline__ void keep_range(int lo, int hi) {
    const int a = lo > 0 ? lo : 0, b = hi < VEC ? hi : VEC;
    const uint32_t m = (0xffffu << a) & ~(0xffffu << b);  // bit i: element i is kept
    uint32_t* w = reinterpret_cast<uint32_t*>(v);
    if constexpr (sizeof(raw) == 2) {
#pragma unroll
      for (int k = 0; k < VEC / 2; ++k) {
        const uint32_t keep = ((0u - ((m >> (2 * k)) & 1u)) & 0xffffu) | ((0u - ((m >> (2 * k + 1)) & 1u)) << 16);
        w[k] &= keep;
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) w[k] &= 0u - ((m >> k) & 1u);
    }
  }
  // AND the vector's four 32-bit words with m (the odd-row kernel's amax masks).
  __device__ __forceinline__ void and_words(const uint32_t (&m)[4]) {
    uint32_t* w = reinterpret_cast<uint32_t*>(v);
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] &= m[k];
  }
  // The bytes [lo, hi) of quantised words w, stored at q (VEC > 1; q VEC-byte aligned): the other
  // bytes belong to a neighbouring segment. Naturally aligned 1-, 2- and 4-byte pieces, at most
  // 3 stores for VEC = 8 (one byte each took up to 7).
  static __device__ __forceinline__ void store_words_range(uint8_t* q, const uint32_t (&w)[VEC / 4], int lo,
                                                           int hi) {
    static_assert(VEC > 1, "vector path only");
    uint64_t all = w[0];
    if constexpr (VEC == 8) all |= uint64_t(w[1]) << 32;
    int i = lo > 0 ? lo : 0;
    const int end = hi < VEC ? hi : VEC;
    if ((i & 1) && i < end) q[i] = uint8_t(all >> (8 * i)), i += 1;
    if ((i & 2) && i + 2 <= end) *reinterpret_cast<uint16_t*>(q + i) = uint16_t(all >> (8 * i)), i += 2;
    if ((i & 4) && i + 4 <= end) *reinterpret_cast<uint32_t*>(q + i) = uint32_t(all >> (8 * i)), i += 4;
    if (i + 4 <= end) *reinterpret_cast<uint32_t*>(q + i) = uint32_t(all >> (8 * i)), i += 4;
    if (i + 2 <= end) *reinterpret_cast<uint16_t*>(q + i) = uint16_t(all >> (8 * i)), i += 2;
    if (i < end) q[i] = uint8_t(all >> (8 * i));
  }
  // All VEC bytes of quantised words w at q (VEC > 1; VEC-byte aligned), streaming stores.
  static __device__ __forceinline__ void store_words(uint8_t* q, const uint32_t (&w)[VEC / 4]) {
    if constexpr (VEC == 8) {
      __stcs(reinterpret_cast<uint2*>(q), make_uint2(w[0], w[1]));
    } else {
      __stcs(reinterpret_cast<unsigned int*>(q), w[0]);
    }
  }
  // Quantise with the reciprocal scale and store VEC bytes at q (VEC-byte aligned when VEC > 1).
  template <bool kMayHoldNaN = true>
  __device__ __forceinline__ void store_quantised(uint8_t* q, float inv) const {
    if constexpr (VEC == 1) {
      q[0] = uint8_t(canonical_nan4(e4m3x2(mul_rn(Elem<DT>::to_f32(v[0]), inv), 0.0f)) & 0xffu);
    } else {
      uint32_t w[VEC / 4];
      quantised_words<kMayHoldNaN>(inv, w);
      store_words(q, w);
    }
  }
};

// Element e of a segment quantised on its own (the scalar head and tail of a peeled segment).
template <int DT>
__device__ __forceinline__ void store_quantised_element(const typename Elem<DT>::raw* xs, uint8_t* qs, int e,
                                                        float inv) {
  Pack<DT, 1> one;
  one.v[0] = xs[e];
  one.store_quantised(qs + e, inv);
}

// A finite magnitude in DT's own bit pattern (sign cleared; for fp32 the float32 bits themselves) as float32
// bits, exactly: AmaxAcc's and MagnitudeMax's result.
template <int DT>
__device__ __forceinline__ uint32_t magnitude_f32_bits(uint32_t m) {
  if constexpr (DT == kBF16) {
    return m << 16;
  } else if constexpr (DT == kFP16) {
    return __float_as_uint(Elem<kFP16>::to_f32(uint16_t(m)));
  } else {
    return m;
  }
}

// Running maximum of |x| over finite elements, in a form that costs few instructions per
// element; bits() gives it as float32 bits (0 when there is no finite nonzero element), equal
// to max over the elements of finite_abs_bits(float32(x)) (the conversions are exact and
// monotone in the bit patterns).
// - bf16 / fp16 vectors: per 16-bit half, d = (x & 0x7fff) + bias with bias = 0x80 (bf16) or
//   0x400 (fp16). A finite |x| is below 0x7f80 / 0x7c00, so its d stays below 0x8000 and keeps
//   the order of |x|; Inf and NaN give d >= 0x8000, negative as int16, so a signed max
//   (max.s16x2) never takes them. The biased halves cannot carry into each other. One LOP3, one
//   add and half a three-input max per two elements (ncu on the H200 run of eaffb4d: the
//   per-element and/compare/select/max sequence kept the ALU pipe 66% busy).
// - fp32 vectors: the same with bias 0x00800000 and a signed 32-bit max.
// - scalar path: finite_abs_bits and an unsigned max.
template <int DT, int VEC>
struct AmaxAcc {
  static constexpr bool kHalf = VEC > 1 && DT != kFP32;
  static constexpr uint32_t kBias = DT == kBF16 ? 0x00800080u : DT == kFP16 ? 0x04000400u : 0x00800000u;
  uint32_t a = VEC > 1 ? kBias : 0u;

  __device__ __forceinline__ void add(const Pack<DT, VEC>& pk) {
    if constexpr (VEC == 1) {
      a = max(a, finite_abs_bits(Elem<DT>::to_f32(pk.v[0])));
    } else if constexpr (kHalf) {
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) a = max_s16x2(a, (pk.word(i) & 0x7fff7fffu) + kBias);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) a = uint32_t(max(int32_t(a), int32_t((pk.word(i) & 0x7fffffffu) + kBias)));
    }
  }
  __device__ __forceinline__ uint32_t bits() const {
    if constexpr (VEC == 1) {
      return a;
    } else if constexpr (kHalf) {
      return magnitude_f32_bits<DT>(max(a & 0xffffu, a >> 16) - (kBias & 0xffffu));  // both halves >= bias
    } else {
      return a - kBias;
    }
  }
};

// Maximum of the raw magnitudes (the bit patterns with the sign cleared) of vectors (VEC > 1): one
// LOP3 per word and a third of a three-input max, where AmaxAcc also adds its bias to every word. The
// magnitudes of finite values order as the values do and lie below those of +-Inf and NaN, so
// finite() (no Inf or NaN was added) says whether bits() is the finite amax; a thread that saw one
// counts again (finite_fast_amax_bits, below). The common all-finite thread thereby also skips the NaN
// fix-up of its codes (Pack::quantised_words<false>). Why: the dynamic tile kernels are partly issue-bound (ncu), and
// these are 10 of ~38 SASS instructions per bf16 vector. The recount uses
// ElementAmax, not AmaxAcc: AmaxAcc shares the masked words with this one, and ptxas then kept all of
// them live across the finite() branch (the column tile kernel spilled at its 48 registers).
template <int DT, int VEC>
struct MagnitudeMax {
  static_assert(VEC > 1, "vector path only");
  static constexpr bool kHalf = DT != kFP32;
  static constexpr uint32_t kInfBits = DT == kBF16 ? 0x7f80u : DT == kFP16 ? 0x7c00u : 0x7f800000u;
  uint32_t a = 0u;

  __device__ __forceinline__ void add(const Pack<DT, VEC>& pk) {
    if constexpr (kHalf) {
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) a = max_u16x2(a, pk.word(i) & 0x7fff7fffu);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) a = max(a, pk.word(i) & 0x7fffffffu);
    }
  }
  __device__ __forceinline__ uint32_t magnitude() const {
    if constexpr (kHalf) {
      return max(a & 0xffffu, a >> 16);
    } else {
      return a;
    }
  }
  __device__ __forceinline__ bool finite() const { return magnitude() < kInfBits; }
  // The finite amax as float32 bits (AmaxAcc::bits), valid when finite().
  __device__ __forceinline__ uint32_t bits() const { return magnitude_f32_bits<DT>(magnitude()); }
};

// The finite amax (AmaxAcc::bits) element by element: MagnitudeMax's recount for a thread that saw an Inf
// or NaN (rare, so its cost does not matter; see above why it is not AmaxAcc).
template <int DT, int VEC>
struct ElementAmax {
  uint32_t a = 0u;
  __device__ __forceinline__ void add(const Pack<DT, VEC>& pk) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) a = max(a, finite_abs_bits(pk.f32(i)));
  }
  __device__ __forceinline__ uint32_t bits() const { return a; }
};

// The finite fast path's amax of a thread's vectors: add_all(acc) adds them to an accumulator. MagnitudeMax,
// and when it saw an Inf or NaN (finite = false: the codes need the NaN fix-up) the element-wise recount.
template <int DT, int VEC, typename AddAll>
__device__ __forceinline__ uint32_t finite_fast_amax_bits(AddAll&& add_all, bool& finite) {
  MagnitudeMax<DT, VEC> fast;
  add_all(fast);
  finite = fast.finite();
  if (finite) return fast.bits();
  ElementAmax<DT, VEC> exact;  // rare: an Inf or NaN in this thread's vectors
  add_all(exact);
  return exact.bits();
}

template <int DT, int VEC>
__device__ __forceinline__ uint32_t Pack<DT, VEC>::amax_bits() const {
  AmaxAcc<DT, VEC> acc;
  acc.add(*this);
  return acc.bits();
}

// Max over the `team` threads that share a segment. team <= 32: shuffles inside the warp.
// team > 32: whole warps, through shared memory; every thread of the block must call it
// (the launcher guarantees uniform trip counts). kRedInUse: an earlier call's readers may still
// read red[] (a loop over segments), so the block first waits for them; false when a block barrier
// already separates them (the tile kernels: one call per CTA, or one per tile after its closing
// barrier).
template <bool kRedInUse = true>
__device__ __forceinline__ uint32_t team_max(uint32_t v, int team, uint32_t* red) {
  if (team <= 32) {
    for (int off = team >> 1; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x >> 5;
  if constexpr (kRedInUse) __syncthreads();  // the previous call's readers are done with red[]
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

// Where segment g of row `row` lives (row = t * heads + h).
__device__ __forceinline__ Segment segment_at(const QuantParams& p, int64_t row, int64_t g) {
  Segment s;
  s.row = row;
  s.g = g;
  const int64_t t = div_index(row, p.heads), h = row - t * p.heads;
  const int64_t col = g * p.seg_len;
  s.x_off = t * p.x_stride_t + h * p.x_stride_h + col;
  s.q_off = t * p.q_stride_t + h * p.q_stride_h + col;
  s.len = min(p.seg_len, p.row_len - col);
  return s;
}

__device__ __forceinline__ Segment locate(const QuantParams& p, int64_t seg) {
  const int64_t row = div_index(seg, p.segs_per_row);
  return segment_at(p, row, seg - row * p.segs_per_row);
}

// Segment `seg` (< 2^31) of a row tile cover launch: its row from p's segment divider magic
// (set_segment_divider: two instructions where div_index's 32-bit division took ~20 before every
// CTA's first load).
__device__ __forceinline__ Segment locate_cover(const QuantParams& p, uint32_t seg) {
  const uint32_t row = uint32_t((uint64_t(seg) * p.seg_div_mul) >> p.seg_div_shift);
  return segment_at(p, row, seg - row * uint32_t(p.segs_per_row));
}

// Elements of a segment before x's first 16-byte boundary when `peel` is set (the caller
// guarantees that q is then VEC-byte aligned too), else 0; at most len.
template <int DT, int VEC>
__device__ __forceinline__ int peel_head(const typename Elem<DT>::raw* xs, int len, bool peel) {
  if (VEC == 1 || !peel) return 0;
  const int mis = int((reinterpret_cast<uintptr_t>(xs) / sizeof(typename Elem<DT>::raw)) & (VEC - 1));
  return min((VEC - mis) & (VEC - 1), len);
}

// One pass over a segment: thread `lane` of the team loads vectors lane, lane + team, ...
// (vec_per_thread(VEC) of them, all issued before any is used; consecutive lanes read consecutive
// 16-byte vectors, so a warp's loads are coalesced). Indices inside a segment are 32-bit (the
// launcher refuses segments of 2^31 elements or more): 64-bit index arithmetic and compares
// took ~8 instructions per vector (SASS of 1c2ea65).
template <int DT, int VEC>
__device__ __forceinline__ void load_pass(Pack<DT, VEC> (&pk)[vec_per_thread(VEC)], const typename Elem<DT>::raw* xs,
                                          int first, int team, int nvec) {
#pragma unroll
  for (int k = 0; k < vec_per_thread(VEC); ++k) {
    const int v = first + k * team;
    if (v < nvec) pk[k].load(xs + v * VEC);
  }
}

// Amax bits (AmaxAcc::bits) of all N packs a thread holds.
template <int DT, int VEC, int N>
__device__ __forceinline__ uint32_t amax_bits(const Pack<DT, VEC> (&pk)[N]) {
  AmaxAcc<DT, VEC> acc;
#pragma unroll
  for (int k = 0; k < N; ++k) acc.add(pk[k]);
  return acc.bits();
}

template <int DT, int VEC>
__device__ __forceinline__ uint32_t amax_pass(const Pack<DT, VEC> (&pk)[vec_per_thread(VEC)], int first, int team,
                                              int nvec) {
  AmaxAcc<DT, VEC> acc;
#pragma unroll
  for (int k = 0; k < vec_per_thread(VEC); ++k) {
    if (first + k * team < nvec) acc.add(pk[k]);
  }
  return acc.bits();
}

}  // namespace fp8
}  // namespace hpc
