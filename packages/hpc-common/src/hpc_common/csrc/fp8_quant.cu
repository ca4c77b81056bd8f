// FP8 E4M3 quantisation: dispatch on input dtype and on the vectorised / scalar path.
// Generic and amax kernels: 3 dtypes x 2 paths (flat amax kernel: vector path); short-segment
// kernel: 3 dtypes x (4 unmasked + 3 masked); tile kernel: 3 dtypes x (dynamic, per-tensor scale);
// flat kernel: 3 dtypes (vector path only); row tile / long row kernels (rows of 4-4096 vectors; rows
// of several segments ending in a shorter one in their per-team-located form): 3 dtypes x 3, 4, 6, 7,
// 8 or 16 vectors per lane. The mode is runtime geometry.
#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_small_seg.cuh"
#include "hpc_common/fp8_quant_tile.cuh"
#include "hpc_common/fp8_quant_tile_launch.cuh"

using hpc::fp8::QuantParams;

namespace {
// The order of tries below is mirrored by tests/common/fp8_dispatch_probe.cu, which a CPU test runs to
// check which kernel each shape takes: change both together.
template <int DT, int VEC>
cudaError_t launch_vector_path(const QuantParams& p, cudaStream_t stream, bool pdl) {
  using namespace hpc::fp8;
  QuantParams t = p;
  switch (prepare_tile_kernel(t, VEC)) {
    case TileKernel::kColumns:
      return launch_fp8_quant_col_tile<DT, VEC>(t, stream, pdl);
    case TileKernel::kFlat:
      return launch_fp8_quant_flat<DT, VEC>(t, stream, pdl);
    case TileKernel::kTiles:
      return launch_fp8_quant_tile<DT, VEC>(t, stream, pdl);
    case TileKernel::kRows:
      return launch_fp8_quant_row_tile<DT, VEC>(t, stream, pdl);
    case TileKernel::kOddGroupRows:
      return launch_fp8_quant_odd_group_rows<DT, VEC>(t, stream, pdl);
    case TileKernel::kNone:
      break;
  }
  // Not a tile kernel's shape (or a grid beyond 2^31 - 1 CTAs): the register kernels.
  switch (small_seg_vectors_per_lane(p, VEC)) {
    case 1:
      return launch_fp8_quant_small_seg<DT, VEC, 1>(p, stream, pdl);
    case 2:
      return launch_fp8_quant_small_seg<DT, VEC, 2>(p, stream, pdl);
    case 4:
      return launch_fp8_quant_small_seg<DT, VEC, 4>(p, stream, pdl);
    case 8:
      return launch_fp8_quant_small_seg<DT, VEC, 8>(p, stream, pdl);
    default:
      break;
  }
  switch (small_seg_masked_slots(p, VEC)) {
    case 3:
      return launch_fp8_quant_small_seg<DT, VEC, 3, true>(p, stream, pdl);
    case 5:
      return launch_fp8_quant_small_seg<DT, VEC, 5, true>(p, stream, pdl);
    case 9:
      return launch_fp8_quant_small_seg<DT, VEC, 9, true>(p, stream, pdl);
    default:
      return launch_fp8_quant_typed<DT, VEC>(p, stream, pdl);
  }
}
}  // namespace

cudaError_t launch_fp8_quant(const QuantParams& p, cudaStream_t stream, bool pdl) {
  using namespace hpc::fp8;
  // The kernels index inside a segment with 32-bit integers (quant.py refuses such rows first).
  if (p.seg_len >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  switch (p.dtype) {
    case kBF16:
      return p.vectorized ? launch_vector_path<kBF16, 8>(p, stream, pdl)
                          : launch_fp8_quant_typed<kBF16, 1>(p, stream, pdl);
    case kFP16:
      return p.vectorized ? launch_vector_path<kFP16, 8>(p, stream, pdl)
                          : launch_fp8_quant_typed<kFP16, 1>(p, stream, pdl);
    case kFP32:
      return p.vectorized ? launch_vector_path<kFP32, 4>(p, stream, pdl)
                          : launch_fp8_quant_typed<kFP32, 1>(p, stream, pdl);
    default:
      return cudaErrorInvalidValue;
  }
}
