// FP8 quantisation of long rows (per-token / per-head, dynamic scales) split over a cluster of CTAs.
//
// Rows of more than one tile (1024 vectors: bf16 N > 8192, e.g. the MLP intermediates 12288-28672
// that W8A8 per-token quantisation sees before the down projection) took the register kernel (16
// vectors per lane, a persistent grid): H200, 64 MB bf16 per cold call, 63.5-70 % of 4.27 TB/s at N =
// 12288 / 14336 / 18432 / 28672 (eighteenth session), where rows of one tile read ~79 % on the tile
// kernels. Here a row is cut into C <= 8 pieces of at most 1024 vectors, one per CTA of a C-CTA
// cluster (the row tile kernel's layout inside a piece: thread k holds vectors k, k + T, k + 2T,
// k + 3T): each CTA reduces its piece's amax, publishes it in its shared memory, and after one
// cluster barrier every thread reads the C partials through distributed shared memory. A second
// cluster barrier, waited on only after the stores, keeps each CTA's partial readable until its
// peers have read it. Same device primitives as every other kernel: same bits out.
#pragma once

#include "hpc_common/fp8_quant_tile.cuh"
#include "hpc_common/sm90.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

constexpr int kRowClusterMax = 8;  // portable cluster size: rows of up to 8 tiles

// p.tile_segs = C (CTAs per row, the cluster size), p.seg_vecs = vectors per CTA, blockDim = its
// threads (whole warps, at least one quarter of p.seg_vecs).
template <int DT, int VEC>
__global__ void __launch_bounds__(kTileThreads, HPC_FP8_TILE_MIN_BLOCKS) fp8_quant_row_cluster_kernel(const QuantParams p) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  __shared__ uint32_t red[kTileThreads / 32];
  __shared__ uint32_t piece_amax;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  const int clusters = p.tile_segs;
  const uint32_t rank = sm90::cluster_rank();
  const Segment s = locate(p, int64_t(blockIdx.x) / clusters);
  const int first = int(rank) * p.seg_vecs;
  const int count = min(p.seg_vecs, int(s.len / VEC) - first);
  const raw* x = static_cast<const raw*>(p.x) + s.x_off + int64_t(first) * VEC;
  uint8_t* q = p.q + s.q_off + int64_t(first) * VEC;
  const int stride = blockDim.x;

  P pk[kBulkVecPerThread];
  AmaxAcc<DT, VEC> acc;
#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    if (threadIdx.x + j * stride < count) pk[j].load(x + int64_t(threadIdx.x + j * stride) * VEC);
  }
#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    if (threadIdx.x + j * stride < count) acc.add(pk[j]);
  }
  // red[] is unused before this point: one call per CTA, no barrier in front
  const uint32_t m = team_max<false>(acc.bits(), stride, red);
  if (threadIdx.x == 0) piece_amax = m;
  sm90::cluster_sync();  // every piece's amax written (release) and visible (acquire)
  uint32_t row_amax = 0u;
  const uint32_t local = sm90::smem_u32(&piece_amax);
  for (int r = 0; r < clusters; ++r) row_amax = max(row_amax, __float_as_uint(sm90::ld_dsmem_f32(sm90::map_to_rank(local, r))));
  sm90::cluster_arrive_release();  // this CTA's reads of its peers' piece_amax are done

  const float scale = scale_from_amax_bits(row_amax, p.ue8m0);
  const float inv = div_rn(1.0f, scale);
#pragma unroll
  for (int j = 0; j < kBulkVecPerThread; ++j) {
    if (threadIdx.x + j * stride < count) pk[j].store_quantised(q + int64_t(threadIdx.x + j * stride) * VEC, inv);
  }
  if (rank == 0 && threadIdx.x == 0) p.scale[s.row * p.scale_stride_row] = scale;
  sm90::cluster_wait_acquire();  // the peers have read this CTA's piece_amax: it may exit
}

// Whether the row cluster kernel serves p (dynamic scales, one segment per row, 16-byte aligned rows
// of 1025 to 8192 vectors), with its geometry set. False: p unchanged.
inline bool prepare_row_clusters(QuantParams& p, int vec) {
  if (!p.tile || !p.bulk || vec == 1 || p.peel || p.scale_source != kScaleDynamic || p.per_tensor_dynamic) return false;
  if (p.segs_per_row != 1 || p.seg_len % vec != 0) return false;
  const int64_t sv = p.seg_len / vec;
  if (sv <= kBulkTileVectors || sv > int64_t(kRowClusterMax) * kBulkTileVectors) return false;
  const int64_t clusters = (sv + kBulkTileVectors - 1) / kBulkTileVectors;
  const int64_t per_cta = (sv + clusters - 1) / clusters;
  const int64_t ctas = p.rows * clusters;
  if (ctas > 0x7fffffff) return false;
  p.tile_segs = int(clusters);
  p.seg_vecs = int(per_cta);
  p.team = int(((per_cta + kBulkVecPerThread - 1) / kBulkVecPerThread + 31) / 32 * 32);  // the CTA size
  p.num_tiles = ctas;
  p.reverse = false;
  return true;
}

template <int DT, int VEC>
inline cudaError_t launch_fp8_quant_row_cluster(const QuantParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel_cluster(fp8_quant_row_cluster_kernel<DT, VEC>, dim3(unsigned(p.num_tiles)),
                                    dim3(unsigned(p.team)), 0, unsigned(p.tile_segs), stream, pdl, p);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
