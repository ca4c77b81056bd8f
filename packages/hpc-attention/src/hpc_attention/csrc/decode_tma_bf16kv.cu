// Decode kernel instantiations with BF16 KV and the TMA producer (BF16 or FP8 Q); a file of
// their own so the four producer x KV-dtype pairs compile in parallel.
#include "hpc_attention/decode.cuh"

cudaError_t hpc_attn_launch_decode_tma_bf16kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                       cudaStream_t stream, bool pdl) {
  return fp8_q ? hpc::attn::launch_decode<false, true, true>(p, num_ctas, stream, pdl)
               : hpc::attn::launch_decode<false, false, true>(p, num_ctas, stream, pdl);
}
