// Decode kernel instantiations with BF16 KV and the cp.async producer (BF16 or FP8 Q). Split
// from the FP8-KV and TMA files so they all compile in parallel.
#include "hpc_attention/paged_decode.cuh"

cudaError_t hpc_attn_launch_paged_decode_bf16kv(const hpc::attn::PagedDecodeParams& p, bool fp8_q, int num_ctas,
                                                 cudaStream_t stream, bool pdl) {
  return fp8_q ? hpc::attn::launch_paged_decode<false, true, false>(p, num_ctas, stream, pdl)
               : hpc::attn::launch_paged_decode<false, false, false>(p, num_ctas, stream, pdl);
}
