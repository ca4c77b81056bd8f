// FP8 quantisation with dynamic scales over short segments (group-128, per-token-per-head
// with head_dim 128): the layout block-scaled MoE and attention-Q quantisation use.
//
// Why a kernel of its own: the generic kernel (fp8_quant.cuh) gives each segment a team of
// threads that walks it with a stride of `team` vectors, so for a 128-element bf16 group a
// warp instruction touches 16 groups 256 bytes apart and stores 16-byte pieces: 45-50% of the
// copy bandwidth on an H200. Here a team of T = seg_len / VEC lanes holds exactly one vector
// of a segment, the 32 / T teams of a warp take consecutive segments, so one warp instruction
// reads 512 contiguous bytes and writes 256; each lane keeps kUnroll segments' vectors in
// flight before the first shuffle reduction.
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

#include "hpc_common/fp8_quant.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kSmallSegUnroll = 8;
constexpr int kSmallSegBlock = 256;

// True when the short-segment kernel applies: dynamic per-segment scales, vector path, every
// segment full and its vector count a power of two no larger than a warp.
inline bool small_seg_applies(const QuantParams& p, int vec) {
  if (p.scale_source != kScaleDynamic || p.per_tensor_dynamic || vec == 1) return false;
  if (p.seg_len % vec != 0 || p.row_len % p.seg_len != 0) return false;
  const int64_t nvec = p.seg_len / vec;
  return nvec >= 1 && nvec <= 32 && (nvec & (nvec - 1)) == 0;
}

template <int DT, int VEC>
__global__ void __launch_bounds__(kSmallSegBlock) fp8_quant_small_seg_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const raw* x = static_cast<const raw*>(p.x);
  const int team = p.team;                     // lanes per segment = vectors per segment
  const int lane = threadIdx.x & (team - 1);
  const int teams_per_warp = 32 / team;
  const int team_in_warp = (threadIdx.x & 31) / team;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t num_warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  const int64_t nseg = p.rows * p.segs_per_row;
  const int64_t per_warp = int64_t(teams_per_warp) * kSmallSegUnroll;  // segments per warp step

  for (int64_t base = warp * per_warp; base < nseg; base += num_warps * per_warp) {
    P pk[kSmallSegUnroll];
    Segment s[kSmallSegUnroll];
#pragma unroll
    for (int u = 0; u < kSmallSegUnroll; ++u) {
      const int64_t idx = base + int64_t(u) * teams_per_warp + team_in_warp;
      if (idx < nseg) {
        s[u] = locate(p, idx);
        pk[u].load(x + s[u].x_off + int64_t(lane) * VEC);
      }
    }
#pragma unroll
    for (int u = 0; u < kSmallSegUnroll; ++u) {
      const int64_t idx = base + int64_t(u) * teams_per_warp + team_in_warp;
      // The warp's trip is uniform up to the last step; lanes past the end reduce zeros.
      uint32_t m = idx < nseg ? pk[u].amax_bits() : 0u;
      for (int off = team >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
      if (idx >= nseg) continue;
      const float scale = scale_from_amax_bits(m, p.ue8m0);
      pk[u].store_quantised(p.q + s[u].q_off + int64_t(lane) * VEC, div_rn(1.0f, scale));
      if (lane == 0) {
        p.scale[s[u].row * p.scale_stride_row + s[u].g * p.scale_stride_seg] = scale;
        if (p.scale_stride_row == 1 && s[u].row == p.rows - 1) {
          for (int64_t r = p.rows; r < p.scale_stride_seg; ++r) p.scale[r + s[u].g * p.scale_stride_seg] = 0.0f;
        }
      }
    }
  }
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_small_seg(QuantParams p, cudaStream_t stream, bool pdl) {
  p.team = int(p.seg_len / VEC);
  const int64_t nseg = p.rows * p.segs_per_row;
  if (nseg == 0) return cudaSuccess;
  const int64_t per_block = int64_t(kSmallSegBlock / 32) * (32 / p.team) * kSmallSegUnroll;
  const int64_t need = (nseg + per_block - 1) / per_block;
  const int64_t wave = hpc::persistent_ctas(fp8_quant_small_seg_kernel<DT, VEC>, kSmallSegBlock, 0, p.num_sms);
  const int grid = int(need < wave ? need : wave);
  return hpc::launch_kernel(fp8_quant_small_seg_kernel<DT, VEC>, dim3(grid), dim3(kSmallSegBlock), 0, stream, pdl,
                            p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
