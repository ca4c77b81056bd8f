"""SGLang 0.5.23 (CPU venv of tools/test_integration.sh): the plugin through its entry point,
the CLI names, SGLang's attention test kit against backend "hpc", the fused prologue inside SGLang's
own Qwen3-MoE / Qwen3 attention layers, the MoE runner core and its hook, the router hook, and the
start-up messages."""

from __future__ import annotations

import json

import pytest
from _frameworks import SCRIPTS, run_in, run_snippet

pytestmark = pytest.mark.integration
REF = {"HPC_INTEGRATION_CPU_REFERENCE": "1"}


def test_plugin_loads_through_entry_point_and_is_idempotent():
    code = """
import json
from sglang.srt.plugins import load_plugins
load_plugins()
import hpc_integration.sglang as plugin
loaded = dict(plugin._REGISTERED)
again = plugin.register(); load_plugins(); again2 = plugin.register()
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, MOE_RUNNER_BACKEND_CHOICES
from sglang.srt.layers.moe.moe_runner import runner
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod
print("RESULT " + json.dumps(dict(
    loaded=sorted(loaded), again=sorted(again), again2=sorted(again2),
    backend="hpc" in ATTENTION_BACKENDS, choices=ATTENTION_BACKEND_CHOICES.count("hpc"),
    moe_choices=MOE_RUNNER_BACKEND_CHOICES.count("hpc"), core="hpc" in runner._CUSTOM_RUNNER_CORE_FACTORIES,
    hooks={t: len(HookRegistry._hooks.get(t, [])) for t in
           plugin.MOE_METHODS + plugin._REGISTERED["router"] + plugin._REGISTERED["prologue"]},
    prologue=list(plugin._REGISTERED["prologue"]),
    patched=UnquantizedFusedMoEMethod.create_moe_runner.__qualname__)))
"""
    r, _ = run_snippet("sglang", code, env={"HPC_SGLANG_PROLOGUE": "1"})
    assert r["loaded"] == ["attention", "moe", "prologue", "router"], "the entry point did not run the plugin"
    assert len(r["prologue"]) == 2  # Qwen3-MoE's apply_qk_norm_rope and Qwen3's attention forward
    assert r["again"] == r["again2"] == r["loaded"]
    assert r["backend"] and r["choices"] == 1 and r["moe_choices"] == 1 and r["core"]
    assert all(n == 1 for n in r["hooks"].values()), r["hooks"]  # registered once, however often called
    assert "create_moe_runner" in r["patched"]


def test_backend_names_parse_on_the_cli():
    code = """
import argparse, json
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
a = p.parse_args(["--model-path", "m", "--attention-backend", "hpc", "--moe-runner-backend", "hpc"])
try:
    p.parse_args(["--model-path", "m", "--attention-backend", "hpc_typo"]); bad = "accepted"
except SystemExit:
    bad = "rejected"
print("RESULT " + json.dumps(dict(attn=a.attention_backend, moe=a.moe_runner_backend, bad=bad)))
"""
    r, _ = run_snippet("sglang", code)
    assert r == {"attn": "hpc", "moe": "hpc", "bad": "rejected"}


def _kit(tmp_path, head_dim: int, env=None):
    out = tmp_path / f"kit_{head_dim}.json"
    p = run_in("sglang", [str(SCRIPTS / "sglang_attention_kit.py"), str(out), "cpu", str(head_dim)], env=env)
    return json.loads(out.read_text()), p


def test_attention_kit_runs_our_decode(tmp_path):
    res, p = _kit(tmp_path, 128, REF)
    recs = res["records"]
    bad = [r for r in recs if r["status"] != "pass"]
    assert not bad, json.dumps(bad, indent=1)
    decode = [r for r in recs if r["decode"]]
    assert {r["page_size"] for r in decode} >= {1, 16}
    assert {tuple(r["heads"]) for r in decode} >= {(4, 4), (4, 2), (4, 1)}  # MHA, GQA, MQA
    assert {r["page_size"] for r in recs if not r["decode"]} >= {1, 16}
    assert res["calls"].get("attention.reference") == len(decode)  # every decode case ran hpc_attention
    assert "decode on hpc_attention's reference" in p.stderr


def test_attention_kit_unsupported_head_dim_says_so_and_falls_back(tmp_path):
    res, p = _kit(tmp_path, 16, REF)
    assert all(r["status"] == "pass" for r in res["records"])
    assert not res["calls"].get("attention.reference")
    assert "decode runs on SGLang's torch_native backend: head dim 16" in p.stderr
    assert "head_dim=128" in p.stderr


def test_attention_without_gpu_says_so():
    code = """
import json
from types import SimpleNamespace
import hpc_integration.sglang.attention as a
r = a._runner_reason(SimpleNamespace(device="cpu", use_mla_backend=False))
print("RESULT " + json.dumps(r))
"""
    r, _ = run_snippet("sglang", code)
    assert "SM90" in r and "HPC_INTEGRATION_CPU_REFERENCE" in r


