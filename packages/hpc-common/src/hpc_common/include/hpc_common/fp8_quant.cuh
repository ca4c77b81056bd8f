// FP8 E4M3 quantisation: per-tensor (static or dynamic scale), per-token, per-token-group
// and per-token-per-head, in one segment-quantising kernel plus a grid-wide amax kernel.
//
// Every mode is "cut the input into segments, give each segment one float32 scale, write
// q = e4m3_rne_satfinite(float32(x) / scale)":
//   per-token          segment = one row of [M, N]           scale [M]
//   per-token-group    segment = `seg_len` columns of a row  scale [M, ceil(N/seg_len)]
//   per-token-per-head segment = x[t, h, :] of [T, H, D]     scale [T, H]
//   per-tensor         segments are only a work split; one scale for all (static: given;
//                      dynamic: from fp8_amax_kernel's per-block partial maxima).
// A dynamic scale is max(amax, kAmaxFloor) / 448 (IEEE float32 division), where amax is the
// largest |x| over the finite elements of the segment (NaN and +-Inf are ignored, so one bad
// element does not wreck its row); with `ue8m0` it is rounded up to a power of two.
// Elements are scaled by the reciprocal: q = e4m3(x * inv) with inv = 1 / scale, both an
// IEEE division (once per segment) and an IEEE product (div.rn / mul.rn without .ftz, so
// nvcc's fast-math flags cannot change them); cvt.rn.satfinite then rounds to nearest even,
// +-Inf and finite overflow saturate to +-448, and NaN is written as the one encoding 0x7F.
// hpc_common/fp8/reference.py does the same float32 operations in torch, so the two agree
// bitwise. (A per-element division costs ~10 instructions and measured 48-66% of the copy
// bandwidth on an H200; x * inv differs from x / scale by at most one float32 ulp before the
// FP8 rounding, and not at all for power-of-two scales.)
//
// Work split: a "team" of `team` threads (a power of two, picked by pick_team) owns one
// segment at a time; each thread keeps up to vec_per_thread(VEC) vectors in registers, so
// a segment is read from memory once (longer segments are read twice, the second time
// mostly from L2). When the caller has checked that every segment start is 16-byte aligned
// in x and VEC-byte aligned in q, VEC = 16 / sizeof(T); otherwise VEC = 1 (scalar path for
// odd sizes and strides).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDACC__)
#include "hpc_common/pdl.cuh"
#include "hpc_common/persistent.cuh"
#endif

