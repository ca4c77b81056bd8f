"""Compile (no link, no run) the kernels' build-switch variants that the JIT prebuild does not
build, so that an experimental path behind a switch cannot rot unnoticed: today the TMA decode
kernel with two consumer groups (HPC_ATTN_CONSUMER_GROUPS=2) and the decode kernels without the
score look-ahead (HPC_ATTN_SCORE_LOOKAHEAD=0, the benchmark's A/B build). CI step 2b (tools/test.sh).

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

VARIANTS = {
    "groups2": ("-DHPC_ATTN_CONSUMER_GROUPS=2", ["paged_decode_tma_bf16kv.cu", "paged_decode_tma_fp8kv.cu"]),
    "no_lookahead": ("-DHPC_ATTN_SCORE_LOOKAHEAD=0", ["paged_decode_tma_fp8kv.cu", "paged_decode_fp8kv.cu"]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    nvcc = find_nvcc()
    sources = {Path(s).name: Path(s) for s in _ext.SPEC.sources}
    jobs = []
    for tag, (define, names) in VARIANTS.items():
        for name in names:
            out = args.work / f"{tag}_{Path(name).stem}.o"
            cmd = [nvcc, *nvcc_compile_flags(_ext.SPEC.include_dirs, [define]), "-c", str(sources[name]), "-o", str(out)]
            jobs.append((f"{tag}: {name}", cmd))

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
