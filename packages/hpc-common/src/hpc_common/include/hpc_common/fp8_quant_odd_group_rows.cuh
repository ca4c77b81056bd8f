// Odd group-128 rows of 2-byte inputs, one row per CTA: dynamic group scales on rows that are not 16-byte
// aligned (odd row lengths such as N = 4095; x and q misaligned alike, p.peel), read as the row's aligned
// cover with every group on four lanes.
//
// Why: fp8_quant_odd_row_tile_kernel (fp8_quant_odd_rows.cuh) gives each group its own
// cover, 17 vectors on a 4-lane team (a fifth slot, mostly dead), and two neighbouring groups store the vector
// they share after an exchange through shared memory. It was the one shape under 80 % of the copy rate back to
// back (77.9 % at 64 MB, bf16 N = 4095; ncu: 1.8x the aligned kernel's instructions at 66 % of issue slots). In a
// row, though, groups follow each other, so the row's cover holds every group's elements once. Group g is the
// cover's elements [128g + mis, 128g + 128 + mis) (the cover starts mis = row start mod 8 elements before the
// row): vectors 16g..16g+15 but the first mis elements of vector 16g, plus the first mis elements of vector
// 16g + 16. The four lanes of quad g hold the 16 vectors that start at q's 32-byte sector boundary at or before
// vector 16g (a = 0..3 vectors before it), so each of its load and store instructions moves whole sectors; the
// a vectors before 16g and vector 16g's first mis elements are group g - 1's (the quad's "low" part, reduced
// with its own two shuffles and handed to the previous quad by one more). The lane holding vector 16g quantises
// it with both groups' scales and merges the bytes, so every q vector is written whole by one lane, except the
// row's first and last (shared with the neighbouring rows). One block barrier: the low part of a warp's first
// quad and the amax of its last cross warps through shared memory (a warp's last quad loading the next quad's low
// part itself, with no barrier, read 14 % slower: these kernels are issue-bound, FP8_DESIGN.md).
//
// Same primitives as every other kernel (AmaxAcc, scale_from_amax_bits, Pack::quantised_words): same bits out.
#pragma once

#include <type_traits>

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_tile_geometry.cuh"
#include "hpc_common/fp8_quant_odd_rows.cuh"

