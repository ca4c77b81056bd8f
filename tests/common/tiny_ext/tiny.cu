#include "tiny.cuh"
#include "hpc_common/pdl.cuh"

__global__ void tiny_kernel(int* out) {
  hpc::pdl_wait();
  *out = TINY_VALUE + 1;
}

int tiny_host_value() { return TINY_VALUE + 1; }
