"""Thin wrapper: the benchmark lives in `hpc_moe.bench` (shipped in the wheel). Same CLI and rows:

    python benchmarks/bench_moe.py --help
"""

import sys

from hpc_moe.bench import *  # noqa: F401,F403  (the names scripts and tests use from this file)
from hpc_moe.bench import main

if __name__ == "__main__":
    sys.exit(main())