namespace hpc {
namespace fp8 {

constexpr int kOddGroupLen = 128;       // elements per group (2-byte inputs: 16 vectors, 4 per lane)
constexpr int kOddGroupLanes = 4;
constexpr int kOddGroupMaxThreads = 1024;
constexpr int kOddGroupMinGroups = 8;   // a whole warp per row at least

// Whether the one-row kernel serves p (the host's odd-row geometry: p.peel, dynamic group scales of 128
// elements on 2-byte inputs, 8 to 256 groups per row).
inline bool odd_group_rows_applicable(const QuantParams& p, int vec) {
  return p.peel && vec == 8 && p.dtype != kFP32 && p.scale_source == kScaleDynamic &&
         !p.per_tensor_dynamic && p.seg_len == kOddGroupLen && p.segs_per_row >= kOddGroupMinGroups &&
         p.segs_per_row * kOddGroupLanes <= kOddGroupMaxThreads && p.rows <= 0x7fffffff;
}

// The launch geometry in the row tile kernels' fields: one row per CTA (tile_segs = its groups, team = four lanes
// each, so tile_kernel_threads gives whole warps of quads), a CTA per row.
inline void set_odd_group_row_geometry(QuantParams& p) {
  p.tile_segs = int(p.segs_per_row);
  p.team = kOddGroupLanes;
  p.num_tiles = p.rows;
}

#if defined(__CUDACC__)

// The bits of the 16-bit elements [from, to) of a vector's word k (elements 2k, 2k + 1).
__device__ __forceinline__ uint32_t elements_mask(int k, int from, int to) {
  return bytes_from(2 * from - 4 * k) & ~bytes_from(2 * to - 4 * k);
}

template <int DT>
__device__ __forceinline__ void quant_odd_group_row(const QuantParams& p, uint32_t* lo_first, uint32_t* hi_last) {
  constexpr int VEC = 8, QW = 2, NS = 5;
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  const int64_t row = blockIdx.x;
  const int64_t tok = div_index(row, p.heads), h = row - tok * p.heads;
  const raw* xs0 = static_cast<const raw*>(p.x) + tok * p.x_stride_t + h * p.x_stride_h;
  const int mis = int((reinterpret_cast<uintptr_t>(xs0) / sizeof(raw)) & (VEC - 1));
  const raw* x = xs0 - mis;                                        // the cover: aligned vectors 0..nv-1
  uint8_t* q = p.q + tok * p.q_stride_t + h * p.q_stride_h - mis;  // q is misaligned alike
  const int span = int(p.row_len) + mis;                           // the row: cover elements [mis, span)
  const int nv = (span + VEC - 1) / VEC;
  const int ng = int(p.segs_per_row);
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  const int g = t >> 2, i = t & 3;  // quad g (lanes past 4 ng hold nothing), lane i of it
  // Vectors before q's next 32-byte boundary: quad g owns the four 32-byte sectors of q that start at cover vector
  // 16g - a, so each of its store instructions writes one whole sector (and, x and q alike, each load reads 64
  // aligned bytes of x). Its vectors before 16g are group g - 1's last, as are the first mis elements of 16g.
  const int a = int((reinterpret_cast<uintptr_t>(q) / VEC) & 3);

  // Slot j < 4 of lane i: cover vector 16g - a + 4j + i; slot 4, on the last quad only: vectors 16 ng - a + i, the
  // rest of the last group (and the cover's one vector past the groups' 16 ng, when the row ends fewer than mis
  // elements short of 128 ng).
  // One base address per lane, the slots at constant offsets from it (x + vidx * VEC per slot read 34.8 / 30.6 us
  // cold / back to back against 33.0 / 28.6, run of 682b15a: the kernel is issue-bound).
  const raw* xl = x + (16 * g - a + i) * VEC;
  uint8_t* ql = q + (16 * g - a + i) * VEC;
  P pk[NS];
  int vidx[NS];
  bool live[NS];
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    vidx[j] = 16 * g - a + 4 * j + i;
    live[j] = g < ng && vidx[j] >= 0 && vidx[j] < nv && (j < 4 || g == ng - 1);
    if (live[j]) pk[j].load(xl + 4 * VEC * j);
  }

