// FP8 quantisation of rows packed back to back at any alignment, with dynamic per-segment scales:
// per-token rows, group segments (the last one of a row may be shorter) and per-head segments of a
// dense [T, H, D]. It serves the dense shapes the tile kernels (fp8_quant_tile.cuh) do not take:
// odd row lengths (rows not 16-byte aligned), segment lengths that are not a power-of-two number of
// 16-byte vectors, group rows with a short last segment.
//
// Why (FP8_HISTORY.md, eighteenth session): those shapes went to the persistent register kernels
// (fp8_quant_small_seg.cuh's masked form, or the generic kernel's peeled path), which walk each
// segment on its own and pay locate()'s divisions and a scalar head per segment: H200, 64 MB bf16
// with N = 4095, group-128 read 44 % of 4.27 TB/s and per-token 70 %, where the aligned shapes on
// the tile kernels read 79-81 %.
//
// A CTA owns R whole rows (p.tile_segs, set by the launcher so the cover fits one 16 KB tile): the
// flat elements [e0, e0 + E) of the tensor, loaded as the aligned 16-byte vectors that cover them
// (thread k takes vectors k, k + 256, k + 512 and k + 768 of the cover: coalesced). x and q are
// misaligned alike (p.vectorized: aligned, or p.peel), so in the space shifted by that common
// misalignment the vector of elements [VEC v, VEC v + VEC) quantises into q's VEC-byte word v:
// interior words leave as whole aligned stores, and only the cover's two end vectors, which share a
// word with the neighbouring CTAs' rows, store their own bytes alone. The cover's elements outside
// the CTA's rows (fewer than VEC at each end, inside the tensor's 16-byte words) are masked out.
//
// Segments are at least VEC elements long (the launcher checks), so a vector holds parts of at most
// two: A, its first element's segment, and B = A + 1 from element k on. Amax per segment: a
// segmented max along the warp's lanes (consecutive vectors: segment ids never decrease from lane to
// lane; B of a lane continues into A of the next one) and one shared-memory atomicMax per run of
// lanes; a barrier; thread s turns segment s's amax into its scale (written out) and reciprocal
// (kept in shared memory); a barrier; each vector quantises its elements with its one or two
// reciprocals. Same device primitives as every other kernel: same bits out.
#pragma once

#include "hpc_common/fp8_quant_tile.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kPackedMaxSegs = 1024;  // segments per CTA (4 KB of shared memory)

// a / d for 0 <= a < 2^22 and d >= 1 with rcp_d = 1 / d (rounded): the float estimate is within one
// of the quotient, one correction each way makes it exact (the int division took ~20 instructions).
__device__ __forceinline__ int small_div(int a, int d, float rcp_d) {
  int q = __float2int_rz(__int2float_rn(a) * rcp_d);
  const int r = a - q * d;
  q += int(r >= d) - int(r < 0);
  return q;
}

// Where a cover vector's elements go: [lo, hi) are the CTA's; [lo, k) are in segment a, [k, hi) in
// segment a + 1 (empty when k >= hi). k is clamped to VEC (keep_range shifts by its bounds), so a and
// k pack into one register across the kernel's barriers (a < kPackedMaxSegs).
struct PackedVector {
  int a, k, lo, hi;
  __device__ __forceinline__ uint32_t packed() const { return uint32_t(a) | (uint32_t(k) << 16); }
};

// Vector i of the cover, whose element 0 is the CTA's element o = i * VEC - head (negative for the
// first vector when the CTA's rows do not start on a vector).
template <int VEC>
__device__ __forceinline__ PackedVector packed_vector(int o, int E, int N, int L, int G, float rcp_n, float rcp_l) {
  PackedVector v;
  const int first = o > 0 ? o : 0;
  const int lr = small_div(first, N, rcp_n), col = first - lr * N;
  const int g = G == 1 ? 0 : small_div(col, L, rcp_l);
  const int end = min((g + 1) * L, N);  // the segment's end, in the row
  v.a = lr * G + g;
  v.k = min(lr * N + end - o, VEC);
  v.lo = first - o;
  v.hi = min(VEC, E - o);
  return v;
}

