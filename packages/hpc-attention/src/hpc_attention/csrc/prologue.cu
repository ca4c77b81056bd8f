// The fused attention prologue's host entry point (prologue_params.h): check what the kernel assumes,
// pick the instantiation for (KV dtype, Q dtype), launch. The Python layer (prologue.py) checks every
// argument with errors that name it; these checks only keep a bad call from reaching the device.
#include "hpc_attention/prologue.cuh"

namespace hpc::attn {

cudaError_t run_qk_norm_rope_store(const PrologueParams& p, bool fp8_kv, bool fp8_q, cudaStream_t stream, bool pdl) {
  if (p.num_kv_heads < 1 || p.num_qo_heads < p.num_kv_heads || p.num_qo_heads % p.num_kv_heads ||
      p.num_qo_heads / p.num_kv_heads > 16 || p.rotary_dim < 0 || p.rotary_dim > kPrologueHeadDim ||
      (p.rotary_dim & 1) || (p.rotary_dim > 0 && p.max_pos < 1) || p.page_size < 1 || !(p.eps > 0.f) ||
      (fp8_q && p.q_scale == nullptr))
    return cudaErrorInvalidValue;
  if (fp8_kv) {
    return fp8_q ? launch_qk_norm_rope_store<true, true>(p, stream, pdl)
                 : launch_qk_norm_rope_store<true, false>(p, stream, pdl);
  }
  return fp8_q ? launch_qk_norm_rope_store<false, true>(p, stream, pdl)
               : launch_qk_norm_rope_store<false, false>(p, stream, pdl);
}

}  // namespace hpc::attn
