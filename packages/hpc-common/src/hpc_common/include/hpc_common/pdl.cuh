// Programmatic Dependent Launch (PDL) on SM90, shared by every hpc-ops kernel.
//
// A kernel launched with `pdl = true` may start while the previous kernel on the stream is
// still running; it must call hpc::pdl_wait() before it reads anything the previous kernel
// writes. A kernel calls hpc::pdl_launch_dependents() once its remaining work no longer
// needs exclusive use of the SMs, so the next kernel's prologue can overlap its tail.
// Both are no-ops when the launch carried no PDL attribute, so kernels call them always.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "hpc_common/smem_opt_in.h"

namespace hpc {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launch `kernel<<<grid, block, smem, stream>>>(args...)` with the PDL attribute when `pdl`
// is true (the process-wide switch lives in Python: hpc_common.set_pdl) and, when
// `cluster_x` > 1, as thread-block clusters of `cluster_x` CTAs along x. Returns the launch
// error; callers turn it into an exception naming the kernel (see check.h).
template <typename... KernelArgs, typename... Args>
inline cudaError_t launch_kernel_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                                         unsigned cluster_x, cudaStream_t stream, bool pdl, Args&&... args) {
  if (cudaError_t e = allow_dynamic_smem(kernel, smem); e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[n++].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... KernelArgs, typename... Args>
inline cudaError_t launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t stream, bool pdl, Args&&... args) {
  return launch_kernel_cluster(kernel, grid, block, smem, 1u, stream, pdl, std::forward<Args>(args)...);
}

}  // namespace hpc
