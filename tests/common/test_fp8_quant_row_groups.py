"""The row-group kernel (fp8_quant_row_groups.cuh, quant.USE_ROW_GROUP_KERNEL; experimental, off
by default): rows whose starts are not 16-byte aligned, one warp per row, group maxima across
vectors that straddle a group boundary. Bitwise against the reference, and against the default
path, on odd row lengths, group sizes of whole vectors and others, column-major scales, ue8m0,
all three input dtypes, special values, and a storage offset."""

from __future__ import annotations

import pytest
import torch
from _fp8_cases import assert_same, make_input, run, run_ref

from hpc_common.fp8 import quant


# (mode, shape, group_size): every row start misaligned (odd N), groups straddling vectors. The
# kernel takes rows of up to 512 vectors (4096 bf16 / fp16, 2048 fp32 elements) and 64 groups;
# longer fp32 rows here check the fallback.
CASES = [
    ("group", (64, 4095), 128),
    ("group", (33, 4097), 128),
    ("group", (17, 1001), 64),
    ("group", (9, 505), 8),          # 64 groups of one bf16 vector: a boundary in most vectors
    ("group", (5, 999), 100),        # groups that are not a whole number of vectors
    ("group", (3, 255), 128),        # last group shorter than the scalar head's complement
    ("group_col", (37, 4095), 128),  # column-major scales with padding rows
    ("per_token", (64, 4095), 128),  # one group per row
    ("per_token", (2, 3), 128),      # shorter than a vector: head only
]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode,shape,group_size", CASES, ids=lambda c: str(c))
def test_row_group_kernel_matches_reference(cuda, mode, shape, group_size, dtype, monkeypatch):
    x = make_input(shape, dtype, seed=sum(shape) + group_size, device=cuda)
    kw = {} if mode == "per_token" else {"group_size": group_size}
    kw["ue8m0"] = dtype == torch.float16
    want = run_ref(mode, x.cpu(), **kw)
    for on in (True, False):
        monkeypatch.setattr(quant, "USE_ROW_GROUP_KERNEL", on)
        got = run(mode, x, **kw)
        assert_same(got, want, what=f"row groups {on} {mode} {shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [8, 24])
def test_row_group_kernel_with_a_storage_offset(cuda, offset, monkeypatch):
    """x a view `offset` elements into its storage (x and the contiguous output stay misaligned
    alike, as the peeled path needs: the offset is a whole number of vectors), odd N."""
    flat = make_input((40 * 4095 + 64,), torch.bfloat16, 11 + offset, device=cuda)
    x = flat[offset:offset + 40 * 4095].view(40, 4095)
    want = run_ref("group", x.cpu(), group_size=128)
    monkeypatch.setattr(quant, "USE_ROW_GROUP_KERNEL", True)
    got = run("group", x, group_size=128)
    assert_same(got, want, what=f"row groups, storage offset {offset}")
