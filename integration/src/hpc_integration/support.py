"""What the kernels support, as pure functions of the serving configuration, and the start-up
messages that name the setting to change when a configuration is outside it.

Every adapter asks these functions once, when the framework builds its backend or layer; a
`None` answer means the hpc-ops operator serves it, a string is the reason it does not (the
framework's own path then runs, and the string is logged once at start-up).
"""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger("hpc_integration")

HEAD_DIM = 128  # hpc_attention.heuristics.HEAD_DIM: the decode kernel's only head dim
MAX_GQA_GROUP = 16  # Hq / Hkv in 1..16
KV_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)
MOE_HIDDEN_MULTIPLE = 128
MOE_INTER_MULTIPLE = 64
MOE_MAX_TOP_K = 16
MOE_FP8_BLOCK = (128, 128)  # the block-scaled format's [block_n, block_k] (hpc_moe "fp8_block")
ROUTER_MULTIPLE = 64  # router weight [N, K]: N and K multiples of 64

OPS = ("attention", "moe", "router")
ENV_OPS = "HPC_INTEGRATION_OPS"
ENV_CPU_REFERENCE = "HPC_INTEGRATION_CPU_REFERENCE"
ENV_SGLANG_PROLOGUE = "HPC_SGLANG_PROLOGUE"

_said: set[str] = set()


def say(message: str) -> None:
    """Log a start-up message once per process (plugins run in every worker)."""
    if message in _said:
        return
    _said.add(message)
    logger.warning("hpc-integration: %s", message)


def enabled_ops() -> frozenset[str]:
    """Operators switched on by HPC_INTEGRATION_OPS (comma-separated subset of attention, moe,
    router; default all). An unknown name is an error, so a typo never silently disables one."""
    raw = os.environ.get(ENV_OPS)
    if raw is None or not raw.strip():
        return frozenset(OPS)
    names = {x.strip().lower() for x in raw.split(",") if x.strip()}
    if names == {"none"}:
        return frozenset()
    bad = names - set(OPS)
    if bad:
        raise ValueError(f"{ENV_OPS}={raw!r}: unknown operator(s) {sorted(bad)}; use a subset of {list(OPS)} or 'none'")
    return frozenset(names)


def cpu_reference_allowed() -> bool:
    """HPC_INTEGRATION_CPU_REFERENCE=1: on a machine without an SM90 GPU the adapters still
    register and run the operators' pure-torch references (slow; for tests of the wiring)."""
    return os.environ.get(ENV_CPU_REFERENCE, "0") == "1"


def device_reason(device: torch.device | str | None = None) -> str | None:
    """None when `device` is an SM90 GPU (the kernels are built for sm_90a only)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type != "cuda":
        return f"device is {device.type}, the hpc-ops kernels need an SM90 (Hopper) GPU"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible, the hpc-ops kernels need an SM90 (Hopper) GPU"
    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(index)
    if cap != (9, 0):
        return f"GPU {index} has compute capability {cap[0]}.{cap[1]}, the hpc-ops kernels need SM90 (H100/H200/H20)"
    return None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def attention_reason(*, head_dim: int, num_qo_heads: int, num_kv_heads: int, page_size: int,
                     kv_dtype: torch.dtype, v_head_dim: int | None = None, sliding_window: int | None = None,
                     logit_cap: float | None = None, is_cross: bool = False) -> str | None:
    """None when the decode kernel serves this attention layer, else the setting to change."""
    if head_dim != HEAD_DIM or (v_head_dim is not None and v_head_dim != HEAD_DIM):
        return f"head dim {head_dim} (v {v_head_dim or head_dim}): the decode kernel needs head_dim={HEAD_DIM}"
    if num_kv_heads < 1 or num_qo_heads % num_kv_heads:
        return f"{num_qo_heads} query heads are not a multiple of {num_kv_heads} KV heads"
    group = num_qo_heads // num_kv_heads
    if not 1 <= group <= MAX_GQA_GROUP:
        return f"GQA group {group} (heads {num_qo_heads}/{num_kv_heads}): supported 1..{MAX_GQA_GROUP}"
    if page_size < 1 or page_size & (page_size - 1):
        return f"page size {page_size}: set the page/block size to a power of two (64 is the reference)"
    if kv_dtype not in KV_DTYPES:
        return f"KV cache dtype {_dtype_name(kv_dtype)}: set the KV cache dtype to bfloat16 (auto) or fp8_e4m3"
    if sliding_window is not None and sliding_window > 0:
        return f"sliding window {sliding_window}: the decode kernel attends the whole context"
    if logit_cap:
        return f"logit soft cap {logit_cap}: not supported by the decode kernel"
    if is_cross:
        return "cross attention: not supported by the decode kernel"
    return None


def prologue_enabled() -> bool:
    """HPC_SGLANG_PROLOGUE=0 keeps the framework's QK-Norm, RoPE and KV write (default 1: fused)."""
    raw = os.environ.get(ENV_SGLANG_PROLOGUE, "1").strip()
    if raw not in ("0", "1"):
        raise ValueError(f"{ENV_SGLANG_PROLOGUE}={raw!r}: use 1 (fused prologue, the default) or 0 (off)")
    return raw == "1"


