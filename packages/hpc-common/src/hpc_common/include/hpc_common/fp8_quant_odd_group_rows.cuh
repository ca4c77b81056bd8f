// Odd group-128 rows of 2-byte inputs, one row per CTA: dynamic group scales on rows that are not 16-byte
// aligned (odd row lengths such as N = 4095; x and q misaligned alike, p.peel), read as the row's aligned
// cover with every group on four lanes.
//
// Why (thirty-third session): fp8_quant_odd_row_tile_kernel (fp8_quant_odd_rows.cuh) gives each group its own
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
// row's first and last (shared with the neighbouring rows) and the vector 16g where g starts a warp. A warp's
// last quad also loads the next quad's low part (a sixth slot), so no group crosses warps: no block barrier.
//
// Same primitives as every other kernel (AmaxAcc, scale_from_amax_bits, Pack::quantised_words): same bits out.
#pragma once

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_bulk.cuh"
#include "hpc_common/fp8_quant_odd_rows.cuh"

// Odd group-128 rows of 2-byte inputs take this kernel (off: fp8_quant_odd_row_tile_kernel, the A/B row).
#ifndef HPC_FP8_ODD_GROUP_ROWS
#define HPC_FP8_ODD_GROUP_ROWS 1
#endif

namespace hpc {
namespace fp8 {

constexpr int kOddGroupLen = 128;       // elements per group (2-byte inputs: 16 vectors, 4 per lane)
constexpr int kOddGroupLanes = 4;
constexpr int kOddGroupMaxThreads = 1024;
constexpr int kOddGroupMinGroups = 8;   // a whole warp per row at least

// Whether the one-row kernel serves p (the host's odd-row geometry: p.peel, dynamic group scales of 128
// elements on 2-byte inputs, 8 to 256 groups per row).
inline bool odd_group_rows_applicable(const QuantParams& p, int vec) {
  return HPC_FP8_ODD_GROUP_ROWS && p.peel && vec == 8 && p.dtype != kFP32 && p.scale_source == kScaleDynamic &&
         !p.per_tensor_dynamic && p.seg_len == kOddGroupLen && p.segs_per_row >= kOddGroupMinGroups &&
         p.segs_per_row * kOddGroupLanes <= kOddGroupMaxThreads && p.rows <= 0x7fffffff;
}

// Threads per CTA: four lanes per group, whole warps.
inline unsigned odd_group_row_threads(const QuantParams& p) {
  return unsigned((p.segs_per_row * kOddGroupLanes + 31) / 32 * 32);
}

#if defined(__CUDACC__)

// The bits of the 16-bit elements [from, to) of a vector's word k (elements 2k, 2k + 1).
__device__ __forceinline__ uint32_t elements_mask(int k, int from, int to) {
  return bytes_from(2 * from - 4 * k) & ~bytes_from(2 * to - 4 * k);
}

template <int DT>
__device__ __forceinline__ void quant_odd_group_row(const QuantParams& p) {
  constexpr int VEC = 8, QW = 2, NS = 6;
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
  const int t = int(threadIdx.x), lane = t & 31;
  const int g = t >> 2, i = t & 3;  // quad g (lanes past 4 ng hold nothing), lane i of it
  const bool warp_first = lane < 4 && t >= 32;           // its low part is the previous warp's last quad's
  const bool warp_last = lane >= 28 && g + 1 < ng;       // it also takes the next quad's low part
  // Vectors before q's next 32-byte boundary: quad g owns the four 32-byte sectors of q that start at cover vector
  // 16g - a, so each of its store instructions writes one whole sector (and, x and q alike, each load reads 64
  // aligned bytes of x). Its vectors before 16g are group g - 1's last, as are the first mis elements of 16g
  // (its low part).
  const int a = int((reinterpret_cast<uintptr_t>(q) / VEC) & 3);

  // Slot j < 4 of lane i: cover vector 16g - a + 4j + i; slot 4, on the last quad only: vectors 16 ng - a + i, the
  // rest of the last group (and the cover's one vector past the groups' 16 ng, when the row ends fewer than mis
  // elements short of 128 ng); slot 5, on a warp's last quad: the next quad's low part, vectors 16(g + 1) - a + i
  // for i <= a (so no group's amax or scale crosses warps: no block barrier, no shared memory).
  P pk[NS];
  int vidx[NS];
  bool live[NS];
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    vidx[j] = 16 * g - a + 4 * (j < 5 ? j : 4) + i;
    bool on = g < ng && vidx[j] >= 0 && vidx[j] < nv;
    if (j == 0 && i < a && warp_first) on = false;  // loaded, quantised and stored by the previous warp
    if (j == 4) on = on && g == ng - 1;
    if (j == 5) on = on && warp_last && (i < a || (i == a && mis > 0));
    live[j] = on;
    if (on) pk[j].load(x + vidx[j] * VEC);
  }

