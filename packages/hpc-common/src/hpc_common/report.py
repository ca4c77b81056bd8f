"""The main job: a short report of what this machine can run (`python -m hpc_common.report`).

1. What is here: Python, torch, GPU, nvcc.
2. Builds every hpc-ops kernel for sm_90a (the JIT cache makes a second run instant).
3. On an SM90 GPU: runs the FP8 quantisation benchmark. Elsewhere: runs the pure-torch
   reference implementations on small shapes and says so plainly.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import torch

from . import __version__
from .jit import JitError, registered
from .jit.prebuild import discover
from .jit.toolchain import find_nvcc, nvcc_version

# Each package lists its pure-torch reference module (one with a `cpu_demo()`) under this group.
REFERENCE_GROUP = "hpc_ops.reference"


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def machine() -> None:
    _section("machine")
    print(f"hpc-common {__version__}, Python {platform.python_version()}, torch {torch.__version__}")
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        print(f"GPU: {torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]})")
    else:
        print("GPU: none visible to torch")
    try:
        print(f"nvcc: {find_nvcc()} ({nvcc_version()})")
    except JitError as e:
        print(f"nvcc: not available: {e}")


def build_all() -> bool:
    _section("building the CUDA kernels for sm_90a")
    discover()
    ok = True
    for name, spec in sorted(registered().items()):
        t0 = time.time()
        try:
            path = spec.build()
            print(f"  {name}: ok ({time.time() - t0:.1f}s) -> {path}")
        except JitError as e:
            ok = False
            print(f"  {name}: FAILED\n{e}")
    return ok


def references() -> None:
    _section("reference implementations (pure torch, CPU, small shapes)")
    for modname in dict.fromkeys(ep.value for ep in entry_points(group=REFERENCE_GROUP)):
        try:
            mod = importlib.import_module(modname)
        except Exception as e:  # one broken package must not hide the others' demos
            print(f"-- {modname}: cannot be imported ({type(e).__name__}: {e})")
            continue
        demo = getattr(mod, "cpu_demo", None)
        if demo is None:
            continue
        print(f"-- {modname}")
        print(demo())


def gpu_benchmarks(repo: Path) -> int:
    _section("FP8 quantisation benchmark on this GPU")
    bench = repo / "benchmarks" / "bench_fp8_quant.py"
    if not bench.is_file():
        print(f"{bench} not found (run from a checkout of the repository)")
        return 1
    return subprocess.call([sys.executable, str(bench), "--quick", "--out-dir", str(repo / "benchmarks" / "results")])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-build", action="store_true", help="skip compiling the kernels")
    ap.add_argument("--repo", type=Path, default=Path.cwd(), help="repository root (for benchmarks/)")
    args = ap.parse_args(argv)
    machine()
    built = True if args.no_build else build_all()
    if _hopper():
        rc = gpu_benchmarks(args.repo)
    else:
        references()
        _section("summary")
        print("No SM90 (Hopper) GPU here: the hpc-ops CUDA kernels were compiled"
              f"{'' if built else ' (with failures, see above)'} but cannot run on this machine;"
              " they need an H100, H200 or H20. The numbers above come from the pure-torch references.")
        rc = 0
    return rc if built else 1


if __name__ == "__main__":
    sys.exit(main())
