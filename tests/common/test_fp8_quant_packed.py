"""The packed-rows kernel (fp8_quant_packed.cuh) against the reference, bit for bit: dense rows at
any alignment with dynamic segment scales, the shapes the tile kernels do not take. Odd row lengths
(rows straddling 16-byte words, so CTAs share the words at their ends), group rows with a shorter
last segment, group sizes that are no power-of-two number of vectors, per-head inputs with an odd
head_dim, views whose x and out start at the same misalignment, one to ~1000 rows per CTA, NaN / Inf
and zero rows; each shape is also run on the register kernels it had before (USE_TILE_KERNEL off).
A profiler trace checks which kernel ran, so a shape that silently fell back would fail here."""

from __future__ import annotations

import zlib

import pytest
import torch
from _fp8_cases import assert_same, make_input, run, run_ref
from test_fp8_quant_bulk import switches

DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# (mode, shape, group_size); per_head shapes are [T, H, D]
PACKED_CASES = [
    ("per_token", (7, 4095), 128),      # two rows per CTA, rows not 16-byte aligned
    ("per_token", (33, 1001), 128),     # 8 rows per CTA, a short last CTA
    ("per_token", (300, 9), 128),       # ~900 rows per CTA: one vector spans two rows
    ("per_token", (5, 4104), 128),      # aligned, 513 vectors: no power-of-two team
    ("per_token", (2, 8), 128),         # one vector per row
    ("group", (9, 4095), 128),          # a 127-element last group per row
    ("group_col", (9, 4095), 128),      # column-major scales, padding rows
    ("group", (37, 1000), 96),          # 12-vector groups (bf16), 24 (fp32)
    ("group", (11, 777), 64),           # 9-element last group
    ("group_col", (40, 520), 128),      # aligned rows, an 8-element last group
    ("per_head", (50, 3, 127), 128),    # odd head_dim: heads straddle words
    ("per_head", (20, 8, 100), 128),
]
# Cases the packed kernel does not take (the register kernels do): a 1-7 element last segment, a row
# longer than one tile's cover.
FALLBACK_CASES = [
    ("group", (6, 135), 128),
    ("per_token", (3, 8185), 128),
]


def _kernel_names(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _kwargs(mode, group_size, ue8m0):
    kw = {"ue8m0": ue8m0}
    if mode in ("group", "group_col"):
        kw["group_size"] = group_size
    return kw


@pytest.mark.gpu
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32_scale", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode,shape,group_size", PACKED_CASES, ids=lambda c: str(c))
def test_packed_kernel_matches_reference(cuda, mode, shape, group_size, dtype, ue8m0):
    if dtype == torch.float32 and shape[-1] > 4088:
        shape = (*shape[:-1], shape[-1] // 2)  # a CTA's fp32 cover holds 4088 elements (4095 -> 2047)
    x = make_input(shape, dtype, seed=zlib.crc32(repr((mode, shape)).encode()) % 10_000, device=cuda)
    kw = _kwargs(mode, group_size, ue8m0)
    expected = run_ref(mode, x, **kw)
    names = _kernel_names(lambda: run(mode, x, **kw))
    assert any("fp8_quant_packed_kernel" in n for n in names), names
    assert_same(run(mode, x, **kw), expected, what=f"packed {mode} {shape}")
    with switches(USE_TILE_KERNEL=False):
        assert_same(run(mode, x, **kw), expected, what=f"register kernels {mode} {shape}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("offset", [1, 3, 7])
@pytest.mark.parametrize("mode", ["per_token", "group", "group_col"])
def test_packed_kernel_on_views_misaligned_alike(cuda, mode, offset, dtype):
    """x and out start `offset` elements / bytes into their buffers: the cover starts before the
    tensor (inside its first 16-byte word) and ends after it; the bytes around out stay as they were."""
    m, n = 13, 2047
    if dtype == torch.float32:
        offset %= 4
    src = make_input((m * n + 64,), dtype, seed=offset, device=cuda)
    x = src[offset:offset + m * n].view(m, n)
    out_buf = torch.full((m * n + 64,), 0x5A, dtype=torch.uint8, device=cuda)
    out = out_buf[offset:offset + m * n].view(torch.float8_e4m3fn).view(m, n)
    kw = _kwargs(mode, 128, False)
    names = _kernel_names(lambda: run(mode, x, out=out, **kw))
    assert any("fp8_quant_packed_kernel" in n for n in names), names
    q, s = run(mode, x, out=out, **kw)
    assert_same((q, s), run_ref(mode, x, **kw), what=f"view offset {offset}")
    assert bool((out_buf[:offset] == 0x5A).all()) and bool((out_buf[offset + m * n:] == 0x5A).all())


@pytest.mark.gpu
@pytest.mark.parametrize("mode,shape,group_size", FALLBACK_CASES, ids=lambda c: str(c))
def test_shapes_outside_the_packed_kernel_keep_the_register_kernels(cuda, mode, shape, group_size):
    x = make_input(shape, torch.bfloat16, seed=5, device=cuda)
    kw = _kwargs(mode, group_size, False)
    names = _kernel_names(lambda: run(mode, x, **kw))
    assert names and not any("fp8_quant_packed_kernel" in n for n in names), names
    assert_same(run(mode, x, **kw), run_ref(mode, x, **kw), what=f"{mode} {shape}")


@pytest.mark.gpu
def test_packed_kernel_poisoned_output_fully_overwritten(cuda):
    """Every output byte and scale is written: outputs start as NaN codes and NaN scales."""
    x = make_input((64, 4095), torch.bfloat16, seed=11, device=cuda)
    out = torch.full((64, 4095), 0x7F, dtype=torch.uint8, device=cuda).view(torch.float8_e4m3fn)
    scale = torch.full((64, 32), float("nan"), device=cuda)
    q, s = run("group", x, group_size=128, out=out, scale_out=scale)
    assert_same((q, s), run_ref("group", x, group_size=128), what="poisoned group")