  // Amax: `hi` over this lane's elements of group g, `lo` over those of group g - 1 (slot 0 of lanes i < a whole,
  // and the first mis elements of vector 16g, slot 0 of lane a), `next_lo` over slot 5's (group g's last, on a
  // warp's last quad). Masks only where a vector holds elements of two groups or of a neighbouring row: vector 16g
  // (on quad 0 the cover's first, whose first mis elements lie before the row), vector 16(g + 1) in slot 5, and the
  // row's last vectors.
  AmaxAcc<DT, VEC> hi, lo, next_lo;
  auto masked = [&](const P& v, int from, int to) {
    P part = v;
    uint32_t keep[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) keep[k] = elements_mask(k, from, to);
    part.and_words(keep);
    return part;
  };
#pragma unroll
  for (int j = 0; j < 5; ++j) {
    if (!live[j]) continue;
    const int to = min(span - VEC * vidx[j], VEC);
    if (j == 0 && i < a) {
      lo.add(pk[0]);  // group g - 1's whole vectors: never the row's first or last (g >= 1 when they are live)
    } else if ((j == 0 && i == a) || to < VEC) {
      hi.add(masked(pk[j], j == 0 && i == a ? mis : 0, to));
    } else {
      hi.add(pk[j]);
    }
  }
  if (live[0] && i == a && g > 0 && !warp_first) lo.add(masked(pk[0], 0, mis));
  if (live[5]) next_lo.add(i < a ? pk[5] : masked(pk[5], 0, mis));
  uint32_t h_bits = g < ng ? hi.bits() : 0u, l_bits = g < ng ? lo.bits() : 0u, n_bits = next_lo.bits();
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {  // the quad's parts of groups g, g - 1 and (warp's last quad) g + 1's low
    h_bits = max(h_bits, __shfl_xor_sync(0xffffffffu, h_bits, off));
    l_bits = max(l_bits, __shfl_xor_sync(0xffffffffu, l_bits, off));
    n_bits = max(n_bits, __shfl_xor_sync(0xffffffffu, n_bits, off));
  }
  // Group g's amax, on every lane of its quad: the quad's part and the next quad's low part (the warp's last quad
  // read it itself, slot 5).
  const int next_first = (lane & ~3) + 4;
  const uint32_t from_next = __shfl_sync(0xffffffffu, l_bits, next_first & 31);
  const uint32_t group_bits = max(h_bits, next_first < 32 ? from_next : n_bits);
  const float scale = scale_from_amax_bits(group_bits, p.ue8m0);
  const float inv = div_rn(1.0f, scale);
  // Group g - 1's reciprocal scale for the quad's low part (unused on a warp's first quad).
  const float inv_prev = __shfl_sync(0xffffffffu, inv, ((lane & ~3) - 4) & 31);

#pragma unroll
  for (int j = 0; j < NS; ++j) {
    if (!live[j]) continue;
    uint32_t w[QW];
    pk[j].quantised_words(j == 0 && i < a ? inv_prev : inv, w);
    int from = vidx[j] == 0 ? mis : 0, to = min(span - VEC * vidx[j], VEC);
    if (j == 0 && i == a && g > 0 && mis > 0) {  // vector 16g: its first mis elements are group g - 1's
      if (warp_first) {
        from = mis;  // the previous warp's last quad stores them (its slot 5)
      } else {
        uint32_t w_lo[QW];
        pk[0].quantised_words(inv_prev, w_lo);
#pragma unroll
        for (int k = 0; k < QW; ++k) {
          const uint32_t mine = bytes_from(mis - 4 * k);  // bytes (elements) of group g
          w[k] = (w[k] & mine) | (w_lo[k] & ~mine);
        }
      }
    }
    if (j == 5 && i == a) to = mis;  // the next quad's vector 16(g + 1): only group g's first mis bytes
    if (from == 0 && to == VEC) {
      P::store_words(q + vidx[j] * VEC, w);
    } else {  // shared with a neighbouring row, or across two warps: byte-exact
      P::store_words_range(q + vidx[j] * VEC, w, from, to);
    }
  }
  if (i == 0 && g < ng) write_scale(p, row, g, scale);
}

template <int DT>
__global__ void __launch_bounds__(kOddGroupMaxThreads) fp8_quant_odd_group_row_kernel(const QuantParams p) {
  quant_odd_group_row<DT>(p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
