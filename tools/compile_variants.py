"""Compile (no link, no run) what the JIT prebuild does not build, so nothing the repo keeps can rot
unnoticed. CI step 2b (tools/test.sh):
- the decode kernels' build-switch variants (hpc_attention._ext.BUILD_VARIANTS: today the schedule
  without the score look-ahead), every paged-decode source under each;
- the FP8 kernels' build-switch variants (hpc_common._ext.BUILD_VARIANTS: the FP8 benchmark's A/B rows),
  fp8_quant.cu under each;
- the standalone probe programs the notes cite (packages/*/scripts/*.cu), with the extensions' flags and
  every package's include folder (each probe's header comment gives a plain nvcc line for running it).

    python tools/compile_variants.py --work DIR
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hpc_attention import _ext
from hpc_common import _ext as common_ext
from hpc_common.jit.build import nvcc_compile_flags
from hpc_common.jit.toolchain import find_nvcc

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    nvcc = find_nvcc()
    jobs = []
    sources = [Path(s) for s in _ext.SPEC.sources if Path(s).name.startswith("paged_decode")]
    for defines in _ext.BUILD_VARIANTS:
        for src in sources:
            out = args.work / f"{_ext.variant_tag(defines)}_{src.stem}.o"
            cmd = [nvcc, *nvcc_compile_flags(_ext.SPEC.include_dirs, list(defines)), "-c", str(src), "-o", str(out)]
            jobs.append((f"{' '.join(defines)}: {src.name}", cmd))
    fp8 = next(Path(s) for s in common_ext.SPEC.sources if Path(s).name == "fp8_quant.cu")
    for defines in common_ext.BUILD_VARIANTS:
        out = args.work / f"{_ext.variant_tag(defines)}_{fp8.stem}.o"
        cmd = [nvcc, *nvcc_compile_flags(common_ext.SPEC.include_dirs, list(defines)), "-c", str(fp8), "-o", str(out)]
        jobs.append((f"{' '.join(defines)}: {fp8.name}", cmd))
    includes = sorted(str(p) for p in ROOT.glob("packages/*/src/*/include"))
    for src in sorted(ROOT.glob("packages/*/scripts/*.cu")):
        out = args.work / f"probe_{src.parent.parent.name}_{src.stem}.o"
        cmd = [nvcc, *nvcc_compile_flags(includes), "-c", str(src), "-o", str(out)]
        jobs.append((f"probe: {src.relative_to(ROOT)}", cmd))

    def run(job):
        label, cmd = job
        r = subprocess.run(cmd, capture_output=True, text=True)
        return label, r.returncode, r.stderr

    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for label, rc, err in pool.map(run, jobs):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {label}", flush=True)
            if rc:
                failed += 1
                print(err[-4000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
