"""The row forms of the tile kernels against the reference, bit for bit. The row tile kernel
(fp8_quant_row_tile_kernel in fp8_quant_tile.cuh): per-token and per-head rows whose vector count is
no power of two (hidden sizes 2880, 5120, 7168), so a lane's last vectors may lie past its row's end;
teams of 2 lanes to 8 warps (power-of-two teams reduce by shuffles, warp multiples through shared
memory); several rows per CTA and one. The long row kernel (fp8_quant_long_row_kernel, same body):
rows of 1025 to 4096 vectors (MLP intermediates 12288-32768), one per CTA, 6, 7 or 16 vectors per lane;
rows of 1793-3584 vectors on the 512-thread wide row kernel (fp8_quant_wide_row_kernel, 7 per lane).
Group rows the tile kernels do not take (a shorter last group, group lengths that are no
power-of-two vector count) take the cover form: each team locates its segment and reads its aligned
cover, a partial last vector masked and stored byte-exact (segments of whole vectors take the cover
kernel without that code). Odd rows (not 16-byte aligned) keep the
register kernels. Dense tensors and rows with a pitch; NaN / Inf and zero rows. A profiler trace checks
which kernel ran, so a shape that silently fell back would fail here."""

from __future__ import annotations

import zlib

import pytest
import torch
from _fp8_cases import assert_same, kernel_names, make_input, run, run_ref

KERNEL = "fp8_quant_row_tile_kernel"
LONG_KERNEL = "fp8_quant_long_row_kernel"
WIDE_KERNEL = "fp8_quant_wide_row_kernel"
ODD_KERNEL = "fp8_quant_odd_row_tile_kernel"
ODD_GROUP_KERNEL = "fp8_quant_odd_group_row_kernel"


