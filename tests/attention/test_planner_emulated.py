"""The CUDA planner's own source (decode_plan.cuh) run on the CPU against the Python twin.

planner_emu/harness.cpp compiles the kernel with g++ and runs its 512 threads as fibers with
emulated barriers, shuffles, ballots and warp reductions (planner_emu/cuda_runtime.h), then
the tables are compared with planner.plan_tables / first_pages, as the GPU test
test_decode.py::test_planner_matches_python_twin does on the device. It checks the kernel's
arithmetic and its thread / scan / barrier structure without a GPU; it says nothing about
timing, memory ordering on the device or the compiled SASS.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hpc_attention.planner import first_pages, plan_tables

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parents[1] / "packages" / "hpc-attention" / "src" / "hpc_attention" / "include"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20, ucontext)")


def pt_val(b: int, j: int) -> int:  # the harness's page table (harness.cpp: pt_val)
    return (b * 7919 + j * 104729 + 13) % (1 << 20) - 5


class _Row:
    def __init__(self, b):
        self.b = b

    def __getitem__(self, j):
        return pt_val(self.b, j)


class _Table:
    def __getitem__(self, b):
        return _Row(b)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = tmp_path_factory.mktemp("planner_emu") / "harness"
    cmd = ["g++", "-std=c++20", "-O1", "-w", f"-I{HERE / 'planner_emu'}", f"-I{INCLUDE}", "-o", str(exe),
           str(HERE / "planner_emu" / "harness.cpp")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    return exe


def _cases(seed: int, n: int):
    """(lens, hkv, C, min_tiles, static_splits, max_len, task_cost, tail_percent, tail_bin,
    max_tail_bins, page_size or 0, head_major, cut_to_heads, cost_cap)."""
    rng = random.Random(seed)
    bench = [100 if i % 7 == 0 else 4096 for i in range(256)]  # the benchmark's batch-256 plan
    out = [(bench, hkv, 132, 4, 0, 4096, cost, 0, 4, 264, page, hm, 1)
           for hkv in (1, 8) for cost in (2, 4, 0) for page in (0, 64) for hm in (0, 1)]
    # head-major cut into all C bins (heuristics.HEAD_MAJOR_CUT_TO_HEADS off): never the aligned plan
    out += [(bench, 8, 132, 4, 0, 4096, cost, 0, 4, 264, 64, 1, 0) for cost in (2, 4)]
    mixed = [435, 1243, 74, 1191, 1396, 325, 883, 1308, 806, 1646, 1481, 1762, 1043, 1945, 762, 1115, 1917, 912,
             1029, 550]
    out += [
        # More bins than the shared-memory first-page table; bins nested in fixed costs (serial,
        # long-request and general paths); a long request over many one-unit bins.
        ([rng.randrange(0, 140_000) for _ in range(3000)], 2, 1000, 1, 0, 140_000, 3, 0, 4, 2000, 64, 0, 1),
        ([rng.randrange(0, 140_000) for _ in range(3000)], 2, 1000, 1, 0, 140_000, 3, 0, 4, 2000, 64, 1, 1),
        ([rng.randrange(0, 140_000) for _ in range(700)], 1, 2500, 1, 0, 140_000, 0, 0, 4, 1000, 128, 0, 1),
        ([rng.randrange(0, 300) for _ in range(200)], 8, 132, 1, 0, 140_000, 64, 0, 4, 264, 16, 0, 1),
        ([rng.randrange(0, 300) for _ in range(200)], 8, 132, 1, 0, 140_000, 64, 0, 4, 264, 16, 1, 1),
        (mixed, 32, 1000, 1, 0, 140_000, 64, 0, 4, 0, 64, 0, 1),
        (mixed, 32, 1000, 1, 0, 140_000, 64, 20, 4, 1000, 64, 0, 1),
        (mixed, 16, 132, 1, 0, 140_000, 64, 20, 4, 1000, 64, 1, 1),
        ([rng.randrange(0, 129) for _ in range(600)], 1, 50000, 1, 0, 140_000, 64, 0, 4, 0, 64, 0, 1),
        ([20] * 40 + [130_000], 1, 132, 4, 0, 140_000, 2, 0, 4, 264, 64, 0, 1),
        ([20] * 40 + [130_000], 8, 132, 4, 0, 140_000, 4, 0, 4, 264, 64, 1, 1),
        # Aligned head-major plan (decode_plan_aligned.cuh): long requests written by the warp
        # with more requests after them in the same thread (B > 512), and bins nested in fixed
        # costs copied to every head.
        ([130_000 if i % 97 == 0 else 20 for i in range(1100)], 4, 4000, 4, 0, 140_000, 4, 0, 4, 0, 64, 1, 1),
        ([rng.randrange(0, 70) for _ in range(300)], 4, 2400, 1, 0, 140_000, 64, 0, 4, 0, 64, 1, 1),
        # 8 threads per request: one CTA (more bins than the shared first-page table, plan_ctas)
        ([20] * 40 + [130_000] + [20] * 9, 16, 1000, 4, 0, 140_000, 4, 0, 4, 1100, 64, 1, 1),
        # A grid of CTAs splitting the heads (plan_ctas): 16 CTAs of 2 heads (2 threads per
        # request), 16 CTAs of 1 or 2 heads, 16 of 1 with a long request written by the warp.
        (mixed * 2, 32, 1000, 1, 0, 140_000, 64, 0, 4, 0, 64, 1, 1),
        (mixed * 2, 24, 500, 1, 0, 140_000, 3, 0, 4, 0, 16, 1, 1),
        ([20] * 60 + [130_000] + [20] * 9, 16, 1000, 4, 0, 140_000, 4, 0, 4, 0, 64, 1, 1),
        ([0] * 590 + [64] * 10, 2, 132, 4, 0, 140_000, 2, 0, 4, 0, 64, 1, 1),  # 15 bins: not aligned, general plan
    ]
    # The fixed cases with the charge capped (the default) and, every third, without.
    out = [c + (int(i % 3 != 2),) for i, c in enumerate(out)]
    # The cap binding (ItemCharge): equal short items whose tiles fill the tiles-only budget (the row plan, the
    # fast plan, the aligned row and block-scan plans, the general plan with a tail), and mixed short ones.
    for lens in ([512] * 64, [512] * 128, [512] * 48, [500 + 13 * (i % 7) for i in range(96)],
                 [rng.randrange(1, 700) for _ in range(300)], [512] * 600):
        for hkv, hm in ((1, 0), (8, 1), (2, 0)):
            out.append((lens, hkv, 132, 8, 0, 4096, 4, 0, 4, 0, 64, hm, 1, 1))
    out.append(([512] * 200, 1, 132, 8, 0, 4096, 4, 20, 4, 264, 64, 0, 1, 1))
    out.append(([rng.randrange(1, 700) for _ in range(200)], 1, 132, 8, 0, 4096, 64, 20, 4, 264, 64, 0, 1, 1))
    for _ in range(n):
        B = rng.choice([1, 2, 3, 5, 31, 32, 64, 100, 255, 256, 257, 300, 511, 512, 513, 1100, 2000])
        kind = rng.randrange(6)
        if kind == 0:
            lens = [rng.randrange(0, 300) for _ in range(B)]
        elif kind == 1:
            lens = [rng.randrange(0, 140_000) for _ in range(B)]
        elif kind == 2:
            lens = [20] * B
            lens[0] = 130_000
        elif kind == 3:
            lens = [rng.choice([0, 1, 63, 64, 65, 127, 128, 129, 4096]) for _ in range(B)]
        elif kind == 4:
            lens = [rng.choice([0, 4096, 100, 32768, 131072]) for _ in range(B)]
        else:  # out of range: clamped on the device
            lens = [rng.randrange(-50, 150_000) for _ in range(B)]
        C = rng.choice([1, 2, 7, 132, 132, 400])
        out.append((lens, rng.choice([1, 1, 2, 3, 4, 8, 8, 16]), C, rng.choice([1, 4, 4, 16]),
                    rng.choice([0, 0, 0, 0, 3, 1]), 140_000, rng.choice([0, 2, 4, 7, 64]),
                    rng.choice([0, 0, 0, 20, 50]), rng.randrange(1, 6), rng.choice([0, 2 * C, C // 3]),
                    rng.choice([0, 16, 64, 128]), rng.choice([0, 1]), rng.choice([1, 1, 1, 0]), rng.choice([0, 1])))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_emulated_cuda_planner_matches_python_twin(harness, seed):
    cases = _cases(seed, 60)
    inp = "".join(" ".join(map(str, [len(c[0]), *c[1:]])) + "\n" + " ".join(map(str, c[0])) + "\n" for c in cases)
    res = subprocess.run([str(harness)], input=inp, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = res.stdout.splitlines()
    assert len(lines) == 7 * len(cases)
    for k, (lens, hkv, C, floor, splits, max_len, cost, pct, tbin, max_tail, page, hm, cut, cap) in enumerate(cases):
        got = {}
        for ln in lines[7 * k:7 * k + 7]:
            name, *vals = ln.split()
            got[name] = [int(v) for v in vals]
        want = plan_tables(lens, hkv, C, floor, static_splits=splits, max_len=max_len, task_cost=cost,
                           tail_percent=pct, tail_bin=tbin, max_tail_bins=max_tail, head_major=bool(hm),
                           cut_to_heads=bool(cut), cost_cap=bool(cap))
        tag = (k, len(lens), hkv, C, floor, splits, cost, pct, tbin, max_tail, page, hm, cut, cap)
        quads = [tuple(got["tasks"][i:i + 4]) for i in range(0, len(got["tasks"]), 4)]
        assert got["counters"] == want.counters, tag
        assert got["bin_start"] == want.bin_start, tag
        assert quads == want.tasks, tag
        assert [tuple(got["combine"][i:i + 4]) for i in range(0, len(got["combine"]), 4)] == want.combine, tag
        assert [tuple(got["slot_meta"][i:i + 2]) for i in range(0, len(got["slot_meta"]), 2)] == want.slot_meta, tag
        first = [tuple(got["bin_first"][4 * c:4 * c + 4]) for c in range(C + max_tail)]
        for c in range(C + max_tail):
            if want.bin_start[c] < want.bin_start[c + 1]:
                assert first[c] == want.tasks[want.bin_start[c]], (tag, c)
        if page:
            for c, pg in enumerate(first_pages(want, _Table(), page, hkv)):
                assert pg is None or got["first_page"][c] == pg, (tag, c)
