"""The main job's report and the prebuild command, on a machine without an SM90 GPU (CPU)."""

import os
import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of machines without a GPU")
def test_report_runs_references_and_says_kernels_need_sm90(capsys, tmp_path):
    from hpc_common.report import main

    assert main(["--no-build", "--out", str(tmp_path)]) == 0
    assert "No SM90 (Hopper) GPU here" in (tmp_path / "report.md").read_text()
    out = capsys.readouterr().out
    assert "No SM90 (Hopper) GPU here" in out
    assert "per-token-group-128" in out  # the FP8 reference demo ran
    assert "fused MoE reference" in out


def test_prebuild_lists_every_extension():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-m", "hpc_common.jit.prebuild", "--list"], capture_output=True,
                         text=True, check=True, env=env).stdout
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert {"_hpc_common_C", "_hpc_router_gemm_C", "_hpc_attention_C"} <= names


def test_failed_build_summary_names_the_log_and_the_next_step(monkeypatch, tmp_path):
    from hpc_common import report

    monkeypatch.setenv("HPC_JIT_CACHE_DIR", str(tmp_path))
    assert "every extension compiled" in report.build_summary([])
    monkeypatch.setattr(report, "_nvcc_release", lambda: (12, 1))
    text = report.build_summary(["_hpc_demo_C"])
    assert "FAILED for _hpc_demo_C" in text and str(tmp_path / "build_failures.log") in text
    assert "12.1 is too old" in text and "12.4" in text
    monkeypatch.setattr(report, "_nvcc_release", lambda: (13, 0))
    assert "python -m hpc_common.jit.prebuild" in report.build_summary(["_hpc_demo_C"])
    monkeypatch.setattr(report, "_nvcc_release", lambda: None)
    assert "install the CUDA toolkit 12.4" in report.build_summary(["_hpc_demo_C"])


def test_report_says_a_kernel_build_failed(monkeypatch, tmp_path, capsys):
    from hpc_common import report
    from hpc_common.jit import JitError

    class Broken:
        def build(self):
            raise JitError("_hpc_demo_C: build failed (ninja exit 1)\nerror: demo")

    monkeypatch.setenv("HPC_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(report, "discover", lambda: [])
    monkeypatch.setattr(report, "registered", lambda: {"_hpc_demo_C": Broken()})
    monkeypatch.setattr(report, "references", lambda: None)
    monkeypatch.setattr(report, "_hopper", lambda: False)
    assert report.main(["--out", str(tmp_path / "report")]) == 1
    out = capsys.readouterr().out
    assert "_hpc_demo_C: FAILED" in out and "Kernel build FAILED for _hpc_demo_C" in out and "Next step" in out
    assert "error: demo" in (tmp_path / "build_failures.log").read_text()
    assert "Kernel build FAILED for _hpc_demo_C" in (tmp_path / "report" / "report.md").read_text()
