"""Thin wrapper: the benchmark lives in `hpc_attention.bench.decode` (shipped in the wheel). Same CLI and rows:

    python benchmarks/bench_decode.py --help
"""

import sys

from hpc_attention.bench import decode as _bench

# This file's names are the benchmark module's (scripts and tests load this file and use them).
globals().update({k: v for k, v in vars(_bench).items() if not k.startswith('__')})

if __name__ == "__main__":
    sys.exit(_bench.main())
