"""Thin wrapper: the benchmark lives in `hpc_attention.bench.prologue` (shipped in the wheel). Same CLI and rows:

    python benchmarks/bench_prologue.py --help
"""

import sys

from hpc_attention.bench.prologue import *  # noqa: F401,F403  (the names scripts and tests use from this file)
from hpc_attention.bench.prologue import main

if __name__ == "__main__":
    sys.exit(main())
