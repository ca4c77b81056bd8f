"""Which FP8 kernel each shape takes, checked on the CPU: fp8_dispatch_probe.cu (built here with nvcc,
host code only) runs the launcher's own geometry functions on the parameters the Python launcher
would pass (hpc_common.fp8.heuristics.launch_fields on CPU tensors of the same shapes and strides) and names
the kernel launch_vector_path would pick. A change that silently sends a shape to a slower kernel
(e.g. rows of hidden size 7168 back to the register kernels) fails in CI, without a GPU; the GPU
suite checks the same through the profiler where it matters for bits (test_fp8_quant_row_tile.py)."""

from __future__ import annotations

import math
import subprocess

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from _fp8_dispatch import FIELDS, choose, fields, geometry, launch_geometry

BF16, F32 = torch.bfloat16, torch.float32
# (mode, shape, dtype, group_size, expected kernel); shapes [M, N] or [T, H, D].
CASES = [
    ("per_tensor_static", (8192, 4096), BF16, 128, "flat"),
    ("per_tensor", (8192, 4096), BF16, 128, "tile"),
    ("per_token", (8192, 4096), BF16, 128, "tile"),
    ("group", (8192, 4096), BF16, 128, "col_tile"),
    ("group_col", (8192, 4096), BF16, 128, "col_tile"),
    ("per_head", (8192, 32, 128), BF16, 128, "col_tile"),
    ("per_token", (8192, 4096), F32, 128, "tile"),
    ("per_token", (11650, 2880), BF16, 128, "row_tile"),
    ("per_token", (6553, 5120), BF16, 128, "row_tile"),
    ("per_token", (4681, 7168), BF16, 128, "row_tile"),
    ("per_token", (64, 2880), F32, 128, "row_tile"),
    ("per_token", (2340, 14336), BF16, 128, "long_row"),
    ("per_token", (1170, 28672), BF16, 128, "wide_row"),  # 3584 vectors: 512 lanes x 7
    ("per_token", (4, 32776), BF16, 128, "generic"),
    ("per_token", (8194, 4095), BF16, 128, "generic"),
    ("group", (11650, 2880), BF16, 128, "row_tile_cover_whole"),  # whole vectors: no partial-vector code
    ("group_col", (11650, 2880), BF16, 128, "row_tile_cover_whole"),
    ("group", (37, 1000), BF16, 96, "row_tile_cover_whole"),
    ("group_col", (21845, 1536), BF16, 128, "col_tile"),
    ("group", (21845, 1536), BF16, 128, "tile"),
    ("group", (8194, 4095), BF16, 128, "odd_group_row"),  # one row per CTA (fp8_quant_odd_group_rows.cuh)
    ("group_col", (8194, 4095), BF16, 128, "odd_group_row"),
    ("group", (64, 897), BF16, 128, "odd_group_row"),  # 8 groups: the fewest it takes
    ("group", (64, 895), BF16, 128, "odd_row_tile"),
    ("group", (33, 1023), F32, 128, "odd_row_tile"),
    ("group", (40, 1001), BF16, 64, "odd_row_tile"),
    ("per_head", (20, 6, 97), BF16, 128, "small_seg_masked"),
    ("per_head", (20, 6, 96), BF16, 128, "row_tile3"),  # 12 vectors: 4 lanes x 3
    ("per_token", (8192, 1536), BF16, 128, "row_tile3"),  # 64 lanes x 3 vectors (row_tile_three)
    ("per_token", (8192, 768), F32, 128, "row_tile3"),
    ("per_token", (8192, 3072), BF16, 128, "row_tile"),  # 96 lanes x 4: no empty slot
    ("group", (1, 1004), BF16, 128, "row_tile_cover"),  # a last group ending inside a vector: partial covers
    ("group", (1, 1002), F32, 128, "row_tile_cover"),
]


def test_probe_parses_what_it_is_given(probe):
    """Sanity of the probe itself: one answer per parameter line, none for a short line."""
    x = torch.empty((8, 4096), dtype=BF16)
    assert choose(probe, [fields("per_token", x)] * 3) == ["tile"] * 3


