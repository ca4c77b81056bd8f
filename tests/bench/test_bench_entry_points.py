"""The benchmarks ship in the packages: tools/dev_entry_points.py registers their hpc_ops.bench suites and the
hpc-bench launcher for a checkout without pip install, and benchmarks/bench_<op>.py are wrappers of them."""

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_dev_entry_points_register_suites_and_the_launcher(tmp_path):
    out = tmp_path / "eps"
    subprocess.run([sys.executable, str(REPO / "tools" / "dev_entry_points.py"), str(out)], check=True,
                   capture_output=True)
    common = (out / "hpc_common-0.0.dev0.dist-info" / "entry_points.txt").read_text()
    assert "[hpc_ops.bench]\nfp8_quant = hpc_common.fp8.bench_suite:SUITE\n" in common
    assert "[console_scripts]\nhpc-bench = hpc_common.bench.cli:main\n" in common
    attention = (out / "hpc_attention-0.0.dev0.dist-info" / "entry_points.txt").read_text()
    assert "decode = hpc_attention.bench.suites:DECODE" in attention
    launcher = out / "bin" / "hpc-bench"
    assert os.access(launcher, os.X_OK)
    # Only the source folders and the registered entry points: what the device machine has.
    src = [str(p) for p in sorted(REPO.glob("packages/*/src"))] + [str(REPO / "integration" / "src")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(out), *src]))
    listed = subprocess.run([sys.executable, str(launcher), "--list"], check=True, capture_output=True, text=True,
                            env=env, cwd=tmp_path).stdout
    for op in ("decode", "prologue", "router_gemm", "fp8_quant", "moe"):
        assert f"{op}: " in listed


@pytest.mark.parametrize("name, module", [("decode", "hpc_attention.bench.decode"),
                                          ("prologue", "hpc_attention.bench.prologue"),
                                          ("router_gemm", "hpc_router_gemm.bench"),
                                          ("fp8_quant", "hpc_common.fp8.bench"), ("moe", "hpc_moe.bench")])
def test_benchmark_scripts_are_wrappers_of_the_packages(name, module):
    spec = importlib.util.spec_from_file_location(f"wrapper_{name}", REPO / "benchmarks" / f"bench_{name}.py")
    wrapper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrapper)
    real = importlib.import_module(module)
    assert wrapper.main is real.main
    assert len(Path(spec.origin).read_text().splitlines()) < 20
    help_text = subprocess.run([sys.executable, spec.origin, "--help"], capture_output=True, text=True, check=True).stdout
    assert "--out-dir" in help_text and "--method" in help_text
