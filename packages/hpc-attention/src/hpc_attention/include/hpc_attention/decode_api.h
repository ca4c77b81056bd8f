// Host entry points of the decode attention (csrc/decode_dispatch.cu): check, pick the kernel, launch.
// Plain structs and raw pointers only (no torch); the binding (csrc/bindings.cpp) only exports these.
#pragma once

#include <cuda_runtime.h>

#include "hpc_attention/decode_params.h"

namespace hpc::attn {

// How one decode call is launched (host side; not a kernel parameter).
struct DecodeLaunch {
  bool fp8_kv = false;   // K / V caches are E4M3 (else BF16)
  bool fp8_q = false;    // q is E4M3 with per-(token, head) scales (else BF16)
  bool tma = true;       // the TMA producer (pages >= 16 tokens); else the cp.async producer
  int num_ctas = 1;      // persistent CTAs = the plan's owned bins
  int combine_ctas = 1;  // grid of the combine kernel (p.merge == 0 only)
  bool pdl = false;
  cudaStream_t stream = nullptr;
};

// The planner on `stream`: p as the caller filled it, then the line order (set_line_order).
cudaError_t run_decode_plan(DecodePlanParams p, bool head_major, bool cut_to_heads, cudaStream_t stream, bool pdl);

// One decode call: the caches' tensor maps (TMA producer), the decode kernel for (fp8_kv, fp8_q, producer) and, when
// p.merge == 0, the combine kernel. Returns the driver's error when it cannot encode the caches' tensor maps (every
// Hopper driver has the encoder; the Python layer checks the strides and alignment the maps need).
cudaError_t run_decode(DecodeParams p, const DecodeLaunch& launch);

}  // namespace hpc::attn
