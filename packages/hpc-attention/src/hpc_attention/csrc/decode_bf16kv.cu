// Decode kernel instantiations with BF16 KV and the cp.async producer (BF16 or FP8 Q). Split
// from the FP8-KV and TMA files so they all compile in parallel.
#include "hpc_attention/decode.cuh"

cudaError_t hpc_attn_launch_decode_bf16kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                   cudaStream_t stream, bool pdl) {
  return fp8_q ? hpc::attn::launch_decode<false, true, false>(p, num_ctas, stream, pdl)
               : hpc::attn::launch_decode<false, false, false>(p, num_ctas, stream, pdl);
}
