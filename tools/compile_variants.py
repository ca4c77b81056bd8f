"""Compile (no link, no run) the decode kernels' build-switch variants that the JIT prebuild does
not build (hpc_attention._ext.BUILD_VARIANTS: today the schedule without the score look-ahead),
every paged-decode source under each, so that a path behind a switch cannot rot unnoticed. CI
step 2b (tools/test.sh).

    python tools/compile_variants.py --work DIR
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hpc_attention import _ext
from hpc_common.jit.build import nvcc_compile_flags
from hpc_common.jit.toolchain import find_nvcc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    nvcc = find_nvcc()
    sources = [Path(s) for s in _ext.SPEC.sources if Path(s).name.startswith("paged_decode")]
    jobs = []
    for defines in _ext.BUILD_VARIANTS:
        for src in sources:
            out = args.work / f"{_ext.variant_tag(defines)}_{src.stem}.o"
            cmd = [nvcc, *nvcc_compile_flags(_ext.SPEC.include_dirs, list(defines)), "-c", str(src), "-o", str(out)]
            jobs.append((f"{' '.join(defines)}: {src.name}", cmd))

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