namespace hpc {
namespace fp8 {

constexpr float kE4M3Max = 448.0f;
// Dynamic scales never go below kAmaxFloor / 448, so a zero (or all-NaN) segment gets a
// finite, normal scale and an all-zero output. Same value as fp8/reference.py AMAX_FLOOR.
constexpr float kAmaxFloor = 1e-10f;
// Vectors each thread keeps in flight: 16 (16-byte vectors, or scalars on the scalar path).
// First H200 measurement with 4 per thread: 48-50% of the copy bandwidth (too few bytes in
// flight per SM); with 8: per-token 60-72%, where a 4096-wide bf16 row needed a 64-thread
// team and two block barriers per row. 16 makes that row one warp (shuffles only); no spills.
constexpr int vec_per_thread(int vec) { return 16; }
constexpr int kMinBlock = 256;
// Largest team (and block). 1024 would cap registers at 64 and make the vector path spill.
constexpr int kMaxTeam = 512;
// fp8_amax_kernel launches at most kAmaxBlocksPerSm * num_sms blocks, one partial each:
// the workspace the caller passes holds that many uint32.
constexpr int kAmaxBlocksPerSm = 8;

enum InputDtype : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };
enum ScaleSource : int { kScaleDynamic = 0, kScaleStatic = 1, kScalePartials = 2 };

struct QuantParams {
  const void* x;               // input, element type `dtype`
  uint8_t* q;                  // output E4M3 bytes
  float* scale;                // dynamic: one scale per segment (per-tensor: scale[0]); else unused
  const float* static_scale;   // static: device scalar, or nullptr to use static_value
  float static_value;
  uint32_t* workspace;         // per-tensor dynamic: kAmaxBlocksPerSm * num_sms uint32
  // Geometry: row r = t * heads + h (heads = 1 for 2-D input); a row holds row_len elements,
  // cut into segs_per_row segments of seg_len (the last one may be shorter).
  int64_t rows, heads, row_len, seg_len, segs_per_row;
  int64_t x_stride_t, x_stride_h;   // element strides of x for t and h (last dim contiguous)
  int64_t q_stride_t, q_stride_h;
  // Scale of segment g of row r lives at scale[r * scale_stride_row + g * scale_stride_seg].
  // Column-major group scales (scale_stride_row == 1, pitch scale_stride_seg >= rows) get
  // their padding rows rows..pitch-1 written with 0.
  int64_t scale_stride_row, scale_stride_seg;
  int dtype;                   // InputDtype
  int scale_source;            // ScaleSource; kScalePartials is set by the launcher
  bool per_tensor_dynamic;     // chain fp8_amax_kernel -> fp8_quant_kernel
  bool ue8m0;                  // round dynamic scales up to a power of two
  bool vectorized;             // caller checked the alignment of every segment start
  bool short_segments;         // allow fp8_quant_small_seg.cuh (off: generic kernel, for comparison)
  int num_sms;
  // Filled by the launcher:
  int team;
  int num_partials;
  bool reverse;                // visit segments last-first (L2 reuse after the amax pass)
};

// The binding layer (a host-compiled .cpp) sees only the constants, the params struct and
// the launcher's declaration below.
#if defined(__CUDACC__)

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

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

// Per-block maximum of the finite |x| over the block's segments (grid-stride), written to
// workspace[blockIdx.x]. Deterministic: a max does not depend on the visiting order.
template <int DT, int VEC>
__global__ void __launch_bounds__(kMaxTeam) fp8_amax_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  __shared__ uint32_t red[32];
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const raw* x = static_cast<const raw*>(p.x);
  const int team = p.team, lane = threadIdx.x & (team - 1);
  const int tpb = blockDim.x / team;
  const int64_t nseg = p.rows * p.segs_per_row;
  uint32_t m = 0;
  for (int64_t idx = int64_t(blockIdx.x) * tpb + threadIdx.x / team; idx < nseg; idx += int64_t(gridDim.x) * tpb) {
    const Segment s = locate(p, idx);
    const raw* xs = x + s.x_off;
    const int64_t nvec = s.len / VEC, per_pass = int64_t(team) * vec_per_thread(VEC);
    for (int64_t first = lane; first < nvec; first += per_pass) {
      P pk[vec_per_thread(VEC)];
      load_pass(pk, xs, first, team, nvec);
      m = max(m, amax_pass(pk, first, team, nvec));
    }
    for (int64_t e = nvec * VEC + lane; e < s.len; e += team) m = max(m, finite_abs_bits(Elem<DT>::to_f32(xs[e])));
  }
  m = block_max(m, red);
  if (threadIdx.x == 0) p.workspace[blockIdx.x] = m;
}

