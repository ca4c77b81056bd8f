"""Build a pybind11 extension from CUDA/C++ sources with nvcc + ninja, cached on disk.

The extension does not link against libtorch: tensors cross the boundary as raw pointers,
sizes and strides, and the caller passes the current CUDA stream. One build therefore
serves every torch version. The cache key covers sources, every included header, flags,
the nvcc version and the Python ABI (see cache_key.py); several processes may build the
same key at once: one builds under a file lock into a temporary folder that is renamed
into place, the others wait on the lock and load the result.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Sequence

from .. import env
from . import toolchain as tc
from .cache_key import build_key
from .toolchain import JitError

COMMON_INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"

_NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "--use_fast_math",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-fvisibility=hidden",
    "-DNDEBUG",
]
_CXX_FLAGS = ["-O2", "-std=c++17", "-fPIC", "-fvisibility=hidden", "-DNDEBUG"]


def gencode_flags(archs: Sequence[str] | None = None) -> list[str]:
    archs = list(archs) if archs is not None else env.cuda_archs()
    flags = []
    for a in archs:
        flags.append(f"-gencode=arch=compute_{a},code=sm_{a}")
    return flags


def nvcc_compile_flags(include_dirs: Sequence[Path], extra: Sequence[str] = (), archs=None) -> list[str]:
    incs = [f"-I{d}" for d in [COMMON_INCLUDE_DIR, *include_dirs]]
    return [*_NVCC_FLAGS, *gencode_flags(archs), *incs, *extra]


def _ninja_escape(s: str) -> str:
    return s.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _write_ninja(build_dir: Path, module: str, sources: Sequence[Path], include_dirs: Sequence[Path],
                 cuda_flags: Sequence[str], cxx_flags: Sequence[str]) -> Path:
    nvcc = tc.find_nvcc()
    cxx = tc.host_compiler()
    py_inc = [f"-I{tc.python_include_dir()}", f"-I{tc.pybind11_include_dir()}"]
    cu_flags = nvcc_compile_flags(include_dirs, cuda_flags)
    host_flags = [*_CXX_FLAGS, *py_inc, f"-I{tc.cuda_include_dir()}",
                  *(f"-I{d}" for d in [COMMON_INCLUDE_DIR, *include_dirs]),
                  f"-DHPC_EXT_NAME={module}", *cxx_flags]
    lines = [
        "ninja_required_version = 1.3",
        f"nvcc = {nvcc}",
        f"cxx = {cxx}",
        f"cuda_flags = {' '.join(cu_flags)}",
        f"cxx_flags = {' '.join(host_flags)}",
        "rule cuda_compile",
        "  command = $nvcc $cuda_flags -c $in -o $out",
        "  description = nvcc $in",
        "rule cxx_compile",
        "  command = $cxx $cxx_flags -c $in -o $out",
        "  description = c++ $in",
        # nvcc links: it adds the static CUDA runtime, so the module needs no libcudart on
        # the loader path and no libtorch at all.
        "rule link",
        "  command = $nvcc -shared $in -o $out -Xcompiler=-fPIC",
        "  description = link $out",
    ]
    objs = []
    for i, src in enumerate(sources):
        src = Path(src)
        obj = f"{i:02d}_{src.stem}.o"
        rule = "cuda_compile" if src.suffix == ".cu" else "cxx_compile"
        lines.append(f"build {obj}: {rule} {_ninja_escape(str(src))}")
        objs.append(obj)
    out = f"{module}{tc.ext_suffix()}"
    lines.append(f"build {out}: link {' '.join(objs)}")
    lines.append(f"default {out}")
    (build_dir / "build.ninja").write_text("\n".join(lines) + "\n")
    return build_dir / out


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _import_from(path: Path, module: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise JitError(f"cannot load built extension {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_dir_for(name: str, sources: Sequence[Path], include_dirs: Sequence[Path],
                  cuda_flags: Sequence[str] = (), cxx_flags: Sequence[str] = ()) -> tuple[Path, str]:
    """Return (final cache folder, cache key) for a build, without building."""
    flags = [*nvcc_compile_flags(include_dirs, cuda_flags), *_CXX_FLAGS, *cxx_flags]
    toolchain = [tc.nvcc_version(), tc.ext_suffix(), sys.version, tc.pybind11_version()]
    key = build_key(name, sources, [COMMON_INCLUDE_DIR, *include_dirs], flags, toolchain)
    return env.jit_cache_dir() / f"{name}-{key}", key


def build_extension(name: str, sources: Sequence[Path], include_dirs: Sequence[Path] = (),
                    cuda_flags: Sequence[str] = (), cxx_flags: Sequence[str] = ()) -> Path:
    """Build (or find in the cache) and return the path of the extension's shared object."""
    sources = [Path(s).resolve() for s in sources]
    include_dirs = [Path(d).resolve() for d in include_dirs]
    for s in sources:
        if not s.is_file():
            raise JitError(f"{name}: source {s} is missing from the installed package")
    final, key = build_dir_for(name, sources, include_dirs, cuda_flags, cxx_flags)
    so = final / f"{name}{tc.ext_suffix()}"
    if so.is_file():
        return so
    if env.jit_disabled():
        raise JitError(
            f"{name}: no prebuilt kernel in {env.jit_cache_dir()} (key {key}) and HPC_JIT_DISABLE "
            "forbids compiling at run time; run `python -m hpc_common.jit.prebuild` first"
        )
    with _file_lock(env.jit_cache_dir() / f".{name}-{key}.lock"):
        if so.is_file():  # another process finished it while we waited
            return so
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-{key}-", dir=env.jit_cache_dir()))
        try:
            built = _write_ninja(tmp, name, sources, include_dirs, cuda_flags, cxx_flags)
            cmd = [tc.find_ninja(), "-C", str(tmp)]
            if env.jit_workers():
                cmd += ["-j", str(env.jit_workers())]
            if env.jit_verbose():
                cmd.append("-v")
            t0 = time.time()
            print(f"[hpc-ops] building {name} for {','.join('sm_' + a for a in env.cuda_archs())} "
                  f"(first use; cached in {final}) ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise JitError(f"{name}: build failed (ninja exit {proc.returncode})\n"
                               f"{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}")
            if env.jit_verbose():
                print(proc.stdout, file=sys.stderr)
            for leftover in tmp.glob("*.o"):
                leftover.unlink()
            # mkdtemp makes 0700; a cache prebuilt into an image is read by other users.
            os.chmod(tmp, 0o755)
            if final.exists():  # built by a process that did not share our lock (another host)
                shutil.rmtree(tmp)
            else:
                os.replace(tmp, final)
            print(f"[hpc-ops] built {name} in {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    if not so.is_file():
        raise JitError(f"{name}: build finished but {so} is missing")
    return so


def load_extension(name: str, sources: Sequence[Path], include_dirs: Sequence[Path] = (),
                   cuda_flags: Sequence[str] = (), cxx_flags: Sequence[str] = ()) -> ModuleType:
    """Build if needed and import the extension. `name` is also the Python module name, so
    the binding file must use PYBIND11_MODULE(HPC_EXT_NAME, m)."""
    so = build_extension(name, sources, include_dirs, cuda_flags, cxx_flags)
    return _import_from(so, name)
