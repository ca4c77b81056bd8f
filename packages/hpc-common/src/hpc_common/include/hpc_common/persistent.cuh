// Persistent-grid sizing: one wave of CTAs that stays resident and loops over work.
#pragma once

#include <cuda_runtime.h>

namespace hpc {

// CTAs per SM the kernel can keep resident with this block size and dynamic shared memory,
// times the SM count the caller passes (read from the device in Python and overridable
// there: hpc_common.set_num_sms / HPC_NUM_SMS). Never returns less than num_sms.
template <typename Kernel>
inline int persistent_ctas(Kernel kernel, int threads, size_t smem, int num_sms,
                           int max_ctas_per_sm = 0) {
  if (smem > 48 * 1024) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  }
  int per_sm = 1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();  // clear: fall back to one CTA per SM
    per_sm = 1;
  }
  if (max_ctas_per_sm > 0 && per_sm > max_ctas_per_sm) per_sm = max_ctas_per_sm;
  return per_sm * num_sms;
}

}  // namespace hpc
