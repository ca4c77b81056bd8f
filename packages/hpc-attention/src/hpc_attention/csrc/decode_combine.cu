// Instantiates the combine kernel of the decode attention.
#include "hpc_attention/decode_combine.cuh"

cudaError_t hpc_attn_launch_decode_combine(const hpc::attn::DecodeCombineParams& p, int num_ctas,
                                           cudaStream_t stream, bool pdl) {
  return hpc::attn::launch_decode_combine(p, num_ctas, stream, pdl);
}
