"""The three ways the runner computes a layer (`make_backend(name)`):

- `ours`: hpc_attention.qk_norm_rope_store + plan_decode (once per step) + decode, hpc_router_gemm
  (FP32 router weights, BF16 activations), hpc_moe.fused_moe on prepared weights; BF16 activations.
- `baseline`: what a framework runs by default without our kernels: when SGLang imports, its Triton
  decode attention over the paged cache and its QK-Norm / RoPE kernels (baseline.py,
  baseline_sglang.py), else torch SDPA over the gathered pages and torch RMSNorm / RoPE; torch KV
  write; an FP32 torch matmul router; SGLang's Triton `fused_experts` when SGLang imports (else a
  torch grouped-GEMM MoE); BF16 activations. `impl` names what ran.
- `reference`: the packages' pure-torch references in float32 / float64 (any device; eager only).

Dense projections, norms of the residual stream, top-k softmax, embedding and lm_head are shared
torch code (model.py).
"""

from __future__ import annotations

from .base import Backend

BACKENDS = ("ours", "baseline", "reference")


def make_backend(name: str) -> Backend:
    if name == "ours":
        from .ours import OursBackend

        return OursBackend()
    if name == "baseline":
        from .baseline import BaselineBackend

        return BaselineBackend()
    if name == "reference":
        from .reference import ReferenceBackend

        return ReferenceBackend()
    raise ValueError(f"make_backend: backend must be one of {BACKENDS}, got {name!r}")


__all__ = ["BACKENDS", "Backend", "make_backend"]
