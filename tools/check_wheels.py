"""Build every wheel with hatch, check its contents, and install hpc-moe alone into a clean
virtual environment to prove that, of our packages, only hpc-common comes with it.

Usage: python tools/check_wheels.py --work DIR
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "hpc-common": ROOT / "packages" / "hpc-common",
    "hpc-attention": ROOT / "packages" / "hpc-attention",
    "hpc-router-gemm": ROOT / "packages" / "hpc-router-gemm",
    "hpc-moe": ROOT / "packages" / "hpc-moe",
    "hpc-integration": ROOT / "integration",
}
CUDA_SUFFIXES = (".cu", ".cuh", ".h", ".cpp")


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def version_of(pkg_dir: Path) -> str:
    vfile = next(pkg_dir.glob("src/*/_version.py"))
    return re.search(r'__version__\s*=\s*"([^"]+)"', vfile.read_text()).group(1)


def build_wheels(dist: Path) -> dict[str, Path]:
    hatch = Path(sys.executable).parent / "hatch"
    wheels = {}
    for name, d in PACKAGES.items():
        run([hatch, "build", "-t", "wheel", dist], cwd=d)
        ver = version_of(d)
        whl = dist / f"{name.replace('-', '_')}-{ver}-py3-none-any.whl"
        if not whl.is_file():
            raise SystemExit(f"{name}: expected {whl.name} in {dist} (version file says {ver})")
        wheels[name] = whl
    return wheels


def check_contents(name: str, whl: Path) -> None:
    pkg_dir = PACKAGES[name]
    src = next(pkg_dir.glob("src/*/__init__.py")).parent
    expected = sorted(str(p.relative_to(src.parent)) for p in src.rglob("*")
                      if p.suffix in CUDA_SUFFIXES and "__pycache__" not in p.parts)
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
    missing = [e for e in expected if e not in names]
    if missing:
        raise SystemExit(f"{name}: wheel lacks CUDA sources {missing[:5]}")
    if (src / "_ext.py").is_file() and not any(e.endswith(".cu") for e in expected):
        raise SystemExit(f"{name}: declares a CUDA extension (_ext.py) but ships no .cu source")
    print(f"{name}: {whl.name} carries {len(expected)} CUDA/C++ source files")


def check_moe_alone(work: Path, dist: Path) -> None:
    env_dir = work / "clean-venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # torch first, from the CPU build on disk, so no CUDA build is downloaded; the other
    # third-party needs come as wheels fetched beside ours, then the install is index-free
    # so no same-named project on PyPI can stand in for ours.
    run([*pip, "torch==2.13.0"])
    house = work / "wheelhouse"
    run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", house,
         "pybind11>=2.12", "ninja>=1.11"])
    run([*pip, "--no-index", "--find-links", dist, "--find-links", house, "hpc-moe"])
    listed = json.loads(subprocess.run([py, "-m", "pip", "list", "--format=json"], check=True,
                                       capture_output=True, text=True).stdout)
    ours = sorted(p["name"].lower() for p in listed if p["name"].lower().startswith("hpc"))
    if ours != ["hpc-common", "hpc-moe"] and ours != ["hpc_common", "hpc_moe"]:
        raise SystemExit(f"installing hpc-moe brought {ours}, expected only hpc-common with it")
    run([py, "-c", "import hpc_moe, hpc_common; print('hpc-moe', hpc_moe.__version__, 'with hpc-common', "
                   "hpc_common.__version__)"])
    # hpc-common finds its dependents only through the wheels' entry points (hpc_ops.jit): the installed
    # pair lists both extensions, and nothing of the packages that are not installed.
    out = subprocess.run([py, "-m", "hpc_common.jit.prebuild", "--list"], check=True, capture_output=True,
                         text=True, cwd=work).stdout
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    if names != {"_hpc_common_C", "_hpc_moe_C"}:
        raise SystemExit(f"prebuild --list in the hpc-moe venv found {sorted(names)}, expected _hpc_common_C and "
                         "_hpc_moe_C (entry points hpc_ops.jit)")
    print("entry points: prebuild --list finds", ", ".join(sorted(names)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args()
    dist = args.work / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    wheels = build_wheels(dist)
    for name, whl in wheels.items():
        check_contents(name, whl)
    check_moe_alone(args.work, dist)
    print("wheels OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
