"""Thin wrapper: the benchmark lives in `hpc_router_gemm.bench` (shipped in the wheel). Same CLI and rows:

    python benchmarks/bench_router_gemm.py --help
"""

import sys

from hpc_router_gemm.bench import *  # noqa: F401,F403  (the names scripts and tests use from this file)
from hpc_router_gemm.bench import main

if __name__ == "__main__":
    sys.exit(main())
