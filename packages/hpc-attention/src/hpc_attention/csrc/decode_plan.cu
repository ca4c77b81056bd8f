// Instantiates the decode planner (one kernel, no template parameters).
#include "hpc_attention/decode_plan.cuh"

cudaError_t hpc_attn_launch_decode_plan(const hpc::attn::DecodePlanParams& p, cudaStream_t stream, bool pdl) {
  return hpc::attn::launch_decode_plan(p, stream, pdl);
}