  // Amax: `hi` over this lane's elements of group g, `lo` over those of group g - 1 (slot 0 of lanes i < a whole,
  // and the first mis elements of vector 16g, slot 0 of lane a). Masks only where a vector holds elements of two
  // groups or of a neighbouring row: vector 16g (on quad 0 the cover's first, whose first mis elements lie before
  // the row) and the row's last vectors. As in the tile kernels, from the raw
  // magnitudes when the lane's elements are all finite (then its codes need no NaN fix-up), else counted again
  // element by element.
  const bool split = live[0] && i == a;  // slot 0 is vector 16g
  auto masked = [&](const P& v, int from, int to) {
    P part = v;
    uint32_t keep[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) keep[k] = elements_mask(k, from, to);
    part.and_words(keep);
    return part;
  };
  auto accumulate = [&](auto& hi, auto& lo) {
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      if (!live[j]) continue;
      const int to = min(span - VEC * vidx[j], VEC);
      if (j == 0 && i < a) {
        lo.add(pk[0]);  // vectors 16g - a .. 16g - 1: group g - 1, never the row's last (g >= 1 when they are live)
      } else if ((j == 0 && i == a) || to < VEC) {
        hi.add(masked(pk[j], j == 0 && i == a ? mis : 0, to));
      } else {
        hi.add(pk[j]);
      }
    }
    if (split && g > 0) lo.add(masked(pk[0], 0, mis));
  };
  uint32_t h_bits, l_bits;
  MagnitudeMax<DT, VEC> fast_hi, fast_lo;
  accumulate(fast_hi, fast_lo);
  const bool finite = fast_hi.finite() && fast_lo.finite();  // every element this lane stores
  if (finite) {
    h_bits = fast_hi.bits();
    l_bits = fast_lo.bits();
  } else {  // rare: an Inf or NaN among the lane's elements
    ElementAmax<DT, VEC> exact_hi, exact_lo;
    accumulate(exact_hi, exact_lo);
    h_bits = exact_hi.bits();
    l_bits = exact_lo.bits();
  }
  if (g >= ng) h_bits = l_bits = 0u;
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {  // the quad's parts of groups g and g - 1
    h_bits = max(h_bits, __shfl_xor_sync(0xffffffffu, h_bits, off));
    l_bits = max(l_bits, __shfl_xor_sync(0xffffffffu, l_bits, off));
  }
  if (lane == 0) lo_first[warp] = l_bits;
  if (lane == 28) hi_last[warp] = h_bits;
  __syncthreads();
  // Group g's amax, on every lane of its quad: the quad's part and the next quad's low part (from the next warp's
  // first quad for the last quad of a warp).
  const int next_first = (lane & ~3) + 4;
  const uint32_t next_lo = __shfl_sync(0xffffffffu, l_bits, next_first & 31);
  const int nwarps = int(blockDim.x >> 5);
  const uint32_t group_bits =
      max(h_bits, next_first < 32 ? next_lo : (warp + 1 < nwarps ? lo_first[warp + 1] : 0u));
  const float scale = scale_from_amax_bits(group_bits, p.ue8m0);
  const float inv = div_rn(1.0f, scale);
  // Group g - 1's reciprocal scale for the quad's low part: the previous quad's, or on a warp's first quad the
  // previous warp's last quad's amax with this quad's low part.
  float inv_prev = __shfl_sync(0xffffffffu, inv, ((lane & ~3) - 4) & 31);
  if (lane < 4 && warp > 0) inv_prev = div_rn(1.0f, scale_from_amax_bits(max(hi_last[warp - 1], l_bits), p.ue8m0));

  auto store_all = [&](auto may_hold_nan) {
    constexpr bool kNaN = decltype(may_hold_nan)::value;
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      if (!live[j]) continue;
      uint32_t w[QW];
      pk[j].template quantised_words<kNaN>(j == 0 && i < a ? inv_prev : inv, w);
      if (j == 0 && split && g > 0 && mis > 0) {  // vector 16g: its first mis elements are group g - 1's
        uint32_t w_lo[QW];
        pk[0].template quantised_words<kNaN>(inv_prev, w_lo);
#pragma unroll
        for (int k = 0; k < QW; ++k) {
          const uint32_t mine = bytes_from(mis - 4 * k);  // bytes (elements) of group g
          w[k] = (w[k] & mine) | (w_lo[k] & ~mine);
        }
      }
      const int from = vidx[j] == 0 ? mis : 0;
      const int to = min(span - VEC * vidx[j], VEC);
      if (from == 0 && to == VEC) {
        P::store_words(ql + 4 * VEC * j, w);
      } else {  // the row's first or last vector: its other bytes are the neighbouring rows'
        P::store_words_range(ql + 4 * VEC * j, w, from, to);
      }
    }
  };
  if (finite) {
    store_all(std::false_type{});
  } else {
    store_all(std::true_type{});
  }
  if (i == 0 && g < ng) write_scale(p, row, g, scale);
}

template <int DT>
__global__ void __launch_bounds__(kOddGroupMaxThreads) fp8_quant_odd_group_row_kernel(const QuantParams p) {
  __shared__ uint32_t lo_first[kOddGroupMaxThreads / 32];
  __shared__ uint32_t hi_last[kOddGroupMaxThreads / 32];
  quant_odd_group_row<DT>(p, lo_first, hi_last);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