MOE_CODE = """
import json, torch
from types import SimpleNamespace
import hpc_integration.sglang as plugin
plugin.register()
from hpc_integration import ops
from hpc_integration.sglang import moe
from sglang.srt.layers.moe.moe_runner.triton import TritonMoeQuantInfo
from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput, StandardCombineInput
from sglang.srt.layers.moe.topk import StandardTopKOutput
from hpc_moe.reference import fused_moe_reference
g = torch.Generator().manual_seed(0)
T, H, I, E, k = 6, 256, 128, 8, 2
x = torch.randn(T, H, generator=g).to(torch.bfloat16)
w13 = (torch.randn(E, 2 * I, H, generator=g) * 0.05).to(torch.bfloat16)
w2 = (torch.randn(E, H, I, generator=g) * 0.05).to(torch.bfloat16)
ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
ids[0, 1] = -1  # an expert of another EP rank
wts = torch.softmax(torch.randn(T, k, generator=g), -1)
cfg = SimpleNamespace(hidden_size=H, intermediate_size_per_partition=I, top_k=k, activation="silu", is_gated=True)
core = moe.make_core(cfg)
from sglang.srt.layers.moe.moe_runner.base import DispatchMoeRunnerCore
d = StandardDispatchOutput(hidden_states=x, hidden_states_scale=None,
                           topk_output=StandardTopKOutput(topk_weights=wts, topk_ids=ids, router_logits=None))
q = TritonMoeQuantInfo(w13_weight=w13, w2_weight=w2)
out = core.run_from_dispatch(d, q, cfg)
core.run_from_dispatch(d, q, cfg)
prepared = len(core._prepared)
ref = fused_moe_reference(x, w13, w2, ids, wts)
cos = torch.nn.functional.cosine_similarity(out.hidden_states.double().flatten(), ref.flatten(), dim=0).item()
# the create_moe_runner hook, on a method whose runner SGLang built for triton
from sglang.srt.layers.moe.utils import get_moe_runner_backend, resolve_moe_runner_backend
from sglang.srt.runtime_context import get_flags
get_flags().moe.runner_backend = resolve_moe_runner_backend("hpc")
runner = SimpleNamespace(runner_backend=SimpleNamespace(value="triton"), runner_core=None, fused_func=object())
method = SimpleNamespace(runner=runner)
layer = SimpleNamespace(w13_weight=w13, w2_weight=w2, quant_method=method)
moe.after_create_moe_runner(None, method, layer, cfg)
hooked = runner.run(d, q).hidden_states
calls = ops.CALLS.get("moe.reference")
bad_cfg = SimpleNamespace(**{**vars(cfg), "intermediate_size_per_partition": 96})
runner2 = SimpleNamespace(runner_backend=SimpleNamespace(value="triton"), runner_core=None, fused_func=None)
moe.after_create_moe_runner(None, SimpleNamespace(runner=runner2), layer, bad_cfg)
# FP8 checkpoints as SGLang's Fp8MoEMethod hands them over (128x128 block scales, or per-expert scales)
from hpc_moe.reference import fused_moe_reference_quant
fp8 = torch.float8_e4m3fn
w13q, w2q = (w13.float() * 8).to(fp8), (w2.float() * 8).to(fp8)
fp8_cos = {}
for quant, q8 in (("fp8_block", TritonMoeQuantInfo(w13_weight=w13q, w2_weight=w2q, use_fp8_w8a8=True,
                                                    block_shape=[128, 128], w13_scale=torch.full((E, 2 * I // 128, H // 128), 0.125),
                                                    w2_scale=torch.full((E, H // 128, I // 128), 0.125))),
                  ("fp8_tensor", TritonMoeQuantInfo(w13_weight=w13q, w2_weight=w2q, use_fp8_w8a8=True,
                                                     w13_scale=torch.full((E,), 0.125), w2_scale=torch.full((E,), 0.125)))):
    got = core.run_from_dispatch(d, q8, cfg).hidden_states
    ref8 = fused_moe_reference_quant(x, w13q, w2q, ids, wts, quant=quant, w13_scale=q8.w13_scale, w2_scale=q8.w2_scale)
    fp8_cos[quant] = torch.nn.functional.cosine_similarity(got.double().flatten(), ref8.flatten(), dim=0).item()
print("RESULT " + json.dumps(dict(
    fp8_cos=fp8_cos, combine=isinstance(out, StandardCombineInput), is_core=isinstance(core, DispatchMoeRunnerCore),
    backend=core.runner_backend.value, cos=cos, prepared=prepared, calls=calls,
    hooked_same=bool(torch.equal(hooked, out.hidden_states)), hooked_core=type(runner.runner_core).__name__,
    fused_func=runner.fused_func is None, kept=runner2.runner_core is None)))
"""


