// FP8 quantisation with dynamic scales over short segments (group-128, per-token-per-head
// with head_dim 128): the layout block-scaled MoE and attention-Q quantisation use.
//
// Why a kernel of its own (H200 measurements, 64-256 MB of bf16 input):
// - the generic kernel gives a 128-element bf16 group to 2 lanes, each walking it with a
//   stride of 2 vectors: a warp load touches 16 groups 256 bytes apart (16 L1 wavefronts per
//   512 bytes) and its stores are 16-byte pieces: 45-50% of the copy bandwidth;
// - one vector per lane and 16 lanes per group (coalesced, 2 groups per warp load) measured
//   37-40%: per vector a lane then pays a 4-step shuffle reduction, two IEEE divisions and
//   the segment's index arithmetic, about twice the instructions of the per-token path, so
//   the kernel became issue-bound.
// Here a team of kTeam = 4 lanes owns a segment and each lane holds V vectors of it (lane l
// takes vectors l, l + 4, ...): a warp load covers 8 consecutive segments in 64-byte runs
// (8 wavefronts per 512 bytes), and the per-segment work (2 shuffles, 2 divisions, index
// arithmetic) is shared by V vectors. Each lane keeps U = 16 / V segments in flight
// (16 vectors, as the generic kernel).
//
// Masked form (kMasked): segments whose starts are not 16-byte aligned (odd N, column
// offsets, group lengths that are not a vector multiple) but misaligned alike in x and q (the
// `peel` condition of quant.py), or rows whose last segment is shorter. A segment's cover then
// starts at the team run (kSmallSegTeam vectors: 64 bytes of bf16 x, one 32-byte sector of q)
// holding its first element and ends at its last element rounded up to a vector; lane l takes
// vectors l, l + 4, ... of the cover (V slots), skips those wholly outside the segment, counts
// the elements outside it as zero in the amax and does not store them. Aligning the cover to
// team runs (not to single vectors) keeps each team store one whole q sector. Two neighbouring
// segments share their boundary vector: both load it (the second load mostly from L1 / L2),
// each writes its own bytes of the aligned q word. The generic kernel's peeled path gave such a
// group to a 2-lane team with a scalar head and tail (34 % of the copy bandwidth at 64 MB, H200).
//
// Semantics are exactly those of fp8_quant_kernel (same device primitives): same bits out.
#pragma once

#include "hpc_common/fp8_quant.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kSmallSegTeam = 4;       // lanes per segment
constexpr int kSmallSegVectors = 16;   // vectors each lane keeps in flight
constexpr int kSmallSegBlock = 256;

// Vectors per lane per segment when the short-segment kernel applies, else 0: dynamic
// per-segment scales, vector path, every segment full, and 4 to 32 vectors per segment, a
// power of two (group 32..256 of bf16/fp16, 16..128 of fp32, per-head with head_dim 128).
inline int small_seg_vectors_per_lane(const QuantParams& p, int vec) {
  if (p.scale_source != kScaleDynamic || p.per_tensor_dynamic || vec == 1 || p.peel) return 0;
  if (p.seg_len % vec != 0 || p.row_len % p.seg_len != 0) return 0;
  const int64_t nvec = p.seg_len / vec;
  return (nvec == 4 || nvec == 8 || nvec == 16 || nvec == 32) ? int(nvec / kSmallSegTeam) : 0;
}

// Slots per lane of the masked form where it applies, else 0: dynamic per-segment scales on the
// vector path, 4 to 32 vectors per segment; a cover spans at most ceil((4 VEC - 1 + seg_len) /
// VEC) vectors over the 4 lanes, rounded up to one of the instantiated counts 3, 5 or 9. The
// caller tries the unmasked form first (small_seg_vectors_per_lane).
inline int small_seg_masked_slots(const QuantParams& p, int vec) {
  if (p.scale_source != kScaleDynamic || p.per_tensor_dynamic || vec == 1) return 0;
  const int64_t nvec = (p.seg_len + vec - 1) / vec;
  if (nvec < 4 || nvec > 32) return 0;
  const int64_t cover = (kSmallSegTeam * vec - 1 + p.seg_len + vec - 1) / vec;
  const int64_t slots = (cover + kSmallSegTeam - 1) / kSmallSegTeam;
  return slots <= 3 ? 3 : slots <= 5 ? 5 : slots <= 9 ? 9 : 0;
}

// Segments per lane per pass: about kSmallSegVectors vectors in flight per lane (the masked
// slot counts 3, 5 and 9 round to 5, 3 and 2 segments).
template <int V, bool kMasked>
constexpr int small_seg_segments_per_lane() {
  return kMasked ? (kSmallSegVectors + V / 2) / V : kSmallSegVectors / V;
}

