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
import re
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import torch

from . import __version__, env
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


MIN_NVCC = (12, 4)  # the oldest CUDA toolkit the kernels are built and tested with (sm_90a, wgmma, TMA)


def _nvcc_release() -> tuple[int, int] | None:
    """(major, minor) of the nvcc found, None when there is none."""
    try:
        text = nvcc_version()
    except JitError:
        return None
    m = re.search(r"cuda_(\d+)\.(\d+)", text) or re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def build_all() -> list[str]:
    """Build every registered extension; returns the names of those that failed, whose full error
    goes to FAILURE_LOG."""
    _section("building the CUDA kernels for sm_90a")
    discover()
    failed = []
    log = failure_log()
    for name, spec in sorted(registered().items()):
        t0 = time.time()
        try:
            path = spec.build()
            print(f"  {name}: ok ({time.time() - t0:.1f}s) -> {path}")
        except JitError as e:
            failed.append(name)
            print(f"  {name}: FAILED (full error in {log})\n{str(e)[-3000:]}")
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as fh:
                fh.write(f"== {name} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n{e}\n")
    return failed


def failure_log() -> Path:
    return env.jit_cache_dir() / "build_failures.log"


def build_summary(failed: list[str]) -> str:
    """What the summary says about the kernel build, with the next step when it failed."""
    if not failed:
        return "Kernel build: every extension compiled for sm_90a."
    lines = [f"Kernel build FAILED for {', '.join(failed)} (the error is above; all of it in {failure_log()})."]
    release = _nvcc_release()
    need = ".".join(map(str, MIN_NVCC))
    if release is None:
        lines.append(f"Next step: install the CUDA toolkit {need} or newer and set CUDA_HOME (or HPC_NVCC) to it.")
    elif release < MIN_NVCC:
        lines.append(f"Next step: nvcc {release[0]}.{release[1]} is too old; the kernels need CUDA {need} or newer "
                     "(set CUDA_HOME or HPC_NVCC to a newer toolkit).")
    else:
        lines.append("Next step: read the log, fix the source or the toolchain, and rebuild with "
                     "`python -m hpc_common.jit.prebuild` (HPC_JIT_VERBOSE=1 echoes every nvcc command).")
    lines.append("Then run this report again (tools/main.sh); a failed kernel is not usable on any GPU.")
    return "\n".join(lines)


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
    failed = [] if args.no_build else build_all()
    if _hopper() and not failed:
        rc = gpu_benchmarks(args.repo)
        _section("summary")
        print(build_summary(failed))
    else:
        if not _hopper():
            references()
        _section("summary")
        if not args.no_build:
            print(build_summary(failed))
        if _hopper():
            print("The benchmarks were skipped: they need every kernel built.")
        else:
            print("No SM90 (Hopper) GPU here: the hpc-ops CUDA kernels cannot run on this machine; they need an "
                  "H100, H200 or H20. The numbers above come from the pure-torch references.")
        rc = 0
    return 1 if failed else rc


if __name__ == "__main__":
    sys.exit(main())