def prologue_reason(*, head_dim: int, rotary_dim: int, cos_sin_shape: tuple[int, ...], max_positions: int,
                    q_norm_eps: float | None, k_norm_eps: float | None, norm_dtypes: tuple[torch.dtype, ...],
                    act_dtype: torch.dtype, kv_dtype: torch.dtype) -> str | None:
    """None when hpc_attention.qk_norm_rope_store computes what this attention layer's QK-Norm, RoPE
    and KV write compute, else why not. cos_sin_shape: the layer's [max_pos, rotary_dim] cache;
    max_positions: the longest context the server admits (the kernel clamps positions past the cache)."""
    if head_dim != HEAD_DIM:
        return f"head dim {head_dim}: the fused prologue needs head_dim={HEAD_DIM}"
    if rotary_dim < 2 or rotary_dim > head_dim or rotary_dim % 2:
        return f"rotary dim {rotary_dim}: the fused prologue rotates an even number of dims in 2..{head_dim}"
    if len(cos_sin_shape) != 2 or cos_sin_shape[1] != rotary_dim:
        return f"cos/sin cache of shape {list(cos_sin_shape)}: the fused prologue reads [max_pos, {rotary_dim}]"
    if cos_sin_shape[0] < max_positions:
        return (f"the rope cache holds {cos_sin_shape[0]} positions, fewer than the context length {max_positions}: "
                "lower --context-length")
    if (q_norm_eps is None) != (k_norm_eps is None) or q_norm_eps != k_norm_eps:
        return f"q / k norm eps {q_norm_eps} / {k_norm_eps}: the fused prologue takes one eps for both"
    if len(set(norm_dtypes)) > 1 or not set(norm_dtypes) <= {torch.bfloat16, torch.float32}:
        return f"q / k norm weights of dtypes {[str(d) for d in norm_dtypes]}: one of bfloat16 or float32 needed"
    if act_dtype != torch.bfloat16:
        return f"activations {str(act_dtype).replace('torch.', '')}: the fused prologue reads BF16 q / k / v"
    if kv_dtype not in KV_DTYPES:
        return f"KV cache dtype {str(kv_dtype).replace('torch.', '')}: the fused prologue writes bfloat16 or fp8_e4m3"
    return None


def moe_reason(*, hidden_size: int, intermediate_size: int, top_k: int, activation: str = "silu",
               gated: bool = True, quant: str | None = "bf16", has_bias: bool = False) -> str | None:
    """None when hpc_moe.fused_moe serves this MoE layer (per rank), else the setting to change.
    quant: "bf16", "fp8_tensor", "fp8_block", or None / another string for formats it lacks."""
    if quant not in ("bf16", "fp8_tensor", "fp8_block"):
        return f"quantisation {quant!r}: the fused MoE serves BF16, FP8 per-tensor and FP8 128x128 block weights"
    if activation != "silu" or not gated:
        return f"activation {activation!r} (gated={gated}): the fused MoE computes silu(gate) * up"
    if has_bias:
        return "expert biases: not supported by the fused MoE"
    if hidden_size % MOE_HIDDEN_MULTIPLE:
        return f"hidden size {hidden_size}: the fused MoE needs a multiple of {MOE_HIDDEN_MULTIPLE}"
    if intermediate_size % MOE_INTER_MULTIPLE:
        return (f"expert intermediate size per rank {intermediate_size}: the fused MoE needs a multiple of "
                f"{MOE_INTER_MULTIPLE} (change the tensor-parallel size)")
    if not 1 <= top_k <= MOE_MAX_TOP_K:
        return f"top-k {top_k}: the fused MoE supports 1..{MOE_MAX_TOP_K}"
    return None


def fp8_moe_reason(*, block_shape=None, weight_dtype: torch.dtype = torch.float8_e4m3fn,
                   scale_dtype: torch.dtype = torch.float32) -> str | None:
    """None when hpc_moe's FP8 formats hold this FP8 MoE layer's weights, else the setting to change.
    block_shape: None for per-tensor weight scales ("fp8_tensor"), else the weight block [n, k]
    ("fp8_block" needs 128 x 128); weight_dtype / scale_dtype: the checkpoint's."""
    if weight_dtype != torch.float8_e4m3fn:
        return f"FP8 weights of dtype {_dtype_name(weight_dtype)}: the fused MoE reads float8_e4m3fn (OCP E4M3)"
    if scale_dtype != torch.float32:
        return f"FP8 weight scales of dtype {_dtype_name(scale_dtype)}: the fused MoE reads float32 scales"
    if block_shape is not None and tuple(block_shape) != MOE_FP8_BLOCK:
        return (f"FP8 weight block size {list(block_shape)}: the fused MoE's block format is "
                f"weight_block_size={list(MOE_FP8_BLOCK)}")
    return None


def router_reason(*, num_experts: int, hidden_size: int, weight_dtype: torch.dtype,
                  has_bias: bool = False) -> str | None:
    """None when hpc_router_gemm serves this gate (FP32 weight [N, K], BF16 activations)."""
    if weight_dtype != torch.float32:
        return f"gate weight dtype {_dtype_name(weight_dtype)}: the router GEMM serves FP32 router weights"
    if has_bias:
        return "gate bias: not supported by the router GEMM"
    if num_experts % ROUTER_MULTIPLE or hidden_size % ROUTER_MULTIPLE:
        return f"gate [{num_experts}, {hidden_size}]: the router GEMM needs multiples of {ROUTER_MULTIPLE}"
    return None
