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
// in x and VEC-byte aligned in q, VEC = 16 / sizeof(T). With `peel`, segment starts may be
// unaligned but x and q are misaligned alike (x's element address = q's byte address modulo
// VEC): each segment then takes its first elements up to a 16-byte boundary one by one and the
// rest as vectors (odd row lengths: 24% of the copy bandwidth on the scalar path, H200).
// Otherwise VEC = 1 (scalar path for other strides).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_common/fp8_quant_params.h"

namespace hpc {
namespace fp8 {

}  // namespace fp8
}  // namespace hpc

#if defined(__CUDACC__)
#include "hpc_common/fp8_primitives.cuh"
#include "hpc_common/pdl.cuh"
#include "hpc_common/persistent.cuh"
#endif

// The binding layer (a host-compiled .cpp) sees only the constants, the params struct and
// the launcher's declaration below.
#if defined(__CUDACC__)

namespace hpc {
namespace fp8 {

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
    const int len = int(s.len), head = peel_head<DT, VEC>(xs, len, p.peel);
    const int nvec = (len - head) / VEC, per_pass = team * vec_per_thread(VEC), tail0 = head + nvec * VEC;
    for (int first = lane; first < nvec; first += per_pass) {
      P pk[vec_per_thread(VEC)];
      load_pass(pk, xs + head, first, team, nvec);
      m = max(m, amax_pass(pk, first, team, nvec));
    }
    for (int e = lane; e < head; e += team) m = max(m, finite_abs_bits(Elem<DT>::to_f32(xs[e])));
    for (int e = tail0 + lane; e < len; e += team) m = max(m, finite_abs_bits(Elem<DT>::to_f32(xs[e])));
  }
  m = block_max(m, red);
  if (threadIdx.x == 0) p.workspace[blockIdx.x] = m;
}


// Amax pass of a contiguous tensor (rows == 1, x 16-byte aligned): thread k of the one-wave
// grid reads vectors k, k + T, k + 2T, ... (T = all threads), kAmaxUnroll loads in flight, so
// every thread reads within one vector of the mean (the segment-team kernel above gives
// 64 KB blocks in ~4 waves at 64 MB: its last wave is partly idle) and the grid sweeps the
// tensor front to back, ending on the part the reversed quantising pass reads first.
constexpr int kAmaxFlatThreads = 256;
constexpr int kAmaxUnroll = 8;

template <int DT, int VEC>
__global__ void __launch_bounds__(kAmaxFlatThreads) fp8_amax_flat_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  __shared__ uint32_t red[kAmaxFlatThreads / 32];
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const raw* x = static_cast<const raw*>(p.x);
  const int64_t n = p.row_len, nvec = n / VEC, stride = int64_t(gridDim.x) * kAmaxFlatThreads;
  const int64_t first = int64_t(blockIdx.x) * kAmaxFlatThreads + threadIdx.x;
  AmaxAcc<DT, VEC> acc;
  int64_t v = first;
  for (; v + (kAmaxUnroll - 1) * stride < nvec; v += kAmaxUnroll * stride) {
    P pk[kAmaxUnroll];
#pragma unroll
    for (int u = 0; u < kAmaxUnroll; ++u) pk[u].load(x + (v + u * stride) * VEC);
#pragma unroll
    for (int u = 0; u < kAmaxUnroll; ++u) acc.add(pk[u]);
  }
  {  // fewer than kAmaxUnroll vectors left for this thread
    P pk[kAmaxUnroll];
#pragma unroll
    for (int u = 0; u < kAmaxUnroll; ++u) {
      if (v + u * stride < nvec) pk[u].load(x + (v + u * stride) * VEC);
    }
#pragma unroll
    for (int u = 0; u < kAmaxUnroll; ++u) {
      if (v + u * stride < nvec) acc.add(pk[u]);
    }
  }
  uint32_t m = acc.bits();
  for (int64_t e = nvec * VEC + first; e < n; e += stride) m = max(m, finite_abs_bits(Elem<DT>::to_f32(x[e])));
  m = block_max(m, red);
  if (threadIdx.x == 0) p.workspace[blockIdx.x] = m;
}

