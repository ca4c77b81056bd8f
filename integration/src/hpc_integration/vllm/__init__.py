"""vLLM plugin (entry point `vllm.general_plugins: hpc = hpc_integration.vllm:register`).

vLLM runs general plugins in every process, so `register` is idempotent. What it registers,
each switched by HPC_INTEGRATION_OPS (default: all three):

- attention: `HpcAttentionBackend` as AttentionBackendEnum.CUSTOM; select it with
  `--attention-backend CUSTOM` (`LLM(..., attention_backend="CUSTOM")`);
- moe: the unquantised MoE method with hpc_moe's experts (CustomOp.register_oot), and the
  quantisation config `hpc_fp8` (register_quantization_config, key "moe_fp8"): FP8 checkpoints'
  MoE layers on hpc_moe, claimed automatically for `quant_method: "fp8"` (fp8_moe.py says why);
- router: the FP32 gate through hpc_router_gemm (PluggableLayer.register_oot on GateLinear).

Without an SM90 GPU nothing is registered (one start-up message says why), unless
HPC_INTEGRATION_CPU_REFERENCE=1, which registers the same classes running the operators'
references, the attention backend also over CPU_ATTN (the CPU platform's only choice).
"""

from __future__ import annotations

from .. import support

_REGISTERED: dict[str, object] = {}
BACKEND_PATH = "hpc_integration.vllm.attention.HpcAttentionBackend"


def register() -> dict[str, object]:
    """Register the enabled operators once per process; returns what is registered."""
    ops = support.enabled_ops()
    reason = support.device_reason()
    cpu = reason is not None and support.cpu_reference_allowed()
    if reason is not None and not cpu:
        support.say(f"vLLM plugin registers nothing: {reason} (set {support.ENV_CPU_REFERENCE}=1 to run the "
                    "operators' references instead, for tests)")
        return dict(_REGISTERED)
    if "attention" in ops and "attention" not in _REGISTERED:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

        register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
        if cpu:
            register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)
        _REGISTERED["attention"] = BACKEND_PATH
    if "moe" in ops and "moe" not in _REGISTERED:
        _REGISTERED["moe"] = _register_oot_op("UnquantizedFusedMoEMethod")
    if "moe" in ops and "moe_fp8" not in _REGISTERED:
        from .fp8_moe import register as register_fp8

        _REGISTERED["moe_fp8"] = register_fp8()
    if "router" in ops and "router" not in _REGISTERED:
        _REGISTERED["router"] = _register_oot_layer("GateLinear")
    if cpu:
        support.say(f"vLLM plugin runs the operators' pure-torch references ({reason}); registered "
                    f"{sorted(_REGISTERED)}")
    return dict(_REGISTERED)


def _register_oot_op(name: str) -> type:
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot

    from .moe import HpcUnquantizedFusedMoEMethod

    if op_registry_oot.get(name) is not HpcUnquantizedFusedMoEMethod:
        CustomOp.register_oot(HpcUnquantizedFusedMoEMethod, name=name)
    return HpcUnquantizedFusedMoEMethod


def _register_oot_layer(name: str) -> type:
    from vllm.model_executor.custom_op import PluggableLayer, op_registry_oot

    from .router import HpcGateLinear

    if op_registry_oot.get(name) is not HpcGateLinear:
        PluggableLayer.register_oot(HpcGateLinear, name=name)
    return HpcGateLinear
