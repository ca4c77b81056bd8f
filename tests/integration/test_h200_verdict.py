"""integration/h200/compare.py (the verdict of the H200 run) on synthetic outputs, so a bug in it
cannot waste a device call."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _compare():
    spec = importlib.util.spec_from_file_location("h200_compare", ROOT / "integration/h200/compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(d: Path, *, ours_ids=(1, 2), fp32_ids=(9, 9), layer_failures=(), prologue_ran=True):
    mod = _compare()
    layer_failures = list(layer_failures)
    recs = [{"backend": be, "case": f"c{i}", "mode": mode, "status": "pass"}
            for be in ("hpc", "triton") for mode in ("eager", "cuda_graph_decode") for i in range(2)]
    (d / "kit.json").write_text(json.dumps({"records": recs, "calls": {"attention.kernel": 4}}))
    (d / "ops.json").write_text(json.dumps({"rows": [{"check": "attention 8/1", "ok": True, "rel_err": 0.001}]}))
    layer_cases = [{"case": "moe_bf16", "expect": "fused", "failures": layer_failures, "calls_ours": {"prologue.kernel": 1}},
                   {"case": "moe_extend", "expect": "framework", "failures": [], "calls_ours": {}}]
    (d / "layer.json").write_text(json.dumps({"device": "cuda", "cases": layer_cases}))

    def run(ids):
        return {"results": [{"ids": list(ids), "logprobs": [-1.0, -2.0], "repeat_same": True}]}

    (d / "engine_default_graph.json").write_text(json.dumps(run((1, 2))))
    (d / "engine_ours_nograph.json").write_text(json.dumps(run(ours_ids)))
    (d / "engine_ours_graph.json").write_text(json.dumps(run(ours_ids)))
    (d / "engine_ours_fp32router_graph.json").write_text(json.dumps(run(fp32_ids)))
    prologue = f"hpc-integration: --attention-backend hpc: {mod.PROLOGUE_ON} run QK-Norm, ...\n" + \
        (f"hpc-integration: {mod.PROLOGUE_RAN}\n" if prologue_ran else "")
    (d / "engine_ours_graph.log").write_text("hpc-integration: --attention-backend hpc: decode on hpc_attention kernels\n"
                                             "hpc-integration: --moe-runner-backend hpc: MoE layers run hpc_moe.fused_moe\n"
                                             + prologue)
    (d / "engine_ours_nograph.log").write_text(prologue)
    (d / "engine_ours_fp32router_graph.log").write_text("FP32 router weights [64, 256] scored by hpc_router_gemm (kernels)\n"
                                                        f"hpc-integration: --attention-backend hpc: {mod.PROLOGUE_OFF}")


def test_verdict_passes_on_matching_runs(tmp_path, capsys):
    _write(tmp_path)
    _compare().main(str(tmp_path))
    out = capsys.readouterr().out
    assert out.strip().endswith("h200 integration: PASS"), out
    assert "INFO engine ours_fp32router_graph same tokens as default: [False]" in out  # informative only


def test_verdict_fails_on_other_tokens_and_missing_files(tmp_path, capsys):
    _write(tmp_path, ours_ids=(1, 3))
    (tmp_path / "ops.json").unlink()
    _compare().main(str(tmp_path))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("h200 integration: FAIL:") and "ops" in last
    assert "engine ours_graph same tokens as default" in last


def test_verdict_fails_when_the_prologue_did_not_run_or_a_layer_case_failed(tmp_path, capsys):
    _write(tmp_path, layer_failures=["q error 8.3 > 2 x SGLang's 0.02 + 0.001"], prologue_ran=False)
    _compare().main(str(tmp_path))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("h200 integration: FAIL:") and "layer moe_bf16 (fused)" in last
    assert "engine ours_graph log says 'fused prologue ran" in last and "layer moe_extend" not in last