// Where the masked form reads a segment: the team run (kSmallSegTeam vectors) holding its first
// element, the number of elements before that element in the run (`mis`; x and q are
// misaligned alike, so q - mis is VEC-byte aligned too), the first cover vector holding a
// segment element and the number of cover vectors. The unmasked form covers the segment exactly.
template <int DT, int VEC, bool kMasked>
struct Cover {
  int mis = 0, first = 0, nvec = 0, len;
  __device__ __forceinline__ Cover(const typename Elem<DT>::raw* xs, int64_t seg_len) : len(int(seg_len)) {
    if constexpr (kMasked) {
      constexpr int kRun = kSmallSegTeam * VEC;
      mis = int((reinterpret_cast<uintptr_t>(xs) / sizeof(typename Elem<DT>::raw)) & (kRun - 1));
      first = mis / VEC;
      nvec = (mis + len + VEC - 1) / VEC;
    }
  }
  __device__ __forceinline__ bool holds(int v) const { return !kMasked || (v >= first && v < nvec); }
  // Elements [lo(v), lo(v) + len) of cover vector v belong to the segment; partial: not all VEC.
  __device__ __forceinline__ int lo(int v) const { return mis - v * VEC; }
  __device__ __forceinline__ bool partial(int v) const { return lo(v) > 0 || lo(v) + len < VEC; }
};

template <int DT, int VEC, int V, bool kMasked>
__global__ void __launch_bounds__(kSmallSegBlock) fp8_quant_small_seg_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr int U = small_seg_segments_per_lane<V, kMasked>();  // segments per lane per pass
  constexpr int kTeamsPerWarp = 32 / kSmallSegTeam;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  const raw* x = static_cast<const raw*>(p.x);
  const int lane = threadIdx.x & (kSmallSegTeam - 1);
  const int team_in_warp = (threadIdx.x & 31) / kSmallSegTeam;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t num_warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  const int64_t nseg = p.rows * p.segs_per_row;
  constexpr int64_t kPerWarp = int64_t(kTeamsPerWarp) * U;  // consecutive segments per warp step

  for (int64_t base = warp * kPerWarp; base < nseg; base += num_warps * kPerWarp) {
    P pk[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + int64_t(u) * kTeamsPerWarp + team_in_warp;
      if (idx < nseg) {
        const Segment s = locate(p, idx);
        const raw* xs = x + s.x_off;
        const Cover<DT, VEC, kMasked> c(xs, s.len);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int v = lane + j * kSmallSegTeam;
          if (c.holds(v)) pk[u][j].load(xs - c.mis + int64_t(v) * VEC);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + int64_t(u) * kTeamsPerWarp + team_in_warp;
      // Recomputed rather than kept from the load loop: U Segments would cost 10 U registers.
      const Segment s = locate(p, idx < nseg ? idx : 0);
      const Cover<DT, VEC, kMasked> c(x + s.x_off, s.len);
      const bool live = idx < nseg;
      AmaxAcc<DT, VEC> acc;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int v = lane + j * kSmallSegTeam;
        if constexpr (kMasked) {
          // Warp-uniform test (every lane gets here), branch-free masking: a slot holds boundary
          // vectors in some lanes and inner ones in others, and only the first and last slots
          // hold boundary vectors at all.
          const bool held = live && c.holds(v);
          if (__any_sync(0xffffffffu, held && c.partial(v))) pk[u][j].keep_range(c.lo(v), c.lo(v) + c.len);
          if (!held) continue;
        } else {
          if (!live) continue;
        }
        acc.add(pk[u][j]);
      }
      uint32_t m = live ? acc.bits() : 0u;
      // All lanes shuffle (the trip is warp-uniform); lanes past the end reduce zeros.
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
      if (!live) continue;
      const float scale = scale_from_amax_bits(m, p.ue8m0);
      const float inv = div_rn(1.0f, scale);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int v = lane + j * kSmallSegTeam;
        uint8_t* qv = p.q + s.q_off - c.mis + int64_t(v) * VEC;
        if constexpr (kMasked) {
          if (!c.holds(v)) continue;
          // Quantised once, outside the branch: boundary and inner vectors share a slot.
          uint32_t w[VEC / 4];
          pk[u][j].quantised_words(inv, w);
          if (c.partial(v)) {
            P::store_words_range(qv, w, c.lo(v), c.lo(v) + c.len);
          } else {
            P::store_words(qv, w);
          }
        } else {
          pk[u][j].store_quantised(qv, inv);
        }
      }
      if (lane == 0) {
        p.scale[s.row * p.scale_stride_row + s.g * p.scale_stride_seg] = scale;
        if (p.scale_stride_row == 1 && s.row == p.rows - 1) {
          for (int64_t r = p.rows; r < p.scale_stride_seg; ++r) p.scale[r + s.g * p.scale_stride_seg] = 0.0f;
        }
      }
    }
  }
}

template <int DT, int VEC, int V, bool kMasked = false>
inline cudaError_t launch_fp8_quant_small_seg(QuantParams p, cudaStream_t stream, bool pdl) {
  constexpr int U = small_seg_segments_per_lane<V, kMasked>();
  p.team = kSmallSegTeam;
  const int64_t nseg = p.rows * p.segs_per_row;
  if (nseg == 0) return cudaSuccess;
  const int64_t per_block = int64_t(kSmallSegBlock / 32) * (32 / kSmallSegTeam) * U;
  const int64_t need = (nseg + per_block - 1) / per_block;
  const int64_t wave = hpc::persistent_ctas(fp8_quant_small_seg_kernel<DT, VEC, V, kMasked>, kSmallSegBlock, 0, p.num_sms);
  const int grid = int(need < wave ? need : wave);
  return hpc::launch_kernel(fp8_quant_small_seg_kernel<DT, VEC, V, kMasked>, dim3(grid), dim3(kSmallSegBlock), 0, stream,
                            pdl, p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
