// Self-tests of the launch utilities. (1) Two dependent kernels chained with PDL, used by the tests to show that results are the
// same with PDL on and off, eagerly and under CUDA-graph replay. The producer triggers its
// dependents at entry (the earliest legal point) and then spins, so the consumer really is
// resident and waiting while the producer still writes: a missing pdl_wait would show.
#include <cstdint>

#include "hpc_common/pdl.cuh"

namespace {

__global__ void pdl_producer(const float* __restrict__ x, float* __restrict__ y, int n, int spin) {
  hpc::pdl_launch_dependents();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  // Explicit roundings (no FMA contraction) so torch's y = 2x + 1 matches bitwise.
  if (i < n) y[i] = __fadd_rn(__fmul_rn(x[i], 2.0f), 1.0f);
}

__global__ void pdl_consumer(const float* __restrict__ y, float* __restrict__ z, int n) {
  hpc::pdl_wait();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  // Read a value written by another CTA of the producer, so a partial wait would show.
  if (i < n) z[i] = __fadd_rn(__fmul_rn(y[i], y[i]), y[(i + 4096) % n]);
}

// (2) A kernel with 48 KB of dynamic plus 1 KB of static shared memory: launch_kernel must opt
// it in (hpc::allow_dynamic_smem; without the attribute the launch fails). One CTA reverses a
// block of kSmemTestFloats floats through the dynamic buffer and adds the static one.
constexpr int kSmemTestFloats = 48 * 1024 / 4;
constexpr int kSmemTestStatic = 256;

__global__ void smem_opt_in_kernel(const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ float dyn[];
  __shared__ float fixed[kSmemTestStatic];
  for (int i = threadIdx.x; i < kSmemTestStatic; i += blockDim.x) fixed[i] = float(i);
  for (int i = threadIdx.x; i < kSmemTestFloats; i += blockDim.x) dyn[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < kSmemTestFloats; i += blockDim.x) {
    y[i] = __fadd_rn(dyn[kSmemTestFloats - 1 - i], fixed[i % kSmemTestStatic]);
  }
}

}  // namespace

cudaError_t launch_pdl_chain(const float* x, float* y, float* z, int n, int spin, bool pdl,
                             cudaStream_t stream) {
  dim3 block(256), grid((n + 255) / 256);
  cudaError_t e = hpc::launch_kernel(pdl_producer, grid, block, 0, stream, pdl, x, y, n, spin);
  if (e != cudaSuccess) return e;
  return hpc::launch_kernel(pdl_consumer, grid, block, 0, stream, pdl, (const float*)y, z, n);
}

int smem_opt_in_floats() { return kSmemTestFloats; }

cudaError_t launch_smem_opt_in(const float* x, float* y, cudaStream_t stream) {
  return hpc::launch_kernel(smem_opt_in_kernel, dim3(1), dim3(256), size_t(kSmemTestFloats) * 4, stream, false, x, y);
}
