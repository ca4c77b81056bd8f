"""Compile every standalone probe program (tools/probes/<op>/*.cu) the way its header says:

    nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<every package's include dir> probe.cu

against the real headers of the packages (a probe never carries a copy of library code), so a change
to a kernel header that breaks a probe fails CI. CI (tools/test.sh) runs it once; on the device
machine run the binaries it leaves in --out.

    python tools/probes/build.py [--out DIR] [--jobs N] [probe.cu ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBES = Path(__file__).resolve().parent


def include_dirs() -> list[Path]:
    """The include folder of every package of the monorepo."""
    return sorted(p for p in (ROOT / "packages").glob("*/src/*/include") if p.is_dir())


def find_nvcc() -> str:
    for cand in (os.environ.get("HPC_NVCC"), os.environ.get("CUDA_HOME") and str(Path(os.environ["CUDA_HOME"]) / "bin/nvcc"),
                 "/usr/local/cuda/bin/nvcc", shutil.which("nvcc")):
        if cand and Path(cand).is_file():
            return cand
    raise SystemExit("tools/probes/build.py: nvcc not found (set HPC_NVCC or CUDA_HOME)")


def command(nvcc: str, src: Path, out: Path) -> list[str]:
    return [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a",
            *(f"-I{d}" for d in include_dirs()), str(src), "-o", str(out)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/hpc_probes"), help="folder for the binaries")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("sources", nargs="*", type=Path, help="probe sources (default: every tools/probes/*/*.cu)")
    args = ap.parse_args(argv)
    sources = [s.resolve() for s in args.sources] or sorted(PROBES.glob("*/*.cu"))
    if not sources:
        print("no probe sources under tools/probes/*/")
        return 0
    nvcc = find_nvcc()

    def build(src: Path):
        out = args.out / src.parent.name / src.stem
        out.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        proc = subprocess.run(command(nvcc, src, out), capture_output=True, text=True)
        return src, proc, time.time() - t0

    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for src, proc, secs in pool.map(build, sources):
            rel = src.relative_to(ROOT) if src.is_relative_to(ROOT) else src
            if proc.returncode == 0:
                print(f"  {rel}: ok ({secs:.1f}s)")
            else:
                failed += 1
                print(f"  {rel}: FAILED (nvcc exit {proc.returncode})\n{proc.stderr[-6000:]}")
    print(f"probes: {len(sources) - failed} of {len(sources)} compiled for sm_90a into {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