// The same vector from its packed (a, k) and o.
template <int VEC>
__device__ __forceinline__ PackedVector unpack_vector(uint32_t packed, int o, int E) {
  PackedVector v;
  v.a = int(packed & 0xffffu);
  v.k = int(packed >> 16);
  v.lo = o > 0 ? 0 : -o;
  v.hi = min(VEC, E - o);
  return v;
}

// The VEC / 4 words of FP8 codes of pk, elements [0, k) scaled by inv_a and [k, VEC) by inv_b
// (Pack::quantised_words with one reciprocal per element).
template <int DT, int VEC>
__device__ __forceinline__ void quantised_words_split(const Pack<DT, VEC>& pk, float inv_a, float inv_b, int k,
                                                      uint32_t (&w)[VEC / 4]) {
#pragma unroll
  for (int j = 0; j < VEC / 4; ++j) {
    float f[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = mul_rn(pk.f32(4 * j + e), 4 * j + e < k ? inv_a : inv_b);
    w[j] = canonical_nan4(e4m3x2(f[0], f[1]) | (e4m3x2(f[2], f[3]) << 16));
  }
}

template <int DT, int VEC>
__global__ void __launch_bounds__(kTileThreads, HPC_FP8_TILE_MIN_BLOCKS) fp8_quant_packed_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  __shared__ uint32_t seg_word[kPackedMaxSegs];  // segment amax bits, then its reciprocal scale's bits
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  const int N = int(p.row_len), L = int(p.seg_len), G = int(p.segs_per_row);
  const int64_t r0 = int64_t(blockIdx.x) * p.tile_segs;
  const int R = int(min(int64_t(p.tile_segs), p.rows - r0));
  const int E = R * N, nseg = R * G;
  // The common misalignment of x (in elements) and q (in bytes) modulo VEC.
  const int mis = int((reinterpret_cast<uintptr_t>(p.x) / sizeof(raw)) & (VEC - 1));
  const raw* xa = static_cast<const raw*>(p.x) - mis;
  uint8_t* qa = p.q - mis;
  const int64_t e0 = r0 * N + mis, v0 = e0 / VEC;
  const int head = int(e0 - v0 * VEC);  // cover elements before the CTA's first
  const int nvec = (head + E + VEC - 1) / VEC;

  const int stride = blockDim.x;  // the launcher sizes the CTA to its rows' cover (p.team threads)
  P pk[kBulkVecPerThread];
#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    const int i = threadIdx.x + j * stride;
    if (i < nvec) pk[j].load(xa + (v0 + i) * VEC);
  }
  for (int s = threadIdx.x; s < nseg; s += stride) seg_word[s] = 0u;
  __syncthreads();

  const float rcp_n = 1.0f / float(N), rcp_l = 1.0f / float(L);
  const int lane = threadIdx.x & 31;
  uint32_t meta[kBulkVecPerThread] = {};  // PackedVector::packed() of each vector
#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    const int i = threadIdx.x + j * stride;
    const bool live = i < nvec;
    if (!__any_sync(0xffffffffu, live)) continue;  // warp-uniform: the cover ended before this slice
    const PackedVector v = packed_vector<VEC>(i * VEC - head, E, N, L, G, rcp_n, rcp_l);
    meta[j] = v.packed();
    uint32_t ma = 0u, mb = 0u;
    if (live) {
      if (v.lo == 0 && v.hi == VEC && v.k == VEC) {
        ma = pk[j].amax_bits();
      } else {
        P part = pk[j];
        part.keep_range(v.lo, min(v.k, v.hi));
        ma = part.amax_bits();
        part = pk[j];
        part.keep_range(v.k, v.hi);
        mb = part.amax_bits();
      }
    }
    // The slice's 32 consecutive vectors hold a few consecutive segments (each at least a vector
    // long): one warp max (redux) per segment over the lanes' A and B parts, one shared atomic each.
    const uint32_t key = uint32_t(v.a);
    const uint32_t first = __reduce_min_sync(0xffffffffu, live ? key : 0xffffffffu);
    const uint32_t last = __reduce_max_sync(0xffffffffu, live ? key + uint32_t(mb != 0u) : 0u);
    for (uint32_t s = first; s <= last; ++s) {
      const uint32_t m = __reduce_max_sync(0xffffffffu, s == key ? ma : s == key + 1 ? mb : 0u);
      if (lane == 0 && m != 0u) atomicMax(&seg_word[s], m);
    }
  }
  __syncthreads();

  for (int s = threadIdx.x; s < nseg; s += stride) {
    const float scale = scale_from_amax_bits(seg_word[s], p.ue8m0);
    seg_word[s] = __float_as_uint(div_rn(1.0f, scale));
    const int lr = G == 1 ? s : s / G, g = s - lr * G;
    const int64_t row = r0 + lr;
    p.scale[row * p.scale_stride_row + g * p.scale_stride_seg] = scale;
    if (p.scale_stride_row == 1 && row == p.rows - 1) zero_scale_padding(p.scale, p.rows, p.scale_stride_seg, g);
  }
  __syncthreads();