def odd_kernel(n: int, group_size: int, dtype) -> str:
    """The kernel odd group rows take: group-128 rows of 2-byte inputs with 8-256 groups one row per CTA
    (fp8_quant_odd_group_rows.cuh, odd_group_rows_applicable), the others the misaligned covers."""
    ng = -(-n // group_size)
    return ODD_GROUP_KERNEL if dtype != torch.float32 and group_size == 128 and 8 <= ng <= 256 else ODD_KERNEL


# (mode, shape) per vector width: bf16 / fp16 hold 8 elements per vector, fp32 4.
ROW_CASES_16BIT = [
    ("per_token", (37, 2880)),      # 360 vectors: 96-lane teams, one row per CTA (HPC_FP8_ROW_TILE_ONE_ROW)
    ("per_token", (9, 5120)),       # 640 vectors: 160 lanes, one row per CTA
    ("per_token", (5, 7168)),       # 896 vectors: 224 lanes
    ("per_token", (3, 8184)),       # 1023 vectors: 256 lanes
    ("per_token", (70, 1000)),      # 125 vectors: 32-lane teams, 8 rows per CTA
    ("per_token", (300, 40)),       # 5 vectors: 2-lane teams, 128 rows per CTA
    ("per_token", (1, 2880)),
    ("per_token", (33, 1536)),      # 192 vectors: 64 lanes x 3 vectors (row_tile_three; 4 would leave 1 in 4 empty)
    ("per_token", (20, 768)),       # 96 vectors: 32 lanes x 3
    ("per_head", (20, 6, 96)),      # 12 vectors per head: 4-lane teams
    ("per_head", (7, 3, 200)),      # 25 vectors: 8-lane teams
]
ROW_CASES_FP32 = [
    ("per_token", (37, 2880)),      # 720 vectors: 192 lanes
    ("per_token", (11, 3580)),      # 895 vectors: 224 lanes
    ("per_token", (70, 1000)),      # 250 vectors: 64 lanes, one row per CTA
    ("per_token", (300, 20)),       # 5 vectors
    ("per_token", (20, 768)),       # 192 vectors: 64 lanes x 3
    ("per_head", (20, 6, 96)),      # 24 vectors: 8-lane teams
]
# Rows of more than 1024 vectors (row_tile_vpt): 6 or 7 vectors per lane on up to 256 lanes up to 1792 vectors,
# then 7 per lane on the 512-thread kernel up to 3584, then 16 per lane.
LONG_CASES_16BIT = [
    ("per_token", (3, 8200), LONG_KERNEL),       # 1025 vectors: 6 per lane, 171 lanes
    ("per_token", (5, 14336), LONG_KERNEL),      # 1792: 7 per lane, 256 lanes
    ("per_token", (4, 18432), WIDE_KERNEL),      # 2304: 7 per lane, 330 lanes
    ("per_token", (2, 28672), WIDE_KERNEL),      # 3584: 7 per lane, 512 lanes
    ("per_token", (2, 32768), LONG_KERNEL),      # 4096: 16 per lane, 256 lanes
    ("per_head", (3, 2, 9000), LONG_KERNEL),     # 1125 per head: 6 per lane
]
LONG_CASES_FP32 = [
    ("per_token", (3, 4100), LONG_KERNEL),       # 1025 vectors
    ("per_token", (2, 14336), WIDE_KERNEL),      # 3584
]
CASES = ([(m, s, d, KERNEL) for m, s in ROW_CASES_16BIT for d in (torch.bfloat16, torch.float16)]
         + [(m, s, torch.float32, KERNEL) for m, s in ROW_CASES_FP32]
         + [(m, s, d, k) for m, s, k in LONG_CASES_16BIT for d in (torch.bfloat16, torch.float16)]
         + [(m, s, torch.float32, k) for m, s, k in LONG_CASES_FP32])


def _check(mode, x, ue8m0, what, kernel=KERNEL, **kw):
    """`kernel` ran (profiler) and equals the reference bit for bit."""
    kw["ue8m0"] = ue8m0
    expected = run_ref(mode, x, **kw)
    names = kernel_names(lambda: run(mode, x, **kw))
    assert any(kernel in n for n in names), names
    assert_same(run(mode, x, **kw), expected, what=f"row tile {what}")


@pytest.mark.gpu
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32_scale", "ue8m0"])
@pytest.mark.parametrize("mode,shape,dtype,kernel", CASES, ids=lambda c: str(c).replace("torch.", ""))
def test_row_kernels_match_reference(cuda, mode, shape, dtype, kernel, ue8m0):
    x = make_input(shape, dtype, seed=zlib.crc32(repr((mode, shape)).encode()) % 10_000, device=cuda)
    _check(mode, x, ue8m0, f"{mode} {shape} {dtype}", kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32), ids=lambda d: str(d).replace("torch.", ""))
def test_row_tile_kernel_on_rows_with_a_pitch(cuda, dtype):
    """Rows of 2880 inside a 3072-wide buffer (per-token, and group-128 with a 64-element last group)
    and the Q heads of a fused QKV buffer: tiles located
    through the geometry (one run per row / per token), not the dense fast path."""
    big = make_input((33, 3072), dtype, seed=3, device=cuda)
    _check("per_token", big[:, :2880], False, "pitched rows")
    qkv = make_input((21, 8 * 96), dtype, seed=4, device=cuda)
    _check("per_head", qkv.view(21, 8, 96)[:, :4], False, "QKV slice")
    rows = make_input((9, 3072), dtype, seed=7, device=cuda)[:, :2880]
    expected = run_ref("group", rows, group_size=128)
    assert any(KERNEL in n for n in kernel_names(lambda: run("group", rows, group_size=128)))
    assert_same(run("group", rows, group_size=128), expected, what="pitched group rows")
    long = make_input((5, 16384 + 512), dtype, seed=6, device=cuda)
    # 2048 vectors (bf16: the 512-thread kernel) / 4096 (fp32: 16 per lane)
    _check("per_token", long[:, :16384], False, "pitched long rows", WIDE_KERNEL if dtype == torch.bfloat16 else LONG_KERNEL)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,shape", [("per_token", (2, 32776)), ("per_token", (7, 4095)), ("per_token", (3, 8191)),
                                        ("per_head", (20, 6, 97)), ("per_token", (4, 4096))])
