"""Shape heuristics of the fused MoE: pure functions of the call's shape and the device, resolved on
the host (no device value is read), so a captured CUDA graph keeps its choice.

`gemm_path` picks how both GEMM kernels stream their weights (DESIGN.md, "Bulk-copy path"):
"ring" (per-lane 16-byte loads through a register ring) or "bulk" (bulk copies into a shared-memory
ring per warp). Both give bitwise equal outputs. The bulk path is not yet measured on the H200, so
every shape keeps the ring path until the timings (tools/probes/moe/time_moe.py prints both) say
where the bulk path is faster.
"""

from __future__ import annotations

PATHS = ("ring", "bulk")


def gemm_path(T: int, top_k: int, E_local: int, H: int, I: int, quant: str, num_sms: int) -> str:
    """The GEMM weight-streaming path for a call of T tokens (top_k experts each, E_local local
    experts, hidden H, intermediate I, weight format `quant`) on a device with num_sms SMs."""
    del T, top_k, E_local, H, I, quant, num_sms  # one choice until measured
    return "ring"
