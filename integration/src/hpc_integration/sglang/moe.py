"""SGLang MoE runner "hpc": hpc_moe.fused_moe behind SGLang's dispatch / combine contract.

`HpcMoeRunnerCore.run_from_dispatch` takes the standard dispatch output (hidden states and the
top-k ids / weights as the dispatcher left them: local ids, -1 for experts of other EP ranks)
and the quant method's `TritonMoeQuantInfo` (BF16, FP8 per-tensor or FP8 128x128 block weights),
prepares hpc_moe's weight layout once per layer (cached by the weights' storage), and returns
the reduced output. It is reached two ways: `register_moe_runner_core("hpc", ...)` where the
release has it (0.5.23), and a hook after `create_moe_runner` of the unquantised and FP8 MoE
methods, which pick their runner by hard-coded names and so never ask the registry.
"""

from __future__ import annotations

import torch

from .. import ops, support

NAME = "hpc"


def quant_of(quant_info) -> tuple[str | None, dict]:
    """(hpc_moe quant name or None, the prepare() scale arguments) of a TritonMoeQuantInfo."""
    w13 = quant_info.w13_weight
    if any(getattr(quant_info, f, False) for f in ("use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16",
                                                   "use_mxfp8", "per_channel_quant", "fuse_swiglu_interleaved")):
        return None, {}
    if getattr(quant_info, "b13", None) is not None:
        return None, {}
    if not getattr(quant_info, "use_fp8_w8a8", False):
        return ("bf16" if w13.dtype == torch.bfloat16 else None), {}
    block = getattr(quant_info, "block_shape", None)
    scales = dict(w13_scale=quant_info.w13_scale, w2_scale=quant_info.w2_scale)
    if block:
        return ("fp8_block" if list(block) == [128, 128] else None), scales
    a1 = getattr(quant_info, "a13_scale", None)
    scales["a1_scale"] = a1.max().reshape(1).float() if isinstance(a1, torch.Tensor) else a1
    return "fp8_tensor", scales


class HpcMoeRunnerCore:
    """Duck-types SGLang's DispatchMoeRunnerCore (subclassed where the release has it)."""

    def __init__(self, config):
        self.config = config
        self._prepared: dict[tuple, object] = {}

    @property
    def runner_backend(self):
        from sglang.srt.layers.moe.utils import resolve_moe_runner_backend

        return resolve_moe_runner_backend(NAME)

    def weights_for(self, quant_info):
        w13, w2 = quant_info.w13_weight, quant_info.w2_weight
        quant, scales = quant_of(quant_info)
        # one layer = one set of weight and scale storages in one format
        key = (quant, w13.data_ptr(), w2.data_ptr(), tuple(w13.shape),
               *(t.data_ptr() if isinstance(t, torch.Tensor) else t for t in scales.values()))
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = ops.prepare_experts(w13.data, w2.data, quant, **scales)
            self._prepared[key] = prepared
        return prepared

    def run_from_dispatch(self, dispatch_output, quant_info, runner_config=None, hooks=None):
        from sglang.srt.layers.moe.token_dispatcher.standard import StandardCombineInput

        topk = dispatch_output.topk_output
        out = ops.fused_moe(dispatch_output.hidden_states, self.weights_for(quant_info), topk.topk_ids,
                            topk.topk_weights)
        return StandardCombineInput(hidden_states=out)


def _core_class():
    try:
        from sglang.srt.layers.moe.moe_runner.base import DispatchMoeRunnerCore
    except ImportError:
        return HpcMoeRunnerCore

    class Core(HpcMoeRunnerCore, DispatchMoeRunnerCore):
        runner_backend = HpcMoeRunnerCore.runner_backend

        def __init__(self, config):
            HpcMoeRunnerCore.__init__(self, config)

    Core.__name__ = Core.__qualname__ = "HpcMoeRunnerCore"
    return Core


def make_core(config):
    return _core_class()(config)


def config_reason(config, layer=None) -> str | None:
    """Why the fused MoE cannot serve a layer with this MoeRunnerConfig, or None."""
    for flag in ("apply_router_weight_on_input", "no_combine"):
        if getattr(config, flag, False):
            return f"{flag}: not supported by the fused MoE"
    if getattr(config, "num_fused_shared_experts", 0):
        return "fused shared experts: not supported by the fused MoE"
    for knob in ("gemm1_alpha", "gemm1_clamp_limit", "swiglu_limit"):
        if getattr(config, knob, None) is not None:
            return f"{knob}: the fused MoE runs a plain silu(gate) * up"
    hidden = getattr(config, "hidden_size", None)
    inter = getattr(config, "intermediate_size_per_partition", None)
    if layer is not None:
        hidden = hidden or layer.w13_weight.shape[-1]
        inter = inter or layer.w13_weight.shape[1] // 2
    return support.moe_reason(hidden_size=hidden or 0, intermediate_size=inter or 0,
                              top_k=getattr(config, "top_k", None) or 1,
                              activation=getattr(config, "activation", "silu") or "silu",
                              gated=getattr(config, "is_gated", True))


def selected() -> bool:
    """Whether this process asked for the hpc MoE runner: `--moe-runner-backend hpc`, or, on a
    release that cannot register the name, HPC_INTEGRATION_OPS naming "moe" explicitly."""
    try:
        from sglang.srt.layers.moe.utils import get_moe_runner_backend

        if getattr(get_moe_runner_backend(), "value", None) == NAME:
            return True
    except Exception:
        pass
    try:
        from sglang.srt.layers.moe.moe_runner.runner import register_moe_runner_core  # noqa: F401

        return False
    except ImportError:
        import os

        return "moe" in (os.environ.get(support.ENV_OPS) or "").split(",")


def after_create_moe_runner(result, method, layer, moe_runner_config, *args, **kwargs):
    """AFTER hook on <MoE method>.create_moe_runner: put our core behind the method's runner."""
    if not selected():
        return result
    runner = getattr(method, "runner", None)
    if runner is None:
        return result
    reason = config_reason(moe_runner_config, layer)
    if reason is None:
        quant, _ = quant_of(_quant_probe(layer))
        if quant is None:
            reason = "the layer's quantisation (the fused MoE serves BF16, FP8 per-tensor and FP8 128x128 block)"
    if reason is not None:
        support.say(f"--moe-runner-backend hpc: MoE layer stays on {runner.runner_backend.value}: {reason}")
        return result
    core = make_core(moe_runner_config)
    support.say("--moe-runner-backend hpc: MoE layers run hpc_moe.fused_moe "
                f"({'kernels' if ops.on_kernels(layer.w13_weight) else 'reference, no SM90 GPU'})")

    def run(dispatch_output, quant_info, lora_info=None):
        return core.run_from_dispatch(dispatch_output, quant_info, moe_runner_config)

    runner.runner_core = core
    runner.fused_func = None
    runner.run = run
    return result


def _quant_probe(layer):
    """The parts of the layer's weights quant_of() reads, before the method builds its quant info."""
    from types import SimpleNamespace

    w13 = layer.w13_weight
    fp8 = w13.dtype == torch.float8_e4m3fn
    block = getattr(getattr(layer, "quant_method", None), "block_quant", False)
    return SimpleNamespace(w13_weight=w13, use_fp8_w8a8=fp8, block_shape=[128, 128] if fp8 and block else None,
                           w13_scale=None, w2_scale=None, a13_scale=None)