template <int DT, int VEC>
__global__ void __launch_bounds__(kMaxTeam) fp8_quant_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr int kV = vec_per_thread(VEC);
  __shared__ uint32_t red[32];
  hpc::pdl_wait();
  const raw* x = static_cast<const raw*>(p.x);
  const int team = p.team, lane = threadIdx.x & (team - 1);
  const int tpb = blockDim.x / team;
  const bool dynamic = p.scale_source == kScaleDynamic;

  float fixed_scale = 0.0f;
  if (p.scale_source == kScaleStatic) {
    fixed_scale = p.static_scale != nullptr ? *p.static_scale : p.static_value;
  } else if (p.scale_source == kScalePartials) {
    uint32_t m = 0;
    for (int i = threadIdx.x; i < p.num_partials; i += blockDim.x) m = max(m, p.workspace[i]);
    fixed_scale = scale_from_amax_bits(block_max(m, red), p.ue8m0);
    if (blockIdx.x == 0 && threadIdx.x == 0) p.scale[0] = fixed_scale;
  }
  // All CTAs of this one-wave grid are resident: the next kernel may start its prologue.
  hpc::pdl_launch_dependents();

  const int64_t nseg = p.rows * p.segs_per_row;
  for (int64_t base = int64_t(blockIdx.x) * tpb; base < nseg; base += int64_t(gridDim.x) * tpb) {
    const int64_t idx = base + threadIdx.x / team;
    const bool active = idx < nseg;  // inactive teams still join team_max's barriers
    const Segment s = locate(p, active ? (p.reverse ? nseg - 1 - idx : idx) : 0);
    const int64_t len = active ? s.len : 0;
    const int64_t nvec = len / VEC;
    const raw* xs = x + s.x_off;
    uint8_t* qs = p.q + s.q_off;
    const int64_t per_pass = int64_t(team) * kV;
    const int64_t npass = (nvec + per_pass - 1) / per_pass;

    P pk[kV];
    float scale = fixed_scale;
    if (dynamic) {
      uint32_t m = 0;
      for (int64_t c = 0; c < npass; ++c) {
        load_pass(pk, xs, c * per_pass + lane, team, nvec);
        m = max(m, amax_pass(pk, c * per_pass + lane, team, nvec));
      }
      for (int64_t e = nvec * VEC + lane; e < len; e += team) m = max(m, finite_abs_bits(Elem<DT>::to_f32(xs[e])));
      scale = scale_from_amax_bits(team_max(m, team, red), p.ue8m0);
      if (active && lane == 0) {
        float* sp = p.scale + s.row * p.scale_stride_row + s.g * p.scale_stride_seg;
        *sp = scale;
        // Column-major layout: the last row also zeroes the padding rows of its column.
        if (p.scale_stride_row == 1 && s.row == p.rows - 1) {
          for (int64_t r = p.rows; r < p.scale_stride_seg; ++r) p.scale[r + s.g * p.scale_stride_seg] = 0.0f;
        }
      }
    }
    // Quantise. With one pass the registers still hold the segment (dynamic scale); the
    // static and per-tensor paths and long segments load here.
    const float inv = div_rn(1.0f, scale);
    for (int64_t c = 0; c < npass; ++c) {
      if (!dynamic || npass > 1) load_pass(pk, xs, c * per_pass + lane, team, nvec);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const int64_t v = c * per_pass + k * team + lane;
        if (v < nvec) pk[k].store_quantised(qs + v * VEC, inv);
      }
    }
    for (int64_t e = nvec * VEC + lane; e < len; e += team) {
      Pack<DT, 1> one;
      one.v[0] = xs[e];
      one.store_quantised(qs + e, inv);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------------------

// Threads per segment: enough that vec_per_thread vectors each cover the segment, as a power
// of two in [1, kMaxTeam] (a 4096-wide bf16 row: 32, one warp). Short segments (<= 64
// vectors) get at least one lane per 8 vectors: with one lane walking a whole 128-element
// bf16 group, a warp load touches 32 lines and measured 26% of the copy bandwidth (H200),
// against 45-50% with 2 lanes (the short-segment kernel, 58-69%, serves the common sizes).
inline int pick_team(int64_t seg_len, int vec) {
  const int64_t nvec = (seg_len + vec - 1) / vec;
  int64_t want = (nvec + vec_per_thread(vec) - 1) / vec_per_thread(vec);
  if (nvec <= 64 && want < (nvec + 7) / 8) want = (nvec + 7) / 8;
  int team = 1;
  while (team < want && team < kMaxTeam) team <<= 1;
  return team;
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_typed(QuantParams p, cudaStream_t stream, bool pdl) {
  p.team = pick_team(p.seg_len, VEC);
  const int block = p.team > kMinBlock ? p.team : kMinBlock;
  const int64_t tpb = block / p.team;
  const int64_t nseg = p.rows * p.segs_per_row;
  if (nseg == 0) return cudaSuccess;
  const int64_t need = (nseg + tpb - 1) / tpb;
  p.reverse = false;
  if (p.per_tensor_dynamic) {
    const int64_t cap = int64_t(kAmaxBlocksPerSm) * p.num_sms;
    const int grid = int(need < cap ? need : cap);
    cudaError_t e = hpc::launch_kernel(fp8_amax_kernel<DT, VEC>, dim3(grid), dim3(block), 0, stream, pdl, p);
    if (e != cudaSuccess) return e;
    p.scale_source = kScalePartials;
    p.num_partials = grid;
    p.reverse = true;  // start where the amax pass ended: that part is still in L2
  }
  const int64_t wave = hpc::persistent_ctas(fp8_quant_kernel<DT, VEC>, block, 0, p.num_sms);
  const int grid = int(need < wave ? need : wave);
  return hpc::launch_kernel(fp8_quant_kernel<DT, VEC>, dim3(grid), dim3(block), 0, stream, pdl, p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc

// Raw-pointer launcher (no torch): validates nothing the Python layer already checked.
cudaError_t launch_fp8_quant(const hpc::fp8::QuantParams& p, cudaStream_t stream, bool pdl);