#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    const int i = threadIdx.x + j * stride;
    const bool live = i < nvec;
    const PackedVector v = unpack_vector<VEC>(meta[j], i * VEC - head, E);
    const bool split = live && v.k < v.hi;
    // Warp-uniform choice: per-token slices rarely hold a row end, and the per-element choice of
    // reciprocal costs a compare and a select per element.
    const bool any_split = __any_sync(0xffffffffu, split);
    if (!live) continue;
    const float inv_a = __uint_as_float(seg_word[v.a]);
    uint32_t w[VEC / 4];
    if (any_split) {
      quantised_words_split(pk[j], inv_a, split ? __uint_as_float(seg_word[v.a + 1]) : inv_a, v.k, w);
    } else {
      pk[j].quantised_words(inv_a, w);
    }
    uint8_t* qv = qa + (v0 + i) * VEC;
    if (v.lo == 0 && v.hi == VEC) {
      P::store_words(qv, w);
    } else {
      P::store_words_range(qv, w, v.lo, v.hi);
    }
  }
}

// Whether the packed-rows kernel serves p (the caller checked p.vectorized), with its rows per CTA in
// p.tile_segs and its grid in p.num_tiles. False leaves p unchanged.
inline bool prepare_packed_kernel(QuantParams& p, int vec) {
  if (!p.tile || !p.bulk || vec == 1 || p.scale_source != kScaleDynamic || p.per_tensor_dynamic) return false;
  if (p.rows * p.segs_per_row == 0) return false;
  // Rows back to back in x and in q (row r = t * heads + h).
  if (p.heads > 1) {
    if (p.segs_per_row != 1 || p.x_stride_h != p.row_len || p.q_stride_h != p.row_len ||
        p.x_stride_t != p.heads * p.row_len || p.q_stride_t != p.heads * p.row_len)
      return false;
  } else if (p.rows > 1 && (p.x_stride_t != p.row_len || p.q_stride_t != p.row_len)) {
    return false;
  }
  // Every segment at least one vector long: a vector then holds parts of at most two.
  const int64_t tail = p.row_len % p.seg_len;
  if (p.seg_len < vec || (tail != 0 && tail < vec)) return false;
  // R rows cover at most R * row_len / vec + 2 vectors: one tile.
  int64_t rows_per_cta = (kBulkTileVectors - 2) * int64_t(vec) / p.row_len;
  const int64_t seg_cap = kPackedMaxSegs / p.segs_per_row;
  if (rows_per_cta > seg_cap) rows_per_cta = seg_cap;
  if (rows_per_cta > p.rows) rows_per_cta = p.rows;
  if (rows_per_cta < 1) return false;
  const int64_t ctas = (p.rows + rows_per_cta - 1) / rows_per_cta;
  if (ctas > 0x7fffffff) return false;
  // Threads: the cover's vectors (with up to vec - 1 elements before the first row) over 4 per
  // thread, in whole warps. N = 4095 bf16 is one row per CTA, 513 vectors: 160 threads, not 256 with
  // half of them idle (bytes in flight per SM are what the short-lived CTAs live on).
  const int64_t cover = (rows_per_cta * p.row_len + 2 * (vec - 1)) / vec;
  const int64_t threads = ((cover + kBulkVecPerThread - 1) / kBulkVecPerThread + 31) / 32 * 32;
  p.tile_segs = int(rows_per_cta);
  p.num_tiles = ctas;
  p.team = int(threads);  // the CTA size
  p.reverse = false;
  return true;
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_packed(const QuantParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(fp8_quant_packed_kernel<DT, VEC>, dim3(unsigned(p.num_tiles)), dim3(unsigned(p.team)), 0,
                            stream, pdl, p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
