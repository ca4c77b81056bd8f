"""The dynamic tile kernels' finite fast path (MagnitudeMax in fp8_primitives.cuh) against the reference,
bit for bit. A thread whose vectors are all finite takes its amax from the raw magnitudes and stores its
codes without the NaN fix-up; a thread that saw an Inf or NaN recounts element by element and fixes its
codes. Here each row holds exactly one special value (NaN, -NaN, +Inf, -Inf, in turn), at a position that
moves from row to row over the lanes and vectors, beside rows that are all finite and one that is all
-NaN: so in every team both kinds of thread meet, and the special value is the only thing that can tell a
wrong amax (an Inf taken as the maximum) or a missing fix-up (0xFF for -NaN) apart. Every kernel family
of the fast path runs (checked by the profiler), and the column tile kernel, which keeps the fix-up."""

from __future__ import annotations

import pytest
import torch
from _fp8_cases import assert_same, kernel_names, run, run_ref
from _fp8_dispatch import choose, fields

SPECIALS = (float("nan"), -float("nan"), float("inf"), -float("inf"))

# (mode, shape, kernel that serves it; fp32 rows hold half the elements per vector, see FP32_KERNEL)
CASES = [
    ("per_token", (24, 4096), "fp8_quant_tile_kernel"),
    ("per_token", (20, 2880), "fp8_quant_row_tile_kernel"),
    ("per_token", (12, 7168), "fp8_quant_row_tile_kernel"),
    ("per_token", (300, 40), "fp8_quant_row_tile_kernel"),
    ("per_token", (8, 14336), "fp8_quant_long_row_kernel"),
    ("per_token", (6, 28672), "fp8_quant_wide_row_kernel"),
    ("group", (16, 2880), "fp8_quant_row_tile_kernel"),
    ("group", (24, 4096), "fp8_quant_col_tile_kernel"),
    ("group_col", (24, 4096), "fp8_quant_col_tile_kernel"),
    ("per_head", (16, 8, 128), "fp8_quant_col_tile_kernel"),  # 8 heads: whole column tiles (4: the tile kernel)
]
# fp32: 7168 = 1792 vectors (the long row kernel), 14336 = 3584 (the 512-thread kernel), 28672 = 7168 vectors
# (more than 4096: the register kernel, whose generic path has no fast path; it still must match).
FP32_KERNEL = {7168: "fp8_quant_long_row_kernel", 14336: "fp8_quant_wide_row_kernel", 28672: "fp8_quant_kernel"}


def _expected_kernel(mode, shape, kernel, dtype) -> str:
    if dtype == torch.float32 and mode == "per_token":
        return FP32_KERNEL.get(shape[-1], kernel)
    return kernel


# The dispatch probe's names (tests/common/test_fp8_dispatch.py) of the kernels above.
PROBE_NAMES = {"tile": "fp8_quant_tile_kernel", "row_tile": "fp8_quant_row_tile_kernel",
               "row_tile3": "fp8_quant_row_tile_kernel",
               "row_tile_cover": "fp8_quant_row_tile_kernel", "row_tile_cover_whole": "fp8_quant_row_tile_kernel",
               "long_row": "fp8_quant_long_row_kernel", "wide_row": "fp8_quant_wide_row_kernel",
               "col_tile": "fp8_quant_col_tile_kernel", "generic": "fp8_quant_kernel"}


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32), ids=lambda d: str(d)[6:])
def test_cases_name_the_kernels_the_launcher_picks(probe, dtype):
    """On the CPU (the launcher's own geometry functions): each case's expected kernel is the one the
    dispatch picks, so the GPU test below covers the kernel families it names."""
    for mode, shape, kernel in CASES:
        got = choose(probe, [fields(mode, torch.empty(shape, dtype=dtype), 128)])
        assert [PROBE_NAMES[g] for g in got] == [_expected_kernel(mode, shape, kernel, dtype)], (mode, shape, got)


def _input(shape, dtype, seed: int) -> torch.Tensor:
    """Finite values of a spread of magnitudes, then one special value per row (rows 1, 2, ... in turn)
    at a position that walks the row, row 0 all finite and the last row all -NaN."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    rows = x.reshape(-1, shape[-1])
    rows *= torch.pow(10.0, torch.empty(rows.shape[0], 1).uniform_(-2, 2, generator=g))
    n = rows.shape[1]
    for r in range(1, rows.shape[0] - 1):
        rows[r, (r * 977 + 13 * (r // 4)) % n] = SPECIALS[(r - 1) % len(SPECIALS)]
    rows[-1] = -float("nan")
    return x.to(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32_scale", "ue8m0"])
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32), ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("mode,shape,kernel", CASES, ids=lambda c: str(c))
def test_one_special_value_per_row_matches_reference(cuda, mode, shape, kernel, dtype, ue8m0):
    x = _input(shape, dtype, seed=sum(shape) + len(mode)).to(cuda)
    kernel = _expected_kernel(mode, shape, kernel, dtype)
    out = run(mode, x, ue8m0=ue8m0)
    torch.cuda.synchronize()
    assert_same(out, run_ref(mode, x, ue8m0=ue8m0), what=f"{mode} {tuple(shape)} {dtype}")
    names = kernel_names(lambda: run(mode, x, ue8m0=ue8m0))
    assert any(kernel in k for k in names), f"{mode} {tuple(shape)} {dtype} ran {names}, expected {kernel}"
