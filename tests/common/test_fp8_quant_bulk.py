"""The bulk-copy ring kernel (fp8_quant_bulk.cuh) against the reference, bit for bit, on the
shapes that exercise its tile geometry: dense tensors tiled across rows (last tile short),
rows with a pitch and Q slices of a fused QKV buffer (tiles inside a row or a token), teams
of 1 to 256 lanes (group-16 fp32 .. per-token 8192 bf16, the cross-warp reduction), the
per-tensor modes (static; dynamic with the reversed visit), and tensors of many tiles per CTA
so that the 4-stage ring wraps many times. Each case also runs with the bulk kernel off (the
register kernels) and the two must agree."""

from __future__ import annotations

import pytest
import torch
from _fp8_cases import assert_same, make_input, run, run_ref

from hpc_common.fp8 import quant

# (mode, shape, group_size); shapes are [M, N] or [T, H, D] (per_head)
CASES = [
    ("per_token", (64, 4096), 128),      # 2 rows per tile, 128-lane teams
    ("per_token", (7, 2048), 128),       # 8 rows per tile, one short tile
    ("per_token", (33, 8192), 128),      # one row per tile, 256-lane team
    ("per_token", (5, 16384), 128),      # row longer than a tile: register kernel
    ("group", (1000, 512), 128),         # 4-lane teams, rotated shared-memory reads
    ("group", (37, 4096), 64),           # 2-lane teams
    ("group", (37, 4096), 32),           # 1-lane teams
    ("group", (37, 4096), 256),          # 8-lane teams
    ("group", (3, 48), 16),              # 16 fp8 bytes per segment: smallest bulk store
    ("group_col", (37, 1024), 128),      # column-major scales with padding rows
    ("group_col", (1, 4096), 128),
    ("per_head", (300, 32, 128), 128),   # dense: tiles across tokens
    ("per_tensor_static", (256, 2048), 128),
    ("per_tensor", (256, 2048), 128),    # amax kernel, then the bulk kernel in reverse
    ("per_tensor", (3, 40000), 128),     # 120000 % 2048 != 0: register kernel
]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _run_both(mode, x, group_size, ue8m0=False):
    kw = {} if mode in ("per_head", "per_tensor", "per_tensor_static", "per_token") else {"group_size": group_size}
    if mode != "per_tensor_static":
        kw["ue8m0"] = ue8m0
    before = quant.USE_BULK_KERNEL
    try:
        quant.USE_BULK_KERNEL = True
        bulk = run(mode, x, **kw)
        quant.USE_BULK_KERNEL = False
        reg = run(mode, x, **kw)
    finally:
        quant.USE_BULK_KERNEL = before
    return bulk, reg, kw


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode,shape,group_size", CASES, ids=lambda c: str(c))
def test_bulk_kernel_matches_reference(cuda, mode, shape, group_size, dtype):
    x = make_input(shape, dtype, seed=sum(shape) + group_size, device=cuda)
    ue8m0 = dtype == torch.float16 and mode != "per_tensor_static"
    bulk, reg, kw = _run_both(mode, x, group_size, ue8m0)
    want = run_ref(mode, x.cpu(), **kw)
    assert_same(bulk, want, what=f"bulk {mode} {shape} {dtype}")
    assert_same(reg, want, what=f"register {mode} {shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["per_token", "group", "per_head"])
def test_bulk_kernel_strided_rows_and_qkv_slices(cuda, mode):
    """Tiles stay inside a row (pitched rows) or a token (Q of a fused QKV buffer)."""
    if mode == "per_head":
        big = make_input((70, 48, 128), torch.bfloat16, 3, device=cuda)
        x = big[:, 8:40]  # heads contiguous, tokens 48 heads apart
    else:
        big = make_input((50, 4096 + 64), torch.bfloat16, 4, device=cuda)
        x = big[:, 64:]
    assert not x.is_contiguous()
    bulk, reg, kw = _run_both(mode, x, 128)
    want = run_ref(mode, x, **kw)
    assert_same(bulk, want, what=f"bulk {mode} strided")
    assert_same(reg, want, what=f"register {mode} strided")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["per_token", "group", "group_col", "per_head", "per_tensor",
                                  "per_tensor_static"])
def test_bulk_kernel_ring_wraps_on_large_tensors(cuda, mode):
    """64 MB of bf16: ~16 tiles per CTA, every ring stage and output buffer reused many times."""
    shape = (8192, 32, 128) if mode == "per_head" else (8192, 4096)
    x = make_input(shape, torch.bfloat16, 5, device=cuda)
    x.view(-1)[-1] = 3000.0  # the per-tensor maximum sits in the last tile
    bulk, reg, kw = _run_both(mode, x, 128)
    assert_same(bulk, run_ref(mode, x, **kw), what=f"bulk {mode} large")
    assert_same(reg, bulk, what=f"register == bulk {mode} large")


def test_bulk_kernel_default_follows_the_mode_list():
    """USE_BULK_KERNEL = None picks the bulk kernel per mode from BULK_KERNEL_MODES (CPU)."""
    before = (quant.USE_BULK_KERNEL, quant.BULK_KERNEL_MODES)
    try:
        quant.USE_BULK_KERNEL = None
        quant.BULK_KERNEL_MODES = frozenset({"per_token", "per_tensor_static"})
        assert quant._bulk_for(quant.PER_TOKEN, quant._SCALE_DYNAMIC)
        assert quant._bulk_for(quant.PER_TENSOR, quant._SCALE_STATIC)
        assert not quant._bulk_for(quant.PER_TENSOR, quant._SCALE_DYNAMIC)
        assert not quant._bulk_for(quant.PER_TOKEN_GROUP, quant._SCALE_DYNAMIC)
        assert not quant._bulk_for(quant.PER_TOKEN_HEAD, quant._SCALE_DYNAMIC)
        quant.USE_BULK_KERNEL = False
        assert not quant._bulk_for(quant.PER_TOKEN, quant._SCALE_DYNAMIC)
        quant.USE_BULK_KERNEL = True
        assert quant._bulk_for(quant.PER_TOKEN_GROUP, quant._SCALE_DYNAMIC)
    finally:
        quant.USE_BULK_KERNEL, quant.BULK_KERNEL_MODES = before


def test_group_wider_than_the_row_is_the_row():
    """A huge group_size is one group per row (seg_len is capped at N for the 32-bit kernels)."""
    x = torch.zeros(3, 40)
    geo = quant._geometry(x, torch.empty(3, 40), quant.PER_TOKEN_GROUP, 1 << 40)
    assert geo["seg_len"] == 40 and geo["segs_per_row"] == 1
