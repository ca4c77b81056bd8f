"""Which FP8 quantisation kernel serves a call: pure functions of the shapes, strides and data
pointers (alignment is a property of the pointers), no module state.

The Python side decides the geometry (how rows split into scale segments) and the vector path
(whether every segment start is 16-byte aligned, or misaligned alike in x and q so that a scalar
head per segment makes the rest aligned). The launcher (csrc/fp8_quant.cu, fp8_quant_tile_launch.cuh)
then picks the kernel from these fields alone: tile kernels where segments cut into 16 KB tiles or
rows of 4-4096 vectors, the short-segment and generic register kernels elsewhere, the scalar kernel
off the vector path. tests/common/test_fp8_dispatch.py runs that choice on the CPU for these very
fields. The measurements behind each kernel are in the hpc-common README's FP8 section and in the
comments of fp8_quant_tile.cuh.
"""

from __future__ import annotations

import math

import torch

# Modes (the int `quant_mode` of the custom op).
PER_TENSOR, PER_TOKEN, PER_TOKEN_GROUP, PER_TOKEN_HEAD = 0, 1, 2, 3
SCALE_DYNAMIC, SCALE_STATIC = 0, 1
DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
# Per-tensor modes have no per-segment scale: segments only split the work. 2048 elements
# give 64 (bf16) or 128 (fp32) threads per segment, each holding four 16-byte vectors.
PER_TENSOR_SEG = 2048


def geometry(x: torch.Tensor, out: torch.Tensor, mode: int, group_size: int) -> dict:
    """Rows, heads and segments of a call (QuantParams' geometry fields)."""
    if mode == PER_TOKEN_HEAD:
        t, h, d = x.shape
        return dict(rows=t * h, heads=h, row_len=d, seg_len=d, segs_per_row=1,
                    x_stride_t=x.stride(0), x_stride_h=x.stride(1),
                    q_stride_t=out.stride(0), q_stride_h=out.stride(1))
    m, n = x.shape
    if mode == PER_TENSOR and x.is_contiguous():
        rows, row_len = 1, m * n  # one flat row: vectorised even when n is odd
    else:
        rows, row_len = m, n
    # A group wider than the row is the row (same scales); this keeps seg_len <= N.
    seg = {PER_TENSOR: PER_TENSOR_SEG, PER_TOKEN: max(n, 1), PER_TOKEN_GROUP: min(group_size, max(n, 1))}[mode]
    return dict(rows=rows, heads=1, row_len=row_len, seg_len=seg, segs_per_row=math.ceil(row_len / seg),
                x_stride_t=x.stride(0) if rows > 1 else row_len, x_stride_h=0,
                q_stride_t=out.stride(0) if rows > 1 else row_len, q_stride_h=0)


def vector_path(x: torch.Tensor, out: torch.Tensor, geo: dict) -> tuple[bool, bool]:
    """(vectorized, peel). Vectorized: every segment start 16-byte aligned in x and VEC-byte
    aligned in out (VEC = 16 bytes of x's elements). Else peel when x and out are misaligned alike
    (x's element address and out's byte address agree modulo VEC at every segment start): the
    kernel takes each segment's first elements up to a 16-byte boundary one by one, the rest as
    vectors (odd N, column offsets). Neither: the scalar path."""
    vec = 16 // x.element_size()
    offs = []  # element offsets between segment starts, in x and in out
    if geo["rows"] > geo["heads"]:
        offs.append((geo["x_stride_t"], geo["q_stride_t"]))
    if geo["heads"] > 1:
        offs.append((geo["x_stride_h"], geo["q_stride_h"]))
    if geo["segs_per_row"] > 1:
        offs.append((geo["seg_len"], geo["seg_len"]))
    if (x.data_ptr() % 16 == 0 and out.data_ptr() % vec == 0
            and all(a % vec == 0 and b % vec == 0 for a, b in offs)):
        return True, False
    x_elem = x.data_ptr() // x.element_size()
    if (x.data_ptr() % x.element_size() == 0
            and (x_elem - out.data_ptr()) % vec == 0 and all((a - b) % vec == 0 for a, b in offs)):
        return True, True
    return False, False


def launch_fields(x: torch.Tensor, out: torch.Tensor, scale_out: torch.Tensor | None, mode: int,
                  group_size: int, scale_source: int) -> dict:
    """Every QuantParams field that decides the kernel (geometry, alignment, scale layout; no
    pointers), so tests/common/test_fp8_dispatch.py checks the choice on CPU tensors with these
    very values."""
    geo = geometry(x, out, mode, group_size)
    vectorized, peel = vector_path(x, out, geo)
    if mode == PER_TOKEN_GROUP and scale_out is not None:
        s_row, s_seg = scale_out.stride(0), scale_out.stride(1)
    else:
        s_row, s_seg = 1, 0  # per-token [M, 1], per-head [T, H, 1]: scale index = row
    return dict(scale_stride_row=s_row, scale_stride_seg=s_seg, dtype=DTYPE_CODE[x.dtype],
                scale_source=scale_source, per_tensor_dynamic=mode == PER_TENSOR and scale_source == SCALE_DYNAMIC,
                vectorized=vectorized, peel=peel, **geo)
