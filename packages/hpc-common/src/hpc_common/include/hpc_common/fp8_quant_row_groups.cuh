// FP8 quantisation with dynamic per-group scales over rows whose starts are not 16-byte aligned
// (odd row lengths such as N = 4095), one warp per row.
//
// Why (H200, FP8_NOTES.md): such rows take the generic kernel's peeled path, a team of 2 lanes
// per 128-element group with a scalar head and tail per group: group-128 at N = 4095 measured
// 33% of the copy bandwidth, against 69% for per-token on the same rows (one team per row, one
// head per row). Here a warp owns a whole row, as per-token does: its 16-byte vectors are
// aligned to the row's first 16-byte boundary (x and q misaligned alike: the caller's `peel`
// check), so a group boundary falls inside at most one vector, which then contributes to both
// groups. Group maxima go through shared memory (atomicMax on the finite |x| bits, exact and
// order-free); lane g then turns group g's maximum into its scale and reciprocal.
//
// Status: eighth session, built and compiled only (no device time left); off by default
// (quant.USE_ROW_GROUP_KERNEL). The GPU tests compare it bit for bit with the reference.
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

#include "hpc_common/fp8_quant.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kRowGroupBlock = 256;  // 8 warps, one row each at a time
constexpr int kRowGroupMaxGroups = 64;
constexpr int kRowGroupVectors = 16;  // vectors per lane: rows of up to 512 vectors

// Whether the row-group kernel serves these parameters: dynamic per-segment scales of 2-D rows,
// the peeled vector path, segments of at least one vector, a row in one warp pass.
inline bool row_groups_applicable(const QuantParams& p, int vec) {
  if (!p.row_groups || !p.peel || vec == 1 || p.scale_source != kScaleDynamic || p.per_tensor_dynamic) return false;
  if (p.heads != 1 || p.seg_len < vec || p.segs_per_row > kRowGroupMaxGroups) return false;
  return p.row_len <= int64_t(32) * kRowGroupVectors * vec;
}

template <int DT, int VEC>
__global__ void __launch_bounds__(kRowGroupBlock) fp8_quant_row_groups_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr int kWarps = kRowGroupBlock / 32;
  __shared__ uint32_t amax_s[kWarps][kRowGroupMaxGroups];
  __shared__ float inv_s[kWarps][kRowGroupMaxGroups];
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const raw* x = static_cast<const raw*>(p.x);
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  uint32_t* amax = amax_s[wib];
  float* inv = inv_s[wib];
  const int seg = int(p.seg_len), ngroups = int(p.segs_per_row), len = int(p.row_len);
  const int64_t warps = int64_t(gridDim.x) * kWarps;

  for (int64_t row = int64_t(blockIdx.x) * kWarps + wib; row < p.rows; row += warps) {
    const raw* xs = x + row * p.x_stride_t;
    uint8_t* qs = p.q + row * p.q_stride_t;
    const int head = peel_head<DT, VEC>(xs, len, true);
    const int nvec = (len - head) / VEC, tail0 = head + nvec * VEC;
    for (int g = lane; g < ngroups; g += 32) amax[g] = 0u;
    __syncwarp();

    P pk[kRowGroupVectors];
#pragma unroll
    for (int j = 0; j < kRowGroupVectors; ++j) {
      const int k = lane + 32 * j;
      if (k < nvec) pk[j].load(xs + head + k * VEC);
    }
    // Group maxima. A vector starting at row element e0 lies in group e0 / seg up to the next
    // boundary; past it (seg >= VEC: at most one boundary) the rest belongs to the next group.
#pragma unroll
    for (int j = 0; j < kRowGroupVectors; ++j) {
      const int k = lane + 32 * j;
      if (k >= nvec) continue;
      const int e0 = head + k * VEC, g0 = e0 / seg, split = (g0 + 1) * seg - e0;
      if (split >= VEC) {
        atomicMax(&amax[g0], pk[j].amax_bits());
      } else {
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const uint32_t b = finite_abs_bits(pk[j].f32(e));
          if (e < split) lo = max(lo, b); else hi = max(hi, b);
        }
        atomicMax(&amax[g0], lo);
        atomicMax(&amax[g0 + 1], hi);
      }
    }
    for (int e = lane; e < head; e += 32) atomicMax(&amax[e / seg], finite_abs_bits(Elem<DT>::to_f32(xs[e])));
    for (int e = tail0 + lane; e < len; e += 32) atomicMax(&amax[e / seg], finite_abs_bits(Elem<DT>::to_f32(xs[e])));
    __syncwarp();

    // Scales: lane g owns group g (and g + 32).
    for (int g = lane; g < ngroups; g += 32) {
      const float scale = scale_from_amax_bits(amax[g], p.ue8m0);
      inv[g] = div_rn(1.0f, scale);
      p.scale[row * p.scale_stride_row + g * p.scale_stride_seg] = scale;
      // Column-major layout: the last row also zeroes the padding rows of its column.
      if (p.scale_stride_row == 1 && row == p.rows - 1) {
        for (int64_t r = p.rows; r < p.scale_stride_seg; ++r) p.scale[r + g * p.scale_stride_seg] = 0.0f;
      }
    }
    __syncwarp();

#pragma unroll
    for (int j = 0; j < kRowGroupVectors; ++j) {
      const int k = lane + 32 * j;
      if (k >= nvec) continue;
      const int e0 = head + k * VEC, g0 = e0 / seg, split = (g0 + 1) * seg - e0;
      // qs + e0 is VEC-byte aligned: x and q are misaligned alike (peel).
      if (split >= VEC) {
        pk[j].store_quantised(qs + e0, inv[g0]);
      } else {
        pk[j].store_quantised(qs + e0, inv[g0], inv[g0 + 1], split);
      }
    }
    for (int e = lane; e < head; e += 32) store_quantised_element<DT>(xs, qs, e, inv[e / seg]);
    for (int e = tail0 + lane; e < len; e += 32) store_quantised_element<DT>(xs, qs, e, inv[e / seg]);
    __syncwarp();  // inv[] and amax[] are rewritten for the next row
  }
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_row_groups(const QuantParams& p, cudaStream_t stream, bool pdl) {
  if (p.rows == 0) return cudaSuccess;
  constexpr int kWarps = kRowGroupBlock / 32;
  const int64_t need = (p.rows + kWarps - 1) / kWarps;
  const int64_t wave = hpc::persistent_ctas(fp8_quant_row_groups_kernel<DT, VEC>, kRowGroupBlock, 0, p.num_sms);
  const int grid = int(need < wave ? need : wave);
  return hpc::launch_kernel(fp8_quant_row_groups_kernel<DT, VEC>, dim3(grid), dim3(kRowGroupBlock), 0, stream, pdl,
                            p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
