"""Locating nvcc, the CUDA headers and the host-side build inputs (Python, pybind11)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from .. import env


class JitError(RuntimeError):
    """A JIT build could not be done (missing tool, compile error, JIT forbidden)."""


@functools.lru_cache(maxsize=None)
def find_nvcc() -> str:
    candidates = []
    if env.nvcc_path():
        explicit = env.nvcc_path()
        if not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
            raise JitError(f"HPC_NVCC={explicit} is not an executable nvcc")
        return str(Path(explicit).resolve())
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    # The toolkit folder before PATH: a wrapper script on PATH would hide where the headers are.
    candidates.append("/usr/local/cuda/bin/nvcc")
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(on_path)
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(Path(c).resolve())
    raise JitError(
        "nvcc not found: the hpc-ops CUDA kernels are compiled on first use. Install the CUDA "
        "toolkit (12.4 or newer) and set CUDA_HOME or HPC_NVCC, or prebuild the kernels on a "
        "machine that has it (python -m hpc_common.jit.prebuild) and copy HPC_JIT_CACHE_DIR."
    )


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    out = subprocess.run([find_nvcc(), "--version"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise JitError(f"`{find_nvcc()} --version` failed: {out.stderr.strip()}")
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else out.stdout.strip()


@functools.lru_cache(maxsize=None)
def cuda_include_dir() -> Path:
    inc = Path(find_nvcc()).parent.parent / "include"
    if not (inc / "cuda_runtime.h").is_file():
        # Split toolkits (pip's nvidia-cuda-* wheels) keep the headers elsewhere.
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var) and (Path(os.environ[var]) / "include" / "cuda_runtime.h").is_file():
                return Path(os.environ[var]) / "include"
        raise JitError(
            f"CUDA headers not found: expected cuda_runtime.h under {inc}. "
            "Point CUDA_HOME at a full CUDA toolkit."
        )
    return inc


def python_include_dir() -> Path:
    return Path(sysconfig.get_paths()["include"])


def pybind11_include_dir() -> Path:
    try:
        import pybind11
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise JitError("pybind11 is required to build hpc-ops kernels: pip install pybind11") from e
    return Path(pybind11.get_include())


def pybind11_version() -> str:
    import pybind11

    return pybind11.__version__


def find_ninja() -> str:
    exe = shutil.which("ninja")
    if exe is None:
        cand = Path(sys.executable).parent / "ninja"
        if cand.is_file():
            return str(cand)
        try:
            import ninja  # the PyPI wheel ships the binary

            return str(Path(ninja.BIN_DIR) / "ninja")
        except ImportError:
            pass
        raise JitError("ninja not found: pip install ninja")
    return exe


def host_compiler() -> str:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"


def ext_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"
