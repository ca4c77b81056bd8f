"""Thin wrapper: the benchmark lives in `hpc_moe.bench` (shipped in the wheel). Same CLI and rows:

    python benchmarks/bench_moe.py --help
"""

import sys

from hpc_moe import bench as _bench

# This file's names are the benchmark module's (scripts and tests load this file and use them).
globals().update({k: v for k, v in vars(_bench).items() if not k.startswith('__')})

if __name__ == "__main__":
    sys.exit(_bench.main())
