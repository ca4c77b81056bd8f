"""Compile (no link, no run) the standalone probe programs, packages/*/scripts/*.cu, for sm_90a, so a
probe that the notes cite cannot rot when the headers it includes change. CI step 2c (tools/test.sh).
The flags are the extensions' (hpc_common.jit.build.nvcc_compile_flags) with every package's include
folder: each probe's own header comment gives a plain nvcc line for running it.

    python tools/compile_probes.py --work DIR
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    includes = sorted(str(p) for p in ROOT.glob("packages/*/src/*/include"))
    probes = sorted(ROOT.glob("packages/*/scripts/*.cu"))

    def run(src: Path):
        out = args.work / f"{src.parent.parent.name}_{src.stem}.o"
        cmd = [nvcc, *nvcc_compile_flags(includes, []), "-c", str(src), "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        return src.relative_to(ROOT), r.returncode, r.stderr

    failed = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for name, rc, err in ex.map(run, probes):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {name}", flush=True)
            if rc:
                failed += 1
                print(err[-3000:], file=sys.stderr)
    print(f"{len(probes) - failed} of {len(probes)} probes compile")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
