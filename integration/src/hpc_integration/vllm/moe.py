"""vLLM MoE: hpc_moe.fused_moe as a modular-kernel experts class (`HpcExperts`), put in place
of the selected experts by a subclass of the unquantised MoE method registered with
`CustomOp.register_oot(..., name="UnquantizedFusedMoEMethod")`.

The method keeps vLLM's parameters (its loaders, EPLB and weight updates keep working) and
prepares hpc_moe's layout once after loading; the experts read the prepared copy. vLLM's
prepare/finalize, router and top-k stay as they are: the experts get global top-k ids and
reduce over top-k themselves (TopKWeightAndReduceNoOP).
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.fused_moe import modular_kernel as mk
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import TopKWeightAndReduceNoOP
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

from .. import ops, support


class HpcExperts(mk.FusedMoEExpertsModular):
    """hpc_moe.fused_moe: routing index, Gate-Up, SiLU * up, Down and the top-k reduce in one call."""

    def __init__(self, moe_config, quant_config, max_num_tokens=None, num_dispatchers=None):
        super().__init__(moe_config, quant_config, max_num_tokens, num_dispatchers)
        self.layer = None  # the RoutedExperts layer, set by the method after loading
        self.ep_rank = getattr(moe_config.moe_parallel_config, "ep_rank", 0)
        self.ep_size = getattr(moe_config.moe_parallel_config, "ep_size", 1)

    @staticmethod
    def activation_format() -> mk.FusedMoEActivationFormat:
        return mk.FusedMoEActivationFormat.Standard

    @staticmethod
    def _supports_current_device() -> bool:
        return support.device_reason() is None or support.cpu_reference_allowed()

    @staticmethod
    def _supports_no_act_and_mul() -> bool:
        return False

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key) -> bool:
        return (weight_key, activation_key) == (None, None)

    @staticmethod
    def _supports_activation(activation: MoEActivation) -> bool:
        return activation == MoEActivation.SILU

    @staticmethod
    def _supports_parallel_config(moe_parallel_config) -> bool:
        return not getattr(moe_parallel_config, "use_all2all_kernels", False)

    @staticmethod
    def _supports_routing_method(routing_method, weight_key, activation_key) -> bool:
        return True

    @staticmethod
    def _supports_router_logits_dtype(router_logits_dtype, routing_method) -> bool:
        return True

    @property
    def expects_unquantized_inputs(self) -> bool:
        return True

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        self.layer = layer
        layer.hpc_moe_weights = ops.prepare_experts(layer.w13_weight.data, layer.w2_weight.data, "bf16",
                                                    ep_rank=self.ep_rank, ep_size=self.ep_size,
                                                    num_experts=layer.global_num_experts)

    def workspace_shapes(self, M, N, K, topk, global_num_experts, local_num_experts, expert_tokens_meta,
                         activation):
        return (0,), (0,), (M, K)

    def finalize_weight_and_reduce_impl(self) -> mk.TopKWeightAndReduce:
        return TopKWeightAndReduceNoOP()

    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
              expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
              apply_router_weight_on_input) -> None:
        if apply_router_weight_on_input:
            raise NotImplementedError("hpc-integration: apply_router_weight_on_input is not supported")
        ops.fused_moe(hidden_states, self.layer.hpc_moe_weights, topk_ids, topk_weights, out=output)


class HpcUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    """The unquantised MoE method with HpcExperts in place of the selected experts, for the layers
    the fused MoE serves (the others keep vLLM's selection and say why at start-up)."""

    def __init__(self, moe):
        super().__init__(moe)
        reason = support.moe_reason(hidden_size=moe.hidden_dim, intermediate_size=moe.intermediate_size_per_partition,
                                    top_k=moe.experts_per_token, activation=str(moe.activation.value).lower(),
                                    gated=moe.is_act_and_mul, quant="bf16", has_bias=moe.has_bias)
        if reason is None and getattr(moe.moe_parallel_config, "use_all2all_kernels", False):
            reason = "all-to-all expert parallelism: the fused MoE takes the standard (non-dispatched) layout"
        if reason is not None:
            support.say(f"vLLM MoE layer stays on {self.experts_cls.__name__}: {reason}")
            return
        self.experts_cls = HpcExperts
