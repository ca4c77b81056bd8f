"""Thin wrapper: the benchmark lives in `hpc_common.fp8.bench` (shipped in the wheel). Same CLI and rows:

    python benchmarks/bench_fp8_quant.py --help
"""

import sys

from hpc_common.fp8.bench import *  # noqa: F401,F403  (the names scripts and tests use from this file)
from hpc_common.fp8.bench import main

if __name__ == "__main__":
    sys.exit(main())
