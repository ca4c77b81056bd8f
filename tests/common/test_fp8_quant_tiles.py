"""The tile kernels against the reference, bit for bit: the one-tile-per-CTA, column-tile and flat
kernels (fp8_quant_tile.cuh), on the shapes that exercise their tile geometry: dense tensors tiled
across rows (last tile short), rows with a pitch and Q slices of a fused QKV buffer (tiles inside a
row or a token), teams of 1 to 256 lanes (group-16 fp32 .. per-token 8192 bf16, the cross-warp
reduction), the per-tensor modes (static; dynamic with the reversed visit after the amax pass), and
shapes next to them that the register kernels take. Small grids (set_num_sms) make the amax pass's
few blocks cover many tiles."""

from __future__ import annotations

import pytest
import torch
from _fp8_cases import STATIC_SCALE, assert_same, kernel_names, make_input, run, run_ref

import hpc_common
from hpc_common.testing import assert_bitwise_equal


def _kwargs(mode, group_size, ue8m0=False):
    kw = {} if mode in ("per_head", "per_tensor", "per_tensor_static", "per_token") else {"group_size": group_size}
    if mode != "per_tensor_static":
        kw["ue8m0"] = ue8m0
    return kw


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


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode,shape,group_size", CASES, ids=lambda c: str(c))
def test_tile_kernels_match_reference(cuda, mode, shape, group_size, dtype):
    x = make_input(shape, dtype, seed=sum(shape) + group_size, device=cuda)
    kw = _kwargs(mode, group_size, dtype == torch.float16 and mode != "per_tensor_static")
    assert_same(run(mode, x, **kw), run_ref(mode, x.cpu(), **kw), what=f"{mode} {shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["per_token", "group", "per_head"])
def test_tile_kernels_strided_rows_and_qkv_slices(cuda, mode):
    """Tiles stay inside a row (pitched rows) or a token (Q of a fused QKV buffer)."""
    if mode == "per_head":
        big = make_input((70, 48, 128), torch.bfloat16, 3, device=cuda)
        x = big[:, 8:40]  # heads contiguous, tokens 48 heads apart
    else:
        big = make_input((50, 4096 + 64), torch.bfloat16, 4, device=cuda)
        x = big[:, 64:]
    assert not x.is_contiguous()
    kw = _kwargs(mode, 128)
    assert_same(run(mode, x, **kw), run_ref(mode, x, **kw), what=f"{mode} strided")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["per_token", "group", "group_col", "per_head", "per_tensor",
                                  "per_tensor_static"])
def test_tile_kernels_on_large_tensors(cuda, mode):
    """64 MB of bf16: millions of segments, the per-tensor maximum in the last tile."""
    shape = (8192, 32, 128) if mode == "per_head" else (8192, 4096)
    x = make_input(shape, torch.bfloat16, 5, device=cuda)
    x.view(-1)[-1] = 3000.0  # the per-tensor maximum sits in the last tile
    kw = _kwargs(mode, 128)
    assert_same(run(mode, x, **kw), run_ref(mode, x, **kw), what=f"{mode} large")