def test_rows_outside_the_row_kernels_keep_their_kernels(cuda, mode, shape):
    """Rows of more than 4096 vectors, odd rows (not 16-byte aligned: the register kernels' peeled
    path) and power-of-two rows (the tile kernel) take neither row form."""
    x = make_input(shape, torch.bfloat16, seed=5, device=cuda)
    names = kernel_names(lambda: run(mode, x))
    assert names and not any(k in n for k in (KERNEL, LONG_KERNEL, WIDE_KERNEL, ODD_KERNEL) for n in names), names
    assert_same(run(mode, x), run_ref(mode, x), what=f"{mode} {shape}")


# (mode, shape, scale columns, seed): the row tile kernel, and odd group rows, whose first and last
# words of every group are written by two teams, byte-exact.
POISON_CASES = [("per_token", (64, 7168), 1, 11), ("group", (64, 4095), 32, 12)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode,shape,scale_cols,seed", POISON_CASES, ids=lambda c: str(c))
def test_row_kernels_poisoned_output_fully_overwritten(cuda, mode, shape, scale_cols, seed):
    """With the output and the scales poisoned beforehand, every byte still comes out as the reference's."""
    x = make_input(shape, torch.bfloat16, seed=seed, device=cuda)
    out = torch.full(shape, 0x7F, dtype=torch.uint8, device=cuda).view(torch.float8_e4m3fn)
    scale = torch.full((shape[0], scale_cols), float("nan"), device=cuda)
    q, s = run(mode, x, out=out, scale_out=scale)
    assert_same((q, s), run_ref(mode, x), what=f"poisoned {mode} {shape}")


# Group rows on the cover form: (mode, shape, group_size) per vector width.
GROUP_CASES_16BIT = [
    ("group", (11, 2880, 128)),     # 22 groups and a 64-element one (gpt-oss hidden size)
    ("group_col", (11, 2880, 128)),
    ("group", (37, 1000, 96)),      # 12-vector groups and a 40-element tail
    ("group_col", (37, 1000, 96)),
    ("group", (20, 1032, 128)),     # an 8-element last group: one vector
    # A last group ending inside a vector (the partial-vector cover kernel; the cases above are whole vectors,
    # row_tile_partial_vectors): with a contiguous output only one row keeps every group start aligned.
    ("group", (1, 1004, 128)),      # a 108-element last group: 13.5 vectors
    ("group_col", (1, 4100, 128)),
    # Wide groups: teams as wide as the covers' 64-thread CTAs or wider, one segment per CTA (prepare_row_tiles).
    ("group", (5, 3000, 2048)),     # 256-vector groups: 64-lane teams
    ("group", (3, 6000, 4096)),     # 128-lane teams
    ("group_col", (2, 9000, 8192)),  # 256-lane teams
]
GROUP_CASES_FP32 = [
    ("group", (11, 2880, 128)),     # 32-vector groups: 8-lane teams
    ("group_col", (9, 1000, 128)),  # a 104-element tail: 26 vectors
    ("group", (1, 1002, 128)),      # a 106-element last group: 26.5 vectors (partial-vector kernel)
]
def _with_dtypes(cases_16bit, cases_fp32):
    """(mode, shape, dtype) cases: the 16-bit shapes in bf16 and fp16, the fp32 shapes in fp32."""
    return ([(m, s, d) for m, s in cases_16bit for d in (torch.bfloat16, torch.float16)]
            + [(m, s, torch.float32) for m, s in cases_fp32])


GROUP_CASES = _with_dtypes(GROUP_CASES_16BIT, GROUP_CASES_FP32)


@pytest.mark.gpu
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32_scale", "ue8m0"])
@pytest.mark.parametrize("mode,shape,dtype", GROUP_CASES, ids=lambda c: str(c).replace("torch.", ""))
def test_group_rows_on_covers_match_reference(cuda, mode, shape, dtype, ue8m0):
    m, n, group_size = shape
    x = make_input((m, n), dtype, seed=zlib.crc32(repr((mode, shape)).encode()) % 10_000, device=cuda)
    _check(mode, x, ue8m0, f"covers {mode} {shape} {dtype}", group_size=group_size)



# Odd group rows (not 16-byte aligned, x and q misaligned alike): group-128 rows of 8-256 groups on the one-row
# kernel (a row's cover, four lanes per group), the others on the misaligned cover form, whose teams keep their
# lanes and give lane 0 the cover's extra vector. (mode, (M, N, group size)).
ODD_GROUP_CASES_16BIT = [
    ("group", (33, 4095, 128)),     # every row start misalignment 0..7; a 127-element last group
    ("group_col", (33, 4095, 128)),
    ("group", (17, 1001, 128)),     # 8 groups (one warp), a 105-element last group
    ("group", (19, 1151, 128)),     # 9 groups: 36 lanes of a 64-thread CTA
    ("group_col", (11, 4097, 128)),  # a one-element last group on lane 128 (160 threads)
    ("group", (4, 32767, 128)),     # 256 groups: 1024 threads
    ("group", (40, 1001, 64)),      # 8-vector groups (2-lane teams) and a 41-element last group
    ("group", (9, 263, 128)),       # 2 groups and a 7-element one
    ("group_col", (5, 129, 128)),   # a one-element last group
    ("group", (5, 4095, 2048)),     # 64-lane teams, 2 per 128-thread CTA
    ("group", (3, 8191, 4096)),     # 128-lane teams: one per CTA
]
ODD_GROUP_CASES_FP32 = [
    ("group", (33, 1023, 128)),     # 32-vector groups (8-lane teams), 33 with the extra vector
    ("group_col", (17, 1021, 64)),
]
ODD_GROUP_CASES = _with_dtypes(ODD_GROUP_CASES_16BIT, ODD_GROUP_CASES_FP32)


@pytest.mark.gpu
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32_scale", "ue8m0"])
@pytest.mark.parametrize("mode,shape,dtype", ODD_GROUP_CASES, ids=lambda c: str(c).replace("torch.", ""))
def test_odd_group_rows_match_reference(cuda, mode, shape, dtype, ue8m0):
    m, n, group_size = shape
    x = make_input((m, n), dtype, seed=zlib.crc32(repr((mode, shape, "odd")).encode()) % 10_000, device=cuda)
    _check(mode, x, ue8m0, f"odd rows {mode} {shape} {dtype}", odd_kernel(n, group_size, dtype), group_size=group_size)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,pitch,n,group_size", [(torch.bfloat16, 4103, 4095, 128),
                                                      (torch.float16, 1005, 997, 64),
                                                      (torch.float32, 1027, 1023, 128)],
                         ids=lambda c: str(c).replace("torch.", ""))
def test_odd_group_rows_with_a_pitch(cuda, dtype, pitch, n, group_size):
    """Odd group rows of x inside a wider buffer (pitch = n modulo a vector, so x and the contiguous out
    are misaligned alike, but x's rows are not back to back): each row's cover is read from x's own row
    and the vector two rows share in out is written by both, byte-exact (the one-row kernel, bf16) or
    merged by the odd-row kernel's teams (fp16 group 64, fp32). Poisoned output and scales, compared with
    the reference."""
    m = 37
    x = make_input((m, pitch), dtype, seed=pitch, device=cuda)[:, :n]
    names = kernel_names(lambda: run("group", x, group_size=group_size))
    assert any(odd_kernel(n, group_size, dtype) in name for name in names), names
    out = torch.full((m, n), 0x7F, dtype=torch.uint8, device=cuda).view(torch.float8_e4m3fn)
    scale = torch.full((m, -(-n // group_size)), float("nan"), device=cuda)
    q, s = run("group", x, group_size=group_size, out=out, scale_out=scale)
    assert_same((q, s), run_ref("group", x, group_size=group_size), what=f"pitched odd rows {dtype}")
