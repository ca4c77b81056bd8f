"""SGLang router hooks: FP32 router weights with BF16 activations served by hpc_router_gemm.

Two call sites compute such scores: `linear_bf16_fp32(x, weight)` (LongCat-Flash, DeepSeek-V4
style routers; a function with no registry) and a `ReplicatedLinear` whose weight is kept in FP32
and is fed BF16 activations (a gate configured so). Both get an AROUND hook through SGLang's plugin hook
registry; the split of each weight is made once and cached per weight tensor (keyed by its
storage, refreshed after in-place updates by hpc_router_gemm's version check). Calls the router
GEMM cannot serve (other dtypes or shapes, a bias) run the original.

HPC_INTEGRATION_ROUTER_FP32=1 also makes every unquantised `*.gate` ReplicatedLinear hold its
weight in FP32 (a BF16 checkpoint loads exactly), so such gates score in FP32 end to end.
"""

from __future__ import annotations

import torch

from .. import ops, support

# Where each release defines it (0.5.23, 0.5.17).
LINEAR_BF16_FP32 = ("sglang.kernels.ops.gemm.bf16_fp32.linear_bf16_fp32",
                    "sglang.kernels.ops.attention.dsv4.gemm.linear_bf16_fp32")
REPLICATED_LINEAR_FORWARD = "sglang.srt.layers.linear.ReplicatedLinear.forward"
REPLICATED_LINEAR_INIT = "sglang.srt.layers.linear.ReplicatedLinear.__init__"
ENV_ROUTER_FP32 = "HPC_INTEGRATION_ROUTER_FP32"

_states: dict[tuple, ops.RouterState] = {}


def _state(weight: torch.Tensor) -> ops.RouterState | None:
    if support.router_reason(num_experts=weight.shape[0], hidden_size=weight.shape[-1], weight_dtype=weight.dtype) \
            is not None or weight.dim() != 2 or not weight.is_contiguous():
        return None
    if not ops.on_kernels(weight) and not support.cpu_reference_allowed():
        return None
    key = (weight.data_ptr(), tuple(weight.shape), weight.device)
    st = _states.get(key)
    if st is None:
        st = _states[key] = ops.RouterState(weight)
        support.say(f"FP32 router weights [{weight.shape[0]}, {weight.shape[1]}] scored by hpc_router_gemm "
                    f"({'kernels' if st.prepared is not None else 'reference, no SM90 GPU'})")
    return st


def around_linear_bf16_fp32(original, x, weight, *args, **kwargs):
    st = _state(weight) if not args and not kwargs and x.dtype == torch.bfloat16 and x.dim() == 2 else None
    if st is None:
        return original(x, weight, *args, **kwargs)
    return st(x)


def around_replicated_forward(original, self, x, *args, **kwargs):
    weight = getattr(self, "weight", None)
    # A replicated linear with an FP32 weight fed BF16 activations is a router gate kept in FP32 (the
    # original would need the activations cast to FP32 first); nothing else matches.
    if (weight is None or weight.dtype != torch.float32 or x.dtype != torch.bfloat16
            or getattr(self, "bias", None) is not None or x.dim() != 2 or args or kwargs):
        return original(self, x, *args, **kwargs)
    st = _state(weight)
    if st is None:
        return original(self, x, *args, **kwargs)
    return st(x), None  # ReplicatedLinear returns (output, output_bias)


def around_replicated_init(original, self, input_size, output_size, *args, **kwargs):
    """With HPC_INTEGRATION_ROUTER_FP32=1: FP32 parameters for unquantised gates (`prefix` ending
    in "gate", passed by keyword as SGLang's models do)."""
    import os

    if (os.environ.get(ENV_ROUTER_FP32, "0") == "1" and not args and kwargs.get("params_dtype") is None
            and kwargs.get("quant_config") is None and str(kwargs.get("prefix", "")).endswith(".gate")):
        kwargs["params_dtype"] = torch.float32
    return original(self, input_size, output_size, *args, **kwargs)