# (mode, shape, group_size, num_sms): few SMs, so the amax pass has few blocks.
SMALL_GRID_CASES = [
    ("per_tensor_static", (24, 2048), 128, 1),   # 6 tiles of 4 segments: 2 per CTA
    ("per_tensor_static", (256, 2048), 128, 1),  # 64 tiles: 22 / 21 / 21 per CTA
    ("per_tensor", (256, 2048), 128, 1),         # the same, reversed after the flat amax pass
    ("per_tensor", (250, 2048), 128, 2),         # 6 CTAs, 63 tiles, the last one short
    ("per_token", (97, 4096), 128, 1),           # 49 tiles of 2 rows, the last one short
    ("per_token", (5, 4096), 128, 3),            # 3 tiles on a 9-CTA wave: grid of 3
    ("per_token", (40, 8192), 128, 1),           # 256-lane teams (named barrier of 8 warps)
    ("group", (33, 4096), 128, 1),               # 4-lane teams, 1056 segments over 3 CTAs
    ("group_col", (45, 1024), 64, 2),            # column-major scales with padding rows
    ("per_head", (61, 8, 128), 128, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("mode,shape,group_size,num_sms", SMALL_GRID_CASES, ids=lambda c: str(c))
def test_tile_kernels_on_small_grids(cuda, mode, shape, group_size, num_sms):
    x = make_input(shape, torch.bfloat16, 7 + sum(shape), device=cuda)
    x.view(-1)[len(x.view(-1)) // 3] = 2500.0  # the per-tensor maximum in some middle tile
    hpc_common.set_num_sms(num_sms)
    try:
        kw = _kwargs(mode, group_size)
        got = run(mode, x, **kw)
    finally:
        hpc_common.set_num_sms(None)
    assert_same(got, run_ref(mode, x.cpu(), **kw), what=f"{mode} {shape} on {num_sms} SMs")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("shape", [(1, 5), (3, 4001), (64, 4096), (1, 8 * 4096 + 3)])
@pytest.mark.parametrize("pitched", [False, True])
def test_amax_passes_match_reference(cuda, dtype, shape, pitched):
    """Per-tensor dynamic: the flat amax kernel (contiguous tensors) and the segment-team amax kernel
    (rows with a pitch) give the reference's scale and bytes; the maximum in the scalar tail is seen."""
    big = make_input((shape[0], shape[1] + (64 if pitched else 0)), dtype, 11 + shape[1], device=cuda)
    x = big[:, :shape[1]]
    x[-1, -1] = 900.0
    assert_same(run("per_tensor", x), run_ref("per_tensor", x.cpu()), what=f"per-tensor {shape} {dtype} {pitched=}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("shape", [(1, 5), (3, 4001), (7, 1029), (64, 4096), (1, 8 * 4096 + 3), (513, 2048)])
def test_flat_static_kernel_matches_reference(cuda, dtype, shape):
    """Per-tensor static on a contiguous tensor takes the flat kernel: whole vectors on every CTA,
    the elements after the last whole vector (odd sizes) on the last CTA, a last CTA with fewer
    than 1024 vectors; saturating, NaN and signed-zero inputs come from make_input."""
    x = make_input(shape, dtype, 19 + shape[1], device=cuda)
    x.view(-1)[-1] = -1e6  # saturates, in the scalar tail when the size is odd
    assert_same(run("per_tensor_static", x), run_ref("per_tensor_static", x.cpu()), what=f"static {shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["per_token", "group", "per_tensor_static"])
def test_tile_kernels_under_pdl_and_graph_replay(cuda, mode):
    """The short-lived-CTA kernels launched with PDL after a kernel that writes their input, eagerly
    and replayed from a CUDA graph with new input values, equal the reference."""
    x = make_input((300, 4096), torch.bfloat16, 23, device=cuda)
    src = make_input((300, 4096), torch.bfloat16, 29, device=cuda)
    kw = {"group_size": 128} if mode == "group" else {}
    if mode == "per_tensor_static":  # made before the capture: no host-to-device copy inside it
        kw["static_scale"] = torch.tensor([STATIC_SCALE], device=cuda)
    ref_kw = {k: v.cpu() if torch.is_tensor(v) else v for k, v in kw.items()}
    with hpc_common.pdl_enabled(True):
        def step():
            x.copy_(src.mul(2.0))  # the producer kernel the quantiser depends on
            return run(mode, x, **kw)

        assert_same(step(), run_ref(mode, (src * 2.0).cpu(), **ref_kw), what=f"{mode} eager pdl")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
        src.copy_(make_input((300, 4096), torch.bfloat16, 31, device=cuda))
        g.replay()
        torch.cuda.synchronize()
        assert_same(out, run_ref(mode, (src * 2.0).cpu(), **ref_kw), what=f"{mode} graph replay pdl")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("m,n,group_size,pitch", [(45, 4096, 128, 64), (8, 2048, 64, 8), (3, 1024, 32, 4),
                                                  (1000, 1024, 128, 1000), (17, 8192, 16, 20),
                                                  (37, 1536, 128, 40), (9, 768, 128, 12), (20, 1280, 64, 24),
                                                  (5, 384, 128, 8)])
def test_column_major_scales_into_a_callers_pitch(cuda, dtype, m, n, group_size, pitch):
    """Column-major group scales written into the caller's scale_out of any pitch >= M (the
    column-tile kernel: 8-row blocks, the last one partial; padding rows past the last row block as
    well as inside it are zeroed; 12, 6 and 20 groups per row take tiles of 4, 2 and 4 groups, 3
    groups the tile kernel), from rows with a pitch of their own, agree with the reference, whose
    padding rows are zeros too."""
    big = make_input((m, n + 256), dtype, 41 + m, device=cuda)
    x = big[:, 128:128 + n]
    want_q, want_s = run_ref("group", x.cpu(), group_size=group_size)
    g = n // group_size
    storage = torch.full((g, pitch), float("nan"), dtype=torch.float32, device=cuda)
    scale_out = storage.t()[:m]
    q, s = run("group_col", x, group_size=group_size, scale_out=scale_out)
    assert s.data_ptr() == storage.data_ptr()
    what = f"col pitch {pitch} {dtype}"
    assert_bitwise_equal(q.view(torch.uint8).cpu(), want_q.view(torch.uint8), name=f"{what} q")
    assert_bitwise_equal(s.contiguous().cpu(), want_s.contiguous(), name=f"{what} scale")
    pad = storage[:, m:].cpu()
    assert bool((pad == 0).all()), f"padding rows {m}..{pitch} not zeroed: {pad}"


@pytest.mark.gpu
@pytest.mark.parametrize("column_major,kernel", [(True, "fp8_quant_col_tile_kernel"), (False, "fp8_quant_tile_kernel")])
def test_group_counts_off_the_full_column_tile(cuda, column_major, kernel):
    """12 groups of 128 per row (N = 1536): column-major scales take column tiles of 4 groups, row-major
    scales the tile kernel (the profiler names the kernel that ran)."""
    x = make_input((50, 1536), torch.bfloat16, seed=8, device=cuda)
    mode = "group_col" if column_major else "group"
    names = kernel_names(lambda: run(mode, x, group_size=128))
    assert any(kernel + "<" in n for n in names), names
    assert_same(run(mode, x, group_size=128), run_ref(mode, x, group_size=128), what=f"{mode} 1536")
