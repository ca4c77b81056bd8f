// TMA descriptors of the router GEMM launchers, on top of hpc_common's tensor-map encoder (the
// driver's cuTensorMapEncodeTiled through the runtime entry point: no -lcuda). Cluster launches
// and cluster occupancy are hpc::launch_kernel_cluster / hpc::max_active_clusters (hpc_common
// pdl.cuh, persistent.cuh).
#pragma once

#include <cstdint>

#include "hpc_common/tma_encode.h"

namespace hpc::router_gemm {

// 2-D BF16 tensor [outer, inner] with a row pitch of `row_bytes` (a multiple of 16), read in
// boxes of [box_outer, box_inner] into 128-byte-swizzled shared memory; out-of-range rows read as 0.
inline cudaError_t encode_bf16_2d_sw128(CUtensorMap* map, const void* ptr, uint64_t inner, uint64_t outer,
                                        uint64_t row_bytes, uint32_t box_inner, uint32_t box_outer) {
  const uint64_t dims[2] = {inner, outer};
  const uint64_t strides[1] = {row_bytes};
  const uint32_t box[2] = {box_inner, box_outer};
  return hpc::tma::encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, dims, strides, box,
                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

}  // namespace hpc::router_gemm
