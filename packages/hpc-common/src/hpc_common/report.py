"""The machine and kernel-build sections of the main job (`hpc-bench`, hpc_common.bench.cli), and the
console demo of the references on machines without an SM90 GPU.

`python -m hpc_common.report` (and `python -m hpc_common`) run hpc-bench with the same arguments.
"""

from __future__ import annotations

import importlib
import platform
import re
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


def machine() -> list[str]:
    """Print and return what is here: hpc-common, Python, torch, the GPU, nvcc."""
    _section("machine")
    lines = [f"hpc-common {__version__}, Python {platform.python_version()}, torch {torch.__version__}"
             + (f" (CUDA {torch.version.cuda})" if torch.version.cuda else " (CPU build)")]
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        lines.append(f"GPU: {torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]})")
    else:
        lines.append("GPU: none visible to torch")
    try:
        lines.append(f"nvcc: {find_nvcc()} ({nvcc_version().strip().splitlines()[-1]})")
    except (JitError, IndexError) as e:
        lines.append(f"nvcc: not available: {e}")
    print("\n".join(lines), flush=True)
    return lines


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
    """Build every registered extension, with a progress bar; returns the names of those that failed,
    whose full error goes to failure_log()."""
    from .bench.progress import Progress

    _section("building the CUDA kernels for sm_90a")
    discover()
    specs = sorted(registered().items())
    failed = []
    log = failure_log()
    with Progress("kernel build", len(specs)) as bar:
        for name, spec in specs:
            bar.step(name)
            t0 = time.time()
            try:
                path = spec.build()
                print(f"  {name}: ok ({time.time() - t0:.1f}s) -> {path}", flush=True)
            except JitError as e:
                failed.append(name)
                print(f"  {name}: FAILED (full error in {log})\n{str(e)[-3000:]}", flush=True)
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a") as fh:
                    fh.write(f"== {name} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n{e}\n")
            bar.advance(1)
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
    """Print each package's reference demo (`cpu_demo()` of its `hpc_ops.reference` module)."""
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


def main(argv=None) -> int:
    from .bench.cli import main as bench_main

    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