// The one scale of the per-tensor modes: the static scale (device value or host float), or, with
// the scale from partials (dynamic per-tensor), the max of the amax pass's per-block partials
// (block 0 records it in p.scale); 0 in the per-segment modes. Called by the whole block
// (block_max synchronises it); `red` is a shared array of one word per warp.
__device__ __forceinline__ float per_tensor_scale(const QuantParams& p, uint32_t* red) {
  if (p.scale_source == kScaleStatic) return p.static_scale != nullptr ? *p.static_scale : p.static_value;
  if (p.scale_source != kScalePartials) return 0.0f;
  uint32_t m = 0;
  for (int i = threadIdx.x; i < p.num_partials; i += blockDim.x) m = max(m, p.workspace[i]);
  const float scale = scale_from_amax_bits(block_max(m, red), p.ue8m0);
  if (blockIdx.x == 0 && threadIdx.x == 0) p.scale[0] = scale;
  return scale;
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

  const float fixed_scale = per_tensor_scale(p, red);
  // All CTAs of this one-wave grid are resident: the next kernel may start its prologue.
  hpc::pdl_launch_dependents();

  const int64_t nseg = p.rows * p.segs_per_row;
  for (int64_t base = int64_t(blockIdx.x) * tpb; base < nseg; base += int64_t(gridDim.x) * tpb) {
    const int64_t idx = base + threadIdx.x / team;
    const bool active = idx < nseg;  // inactive teams still join team_max's barriers
    const Segment s = locate(p, active ? (p.reverse ? nseg - 1 - idx : idx) : 0);
    const int len = active ? int(s.len) : 0;
    const raw* xs = x + s.x_off;
    uint8_t* qs = p.q + s.q_off;
    // Scalar head up to the first 16-byte boundary (peel; 0 otherwise), vectors, scalar tail.
    const int head = peel_head<DT, VEC>(xs, len, p.peel);
    const int nvec = (len - head) / VEC, tail0 = head + nvec * VEC;
    const raw* xv = xs + head;
    uint8_t* qv = qs + head;
    const int per_pass = team * kV;
    const int npass = (nvec + per_pass - 1) / per_pass;

    P pk[kV];
    float scale = fixed_scale;
    if (dynamic) {
      uint32_t m = 0;
      for (int c = 0; c < npass; ++c) {
        load_pass(pk, xv, c * per_pass + lane, team, nvec);
        m = max(m, amax_pass(pk, c * per_pass + lane, team, nvec));
      }
      for (int e = lane; e < head; e += team) m = max(m, finite_abs_bits(Elem<DT>::to_f32(xs[e])));
      for (int e = tail0 + lane; e < len; e += team) m = max(m, finite_abs_bits(Elem<DT>::to_f32(xs[e])));
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
    for (int c = 0; c < npass; ++c) {
      if (!dynamic || npass > 1) load_pass(pk, xv, c * per_pass + lane, team, nvec);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const int v = c * per_pass + k * team + lane;
        if (v < nvec) pk[k].store_quantised(qv + v * VEC, inv);
      }
    }
    for (int e = lane; e < head; e += team) store_quantised_element<DT>(xs, qs, e, inv);
    for (int e = tail0 + lane; e < len; e += team) store_quantised_element<DT>(xs, qs, e, inv);
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

// Per-tensor dynamic: the amax pass (one partial max per block in p.workspace, at most
// kAmaxBlocksPerSm * num_sms of them), then p is set up for a quantising pass that reduces the
// partials and visits the tensor last-first (the tail of the amax pass is still in L2).
template <int DT, int VEC>
inline cudaError_t launch_amax_pass(QuantParams& p, cudaStream_t stream, bool pdl) {
  const int64_t cap = int64_t(kAmaxBlocksPerSm) * p.num_sms;
  int grid = 0;
  cudaError_t e = cudaSuccess;
  bool flat = false;
  if constexpr (VEC > 1) {
    flat = p.rows == 1 && !p.peel;
    if (flat) {
      const int64_t wave =
          hpc::persistent_ctas(fp8_amax_flat_kernel<DT, VEC>, kAmaxFlatThreads, 0, p.num_sms, kAmaxBlocksPerSm);
      const int64_t per_block = int64_t(kAmaxFlatThreads) * VEC;  // at least one vector per thread
      const int64_t need = (p.row_len + per_block - 1) / per_block;
      grid = int(need < wave ? (need > 0 ? need : 1) : wave);
      e = hpc::launch_kernel(fp8_amax_flat_kernel<DT, VEC>, dim3(grid), dim3(kAmaxFlatThreads), 0, stream, pdl, p);
    }
  }
  if (!flat) {
    QuantParams a = p;  // the segment-team kernel with its own team and block
    a.team = pick_team(p.seg_len, VEC);
    const int block = a.team > kMinBlock ? a.team : kMinBlock;
    const int64_t tpb = block / a.team;
    const int64_t need = (p.rows * p.segs_per_row + tpb - 1) / tpb;
    grid = int(need < cap ? need : cap);
    e = hpc::launch_kernel(fp8_amax_kernel<DT, VEC>, dim3(grid), dim3(block), 0, stream, pdl, a);
  }
  if (e != cudaSuccess) return e;
  p.scale_source = kScalePartials;
  p.num_partials = grid;
  p.reverse = true;  // start where the amax pass ended: that part is still in L2
  return cudaSuccess;
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
    cudaError_t e = launch_amax_pass<DT, VEC>(p, stream, pdl);
    if (e != cudaSuccess) return e;
  }
  const int64_t wave = hpc::persistent_ctas(fp8_quant_kernel<DT, VEC>, block, 0, p.num_sms);
  const int grid = int(need < wave ? need : wave);
  return hpc::launch_kernel(fp8_quant_kernel<DT, VEC>, dim3(grid), dim3(block), 0, stream, pdl, p);
}

}  // namespace fp8
}  // namespace hpc

#endif  // __CUDACC__

// Raw-pointer launcher (no torch): validates nothing the Python layer already checked.
cudaError_t launch_fp8_quant(const hpc::fp8::QuantParams& p, cudaStream_t stream, bool pdl);
