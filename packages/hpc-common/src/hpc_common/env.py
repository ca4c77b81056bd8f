"""Every HPC_* environment variable the library reads, in one place.

The top-level README has the same table; keep the two in step.
"""

from __future__ import annotations

import os
from pathlib import Path


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() not in ("0", "false", "off", "no")


def jit_cache_dir() -> Path:
    """HPC_JIT_CACHE_DIR: where built extensions live (default ~/.cache/hpc_ops/jit)."""
    raw = os.environ.get("HPC_JIT_CACHE_DIR")
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpc_ops" / "jit"


def jit_disabled() -> bool:
    """HPC_JIT_DISABLE=1: never compile at run time; a missing build is an error."""
    return _flag("HPC_JIT_DISABLE", False)


def jit_verbose() -> bool:
    """HPC_JIT_VERBOSE=1: echo the nvcc/ninja command lines and output."""
    return _flag("HPC_JIT_VERBOSE", False)


def cuda_archs() -> list[str]:
    """HPC_CUDA_ARCHS: semicolon/comma list of extra targets, e.g. "90a;100a" (default 90a)."""
    raw = os.environ.get("HPC_CUDA_ARCHS", "90a")
    return [a.strip() for a in raw.replace(",", ";").split(";") if a.strip()]


def nvcc_path() -> str | None:
    """HPC_NVCC, else $CUDA_HOME/bin/nvcc, else nvcc on PATH."""
    return os.environ.get("HPC_NVCC")


def jit_workers() -> int | None:
    """HPC_JIT_WORKERS: parallel nvcc jobs (default: ninja's choice)."""
    raw = os.environ.get("HPC_JIT_WORKERS")
    return int(raw) if raw else None


def pdl_default() -> bool:
    """HPC_PDL=0 turns Programmatic Dependent Launch off process-wide (default on)."""
    return _flag("HPC_PDL", True)


def num_sms_override() -> int | None:
    """HPC_NUM_SMS: pretend the GPU has this many SMs (persistent grids, tests)."""
    raw = os.environ.get("HPC_NUM_SMS")
    return int(raw) if raw else None