@pytest.mark.parametrize("mode,shape,dtype,group_size,expected", CASES, ids=lambda c: str(c).replace("torch.", ""))
def test_default_dispatch(probe, mode, shape, dtype, group_size, expected):
    x = torch.empty(shape, dtype=dtype)
    assert math.prod(x.shape) > 0
    assert choose(probe, [fields(mode, x, group_size)]) == [expected]


def test_rows_with_a_pitch(probe):
    """Rows of 2880 inside a 3072-wide buffer keep the row tile kernel (located per tile, not dense)."""
    x = torch.empty((33, 3072), dtype=BF16)[:, :2880]
    assert choose(probe, [fields("per_token", x), fields("group", x)]) == ["row_tile", "row_tile_cover_whole"]


def test_segment_divider_equals_division(probe):
    """The row tile covers find a segment's row by a multiply-shift (set_segment_divider, locate_cover);
    the probe compares it with the division over divisors 1-4096, larger ones up to 2^31 - 1 and indices
    at the ends of the range and around multiples of each divisor."""
    r = subprocess.run([str(probe), "divider"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout[-2000:]


def test_wide_long_rows_take_only_rows_past_256_lanes(probe):
    """Rows of 1793-3584 vectors take the 512-thread kernel, 7 vectors per lane; 14336 keeps 256 lanes x 7,
    32768 16 per lane."""
    rows = [fields("per_token", torch.empty((64, n), dtype=BF16)) for n in (14336, 14344, 16384, 28672, 32768)]
    assert choose(probe, rows) == ["long_row", "wide_row", "wide_row", "wide_row", "long_row"]


def test_whole_vector_covers(probe):
    """Covers whose segments end on vector boundaries take the kernel without the partial-vector code; a group
    or row ending inside a vector keeps it."""
    rows = [fields("group", torch.empty((64, 2880), dtype=BF16)), fields("group", torch.empty((1, 1004), dtype=BF16)),
            fields("group", torch.empty((64, 2880), dtype=F32))]
    assert choose(probe, rows) == ["row_tile_cover_whole", "row_tile_cover", "row_tile_cover_whole"]


def test_two_warp_rows_share_ctas_and_wider_rows_take_their_own(probe):
    """Row tile rows of 64-lane teams share 256-thread CTAs (N = 1536 bf16: 4 rows of 64 lanes x 3 vectors; fp32 N =
    768 alike); from 96 lanes (N = 2880, 3072, 7168) a row takes a CTA of its own (kRowTileOwnCtaMinTeam)."""
    rows = [fields("per_token", torch.empty((64, n), dtype=dt)) for n, dt in ((1536, BF16), (768, F32), (2880, BF16),
                                                                             (3072, BF16), (7168, BF16), (1000, BF16))]
    expected = [("row_tile3", 4, 64), ("row_tile3", 4, 64), ("row_tile", 1, 96), ("row_tile", 1, 96),
                ("row_tile", 1, 224), ("row_tile", 8, 32)]
    assert geometry(probe, rows) == expected


def test_cover_cta_threads(probe):
    """Aligned covers run on 64-thread CTAs (group-128 bf16 N = 2880: 16 segments of 4 lanes), odd group rows the one-row
    kernel does not take (N = 895: 7 groups) on 128 (kCoverCtaThreads, kOddCoverCtaThreads); one-segment rows keep
    theirs."""
    rows = [fields("group", torch.empty((64, 2880), dtype=BF16)), fields("group", torch.empty((64, 895), dtype=BF16)),
            fields("per_token", torch.empty((64, 1536), dtype=BF16))]
    assert geometry(probe, rows) == [("row_tile_cover_whole", 16, 4), ("odd_row_tile", 32, 4), ("row_tile3", 4, 64)]


@pytest.mark.parametrize("shape,group,dtype", [((8, 3000), 2048, BF16), ((8, 6000), 4096, BF16), ((8, 9000), 8192, BF16),
                                               ((8, 3000), 2048, F32), ((5, 4095), 2048, BF16), ((5, 2047), 1024, BF16)],
                         ids=str)
def test_covers_of_wide_groups_get_a_cta_each(probe, shape, group, dtype):
    """Covers whose teams are as wide as the covers' CTAs (64 threads; odd rows 128) or wider still get one segment
    per CTA, never zero: group sizes of 2048-8192 elements with a shorter last group, aligned and odd rows."""
    [(kernel, segs, team)] = geometry(probe, [fields("group", torch.empty(shape, dtype=dtype), group)])
    assert kernel in ("row_tile_cover", "row_tile_cover_whole", "odd_row_tile", "long_row"), kernel
    assert segs >= 1 and segs * team <= 1024, (kernel, segs, team)


ROW_KERNELS = ("row_tile", "row_tile3", "row_tile_cover", "row_tile_cover_whole", "odd_row_tile", "odd_group_row", "long_row",
               "wide_row")
TILE_KERNELS = ROW_KERNELS + ("tile", "flat", "col_tile")
OTHER_KERNELS = ("generic", "small_seg", "small_seg_masked", "scalar")


@st.composite
def _dispatch_case(draw):
    """A public call's input: mode, dtype, shape (rows with a pitch, or [T, H, D] per-head), group size."""
    mode = draw(st.sampled_from(["per_token", "group", "group_col", "per_head", "per_tensor", "per_tensor_static"]))
    dtype = draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32]))
    if mode == "per_head":
        shape = (draw(st.integers(1, 300)), draw(st.integers(1, 16)), draw(st.integers(1, 600)))
        return mode, dtype, shape, 0, 128
    n = draw(st.one_of(st.integers(1, 20000), st.sampled_from([1536, 2880, 4095, 4096, 7168, 14336, 28672, 32776])))
    m = draw(st.integers(1, 4096 * 8 // max(1, n // 64) + 1))
    return mode, dtype, (min(m, 5000), n), draw(st.sampled_from([0, 0, 1, 8, 64])), draw(
        st.sampled_from([32, 64, 96, 100, 128, 128, 256, 1000, 2048, 4096, 8192]))


@settings(deadline=None, max_examples=30)
@given(cases=st.lists(_dispatch_case(), min_size=40, max_size=40))
def test_every_drawn_input_gets_a_launchable_geometry(probe, cases):
    """Whatever the shape, stride, dtype and group size, the launcher's geometry functions pick a known kernel, never
    fault (the probe runs them: a division by zero kills it), and give a tile kernel 1-1024 threads per CTA, 1 to
    2^31 - 1 CTAs and room for every segment (e.g. covers of wide groups must never get 0 segments per CTA)."""
    rows, shapes = [], []
    for mode, dtype, shape, pad, group in cases:
        if mode == "per_head":
            x = torch.empty(shape, dtype=dtype)
        else:
            x = torch.empty((shape[0], shape[1] + pad), dtype=dtype)[:, :shape[1]]
        try:
            rows.append(fields(mode, x, group))
        except (ValueError, RuntimeError):  # an input the public function refuses (its own tests check the message)
            continue
        shapes.append((mode, dtype, shape, pad, group))
    if not rows:
        return
    for case, f, (name, segs, team, threads, ctas) in zip(shapes, rows, launch_geometry(probe, rows)):
        assert name in TILE_KERNELS + OTHER_KERNELS, (case, name)
        if name not in TILE_KERNELS:
            continue
        assert 1 <= threads <= 1024 and 1 <= ctas < 2**31, (case, name, threads, ctas)
        if name in ROW_KERNELS or name == "col_tile":
            d = dict(zip(FIELDS, f))
            per_cta = segs * (8 if name == "col_tile" else 1)  # column tiles: kColTileRows rows of tile_segs groups
            assert segs >= 1 and team >= 1, (case, name, segs, team)
            assert ctas * per_cta >= d["rows"] * d["segs_per_row"], (case, name, segs, ctas)
