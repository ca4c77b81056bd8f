"""The main job's report and the prebuild command, on a machine without an SM90 GPU (CPU)."""

import os
import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of machines without a GPU")
def test_report_runs_references_and_says_kernels_need_sm90(capsys):
    from hpc_common.report import main

    assert main(["--no-build"]) == 0
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
