"""vLLM router: a GateLinear subclass registered with `PluggableLayer.register_oot(...,
name="GateLinear")` that serves gates with FP32 weights (BF16 activations, FP32 scores) by
hpc_router_gemm, the split made once after loading. Other gates run GateLinear's own tiers.

HPC_INTEGRATION_ROUTER_FP32=1 makes every unquantised gate hold its weight in FP32 (a BF16
checkpoint loads exactly; an FP32 one keeps its precision), so the router scores are FP32 end
to end, as LongCat-Flash and Hy3 compute them.
"""

from __future__ import annotations

import os

import torch
from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

from .. import ops, support

ENV_ROUTER_FP32 = "HPC_INTEGRATION_ROUTER_FP32"


class HpcGateLinear(GateLinear):
    def __init__(self, input_size: int, output_size: int, bias: bool = False, out_dtype=None, params_dtype=None,
                 force_fp32_compute: bool = False, skip_bias_add: bool = False, quant_config=None, prefix: str = "",
                 **kwargs):
        if os.environ.get(ENV_ROUTER_FP32, "0") == "1" and quant_config is None and params_dtype is None:
            params_dtype = torch.float32
            out_dtype = out_dtype or torch.float32
        super().__init__(input_size, output_size, bias=bias, out_dtype=out_dtype, params_dtype=params_dtype,
                         force_fp32_compute=force_fp32_compute, skip_bias_add=skip_bias_add,
                         quant_config=quant_config, prefix=prefix, **kwargs)
        self.hpc_router = None
        # Prepare from the loaded weight before the framework's own step runs: on the CPU platform
        # that step repacks the weight and drops `weight`.
        method = self.quant_method
        framework_step = method.process_weights_after_loading

        def process_weights_after_loading(layer: torch.nn.Module) -> None:
            if layer is self:
                self.prepare_router()
            framework_step(layer)

        method.process_weights_after_loading = process_weights_after_loading

    def prepare_router(self) -> None:
        """Prepare the split once, after the weights are loaded."""
        reason = support.router_reason(num_experts=self.weight.shape[0], hidden_size=self.weight.shape[1],
                                       weight_dtype=self.weight.dtype, has_bias=self.bias is not None)
        if reason is None and not self.is_unquantized:
            reason = "quantised gate"
        if reason is not None:
            support.say(f"vLLM gate {self.prefix or '?'} stays on GateLinear: {reason}")
            self.hpc_router = False
            return
        self.hpc_router = ops.RouterState(self.weight.data)

    def forward(self, x: torch.Tensor):
        if self.hpc_router is None:
            self.prepare_router()
        if self.hpc_router is False or x.dtype != torch.bfloat16:
            return super().forward(x)
        scores = self.hpc_router(x)
        if self.out_dtype is not None and self.out_dtype != torch.float32:
            scores = scores.to(self.out_dtype)
        return scores if not self.return_bias else (scores, None)
