// Persistent-grid sizing: one wave of CTAs that stays resident and loops over work.
#pragma once

#include <cuda_runtime.h>

#include "hpc_common/smem_opt_in.h"

namespace hpc {

// CTAs per SM the kernel can keep resident with this block size and dynamic shared memory,
// times the SM count the caller passes (read from the device in Python and overridable
// there: hpc_common.set_num_sms / HPC_NUM_SMS). Never returns less than num_sms.
template <typename Kernel>
inline int persistent_ctas(Kernel kernel, int threads, size_t smem, int num_sms,
                           int max_ctas_per_sm = 0) {
  if (allow_dynamic_smem(kernel, smem) != cudaSuccess) cudaGetLastError();  // the query below reports it
  int per_sm = 1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();  // clear: fall back to one CTA per SM
    per_sm = 1;
  }
  if (max_ctas_per_sm > 0 && per_sm > max_ctas_per_sm) per_sm = max_ctas_per_sm;
  return per_sm * num_sms;
}

// How many clusters of `cluster_x` CTAs of this kernel fit on the device at once (0 if the
// query fails): the persistent-grid size of a cluster kernel.
template <typename Kernel>
inline int max_active_clusters(Kernel kernel, int threads, size_t smem, unsigned cluster_x) {
  if (allow_dynamic_smem(kernel, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster_x, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster_x;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace hpc