def test_moe_runner_core_and_hook():
    r, p = run_snippet("sglang", MOE_CODE)
    assert r["combine"] and r["is_core"] and r["backend"] == "hpc"
    assert r["cos"] > 0.9999, r
    assert all(c > 0.9999 for c in r["fp8_cos"].values()) and len(r["fp8_cos"]) == 2, r["fp8_cos"]
    assert r["prepared"] == 1  # the weights are prepared once per layer, not per call (BF16 ones here)
    assert r["calls"] == 3
    assert r["hooked_same"] and r["hooked_core"] == "HpcMoeRunnerCore" and r["fused_func"]
    assert r["kept"]  # an unsupported layer keeps SGLang's runner ...
    assert "MoE layer stays on triton" in p.stderr and "tensor-parallel size" in p.stderr  # ... and says why


ROUTER_CODE = """
import json, torch
import hpc_integration.sglang as plugin
plugin.register()
from hpc_integration import ops
import sglang.kernels.ops.gemm.bf16_fp32 as m
from sglang.srt.layers.linear import ReplicatedLinear
g = torch.Generator().manual_seed(0)
w = torch.randn(64, 128, generator=g) * 0.02
x = torch.randn(5, 128, generator=g).to(torch.bfloat16)
ours = m.linear_bf16_fp32(x, w)
err = (ours.double() - x.double() @ w.double().T).abs().max().item()
gate = ReplicatedLinear(128, 64, bias=False, params_dtype=torch.float32, prefix="model.layers.0.mlp.gate")
gate.weight.data.copy_(w)
scores, bias = gate(x)
other = ReplicatedLinear(128, 64, bias=False, params_dtype=torch.bfloat16, prefix="model.layers.0.mlp.up")
other.weight.data.copy_(w)
other(x)
print("RESULT " + json.dumps(dict(err=err, gate_err=(scores.double() - x.double() @ w.double().T).abs().max().item(),
    dtype=str(scores.dtype), bias=bias is None, calls=ops.CALLS.get("router.reference"))))
"""


def test_router_hooks_serve_fp32_gates():
    r, _ = run_snippet("sglang", ROUTER_CODE, env=REF)
    assert r["err"] < 1e-5 and r["gate_err"] < 1e-5 and r["dtype"] == "torch.float32" and r["bias"]
    assert r["calls"] == 2  # linear_bf16_fp32 and the FP32 gate; the BF16 linear kept its own path


def test_plugin_without_prologue_registers_no_layer_hooks():
    code = """
import json
from sglang.srt.plugins import load_plugins
load_plugins()
import hpc_integration.sglang as plugin
from hpc_integration.sglang import prologue
from sglang.srt.plugins.hook_registry import HookRegistry
print("RESULT " + json.dumps(dict(loaded=sorted(plugin._REGISTERED),
                                  hooks=sum(len(HookRegistry._hooks.get(t, [])) for t, _ in prologue.hooks()))))
"""
    r, _ = run_snippet("sglang", code, env={"HPC_SGLANG_PROLOGUE": "0"})
    assert r == {"loaded": ["attention", "moe", "router"], "hooks": 0}


def test_fused_prologue_in_sglang_attention_layers(tmp_path):
    """SGLang's own Qwen3-MoE / Qwen3 attention layers, one decode step with and without the fused
    prologue, against float64 (scripts/sglang_prologue_layer.py: `verdict` lists each case's checks)."""
    out = tmp_path / "prologue.json"
    run_in("sglang", [str(SCRIPTS / "sglang_prologue_layer.py"), str(out), "cpu"], env=REF)
    res = json.loads(out.read_text())
    cases = {c["case"]: c for c in res["cases"]}
    assert {n for n, c in cases.items() if c["expect"] == "fused"} == \
        {"moe_bf16", "moe_fp8", "dense_bf16", "dense_fp8", "moe_yarn_bf16"}
    bad = {n: c["failures"] for n, c in cases.items() if c["failures"]}
    assert not bad, json.dumps(bad, indent=1)
    assert all(c["calls_ours"].get("prologue.reference") == 1 for c in cases.values() if c["expect"] == "fused")
    assert cases["moe_bf16"]["q_err_ours"] < cases["moe_bf16"]["q_err_framework"]  # one rounding, not three
    assert cases["moe_extend"]["prologue_layers"] == 1  # a fused layer, but extend keeps SGLang's path
    msgs = "\n".join(res["messages"])
    for words in ("fused prologue on: 1 of 1 Qwen3MoeAttention layers", "fused prologue on: 1 of 1 Qwen3Attention",
                  "fused prologue off (SGLang's QK-Norm, RoPE and KV write run): HPC_SGLANG_PROLOGUE=0",
                  "rope MRotaryEmbedding has its own forward", "q / k norm eps 1e-06 / 1e-05",
                  "Linear has no Qwen3 / Qwen3-MoE attention layers",
                  "fused prologue ran: decode QK-Norm, RoPE and KV write by hpc_attention.qk_norm_rope_store"):
        assert words in msgs, (words, msgs)
