// Host stand-in for the FP8 primitives of hpc_common/fp8_primitives.cuh that the prologue uses: the same
// float32 rules (IEEE division and product, E4M3 RNE saturating, one NaN code) without PTX.
#pragma once
#include <cuda_runtime.h>

#include "hpc_common/fp8_quant_params.h"

namespace hpc {
namespace fp8 {
inline float div_rn(float a, float b) { return a / b; }
inline float mul_rn(float a, float b) { return a * b; }
inline uint32_t finite_abs_bits(float f) {
  const uint32_t b = __float_as_uint(f) & 0x7fffffffu;
  return b < 0x7f800000u ? b : 0u;
}
inline float scale_from_amax_bits(uint32_t amax_bits, bool) {
  const uint32_t floor_bits = __float_as_uint(kAmaxFloor);
  return div_rn(__uint_as_float(amax_bits > floor_bits ? amax_bits : floor_bits), kE4M3Max);
}
inline float e4m3_value(int code) {  // code 0..0x7e, positive
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
}
inline uint32_t e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint32_t sign = std::signbit(f) ? 0x80u : 0u;
  const float a = std::fabs(f);
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const float d = std::fabs(e4m3_value(c) - a), db = std::fabs(e4m3_value(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return sign | uint32_t(best);
}
inline uint32_t e4m3x2(float lo, float hi) { return e4m3(lo) | (e4m3(hi) << 8); }
inline uint32_t canonical_nan4(uint32_t w) { return w ^ (((w & 0x7f7f7f7fu) + 0x01010101u) & w & 0x80808080u); }
}  // namespace fp8
}  // namespace hpc
