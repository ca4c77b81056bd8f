// Decode kernel instantiations with FP8 E4M3 KV and the TMA producer (BF16 or FP8 Q).
#include "hpc_attention/decode.cuh"

cudaError_t hpc_attn_launch_decode_tma_fp8kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                      cudaStream_t stream, bool pdl) {
  return fp8_q ? hpc::attn::launch_decode<true, true, true>(p, num_ctas, stream, pdl)
               : hpc::attn::launch_decode<true, false, true>(p, num_ctas, stream, pdl);
}
