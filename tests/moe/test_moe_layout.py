"""The prepared weight layout (hpc_moe.layout) on the CPU: round trips, and an emulation of what the
kernels do with it. The emulator builds each mma.sync operand from the bytes a lane loads, places
its elements by the PTX ISA's fragment tables (m16n8k16 BF16, m16n8k32 E4M3: row/column of a_i, b_i,
c_i from groupID = lane / 4 and threadID_in_group = lane % 4) and multiplies: the result must be
the plain matmul of the unprepared weights."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc_moe import layout

FP8 = torch.float8_e4m3fn


def _weights(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(*shape, generator=g) * 0.5
    return w.to(dtype)


# ---- PTX fragment tables ----------------------------------------------------------------------
def _a_pos(i: int, lane: int, fp8: bool) -> tuple[int, int]:
    g, q = lane // 4, lane % 4
    if fp8:  # a0..a15, 4 per register
        row = g if (i < 4 or 8 <= i < 12) else g + 8
        col = 4 * q + (i & 3) + (16 if i >= 8 else 0)
    else:  # a0..a7, 2 per register
        row = g if i in (0, 1, 4, 5) else g + 8
        col = 2 * q + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def _b_pos(i: int, lane: int, fp8: bool) -> tuple[int, int]:
    g, q = lane // 4, lane % 4
    if fp8:
        return 4 * q + (i & 3) + (16 if i >= 4 else 0), g
    return 2 * q + (i & 1) + (8 if i >= 2 else 0), g


def _elems(b16: torch.Tensor, dtype) -> torch.Tensor:
    """16 (or 8 for fp8-as-bf16 A) bytes -> float values in register order."""
    return b16.contiguous().view(dtype).float()


def _mma_emulate(a_lane_steps, b_lane_steps, fp8: bool) -> torch.Tensor:
    """a_lane_steps[s][lane]: element values of A in register order; b_lane_steps[s][lane] likewise
    for B. Returns C [16, 8] = sum over steps of A_s @ B_s."""
    k = 32 if fp8 else 16
    c = torch.zeros(16, 8, dtype=torch.float64)
    for a_s, b_s in zip(a_lane_steps, b_lane_steps):
        A = torch.full((16, k), float("nan"), dtype=torch.float64)
        B = torch.full((k, 8), float("nan"), dtype=torch.float64)
        for lane in range(32):
            for i, v in enumerate(a_s[lane]):
                A[_a_pos(i, lane, fp8)] = v
            for i, v in enumerate(b_s[lane]):
                B[_b_pos(i, lane, fp8)] = v
        assert not A.isnan().any() and not B.isnan().any()
        c += A @ B
    return c


def _b_fragments(x_rows_bytes: torch.Tensor, dtype, group: int) -> list:
    """B operand of both steps of one 64-byte group: lane (g, q) loads bytes [16q, 16q+16) of the
    group from token column g; step s takes words 2s, 2s+1."""
    steps = [[None] * 32, [None] * 32]
    for lane in range(32):
        g, q = lane // 4, lane % 4
        v = x_rows_bytes[g, 64 * group + 16 * q: 64 * group + 16 * q + 16]
        for s in range(2):
            steps[s][lane] = _elems(v[8 * s: 8 * s + 8], dtype).tolist()
    return steps


@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8])
@pytest.mark.parametrize("H,I", [(128, 64), (256, 192)])
def test_gate_up_fragments_multiply_like_the_weights(dtype, H, I):
    fp8 = dtype == FP8
    E = 2
    w13 = _weights((E, 2 * I, H), dtype, 1)
    x = _weights((8, H), dtype, 2)
    w13p = layout.prepare_w13(w13, "fp8_block" if fp8 else "bf16")
    assert w13p.shape == (E, I // 8, 16 * H) and w13p.dtype == dtype
    xb = x.view(torch.uint8)
    groups = xb.shape[1] // 64
    for e in range(E):
        for t in (0, I // 8 - 1):
            tile = w13p[e, t].view(torch.uint8)
            a_steps, b_steps = [], []
            for grp in range(groups):
                bf = _b_fragments(xb, dtype, grp)
                for s in range(2):
                    base = (grp * 2 + s) * 512
                    a_steps.append([_elems(tile[base + 16 * l: base + 16 * l + 16], dtype).tolist()
                                    for l in range(32)])
                    b_steps.append(bf[s])
            c = _mma_emulate(a_steps, b_steps, fp8)
            rows = torch.cat([w13[e, 8 * t: 8 * t + 8], w13[e, I + 8 * t: I + 8 * t + 8]]).double()
            ref = rows @ x.double().T
            torch.testing.assert_close(c, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8])
def test_down_fragments_multiply_like_the_weights(dtype):
    fp8 = dtype == FP8
    E, H, I = 2, 128, 192
    w2 = _weights((E, H, I), dtype, 3)
    inter = _weights((8, I), torch.bfloat16, 4)  # the BF16 intermediate, B operand
    w2p = layout.prepare_w2(w2, "fp8_block" if fp8 else "bf16")
    assert w2p.shape == (E, H // 16, 16 * I) and w2p.dtype == dtype
    ib = inter.view(torch.uint8)
    for e in range(E):
        for u in (0, H // 16 - 1):
            tile = w2p[e, u].view(torch.uint8)
            a_steps, b_steps = [], []
            for grp in range(I // 32):
                bf = _b_fragments(ib, torch.bfloat16, grp)
                for s in range(2):
                    if fp8:  # 16 bytes per lane per group: step 0's 8 E4M3 values, then step 1's
                        a = [_elems(tile[grp * 512 + 16 * l + 8 * s: grp * 512 + 16 * l + 8 * s + 8], FP8).tolist()
                             for l in range(32)]
                    else:
                        base = (grp * 2 + s) * 512
                        a = [_elems(tile[base + 16 * l: base + 16 * l + 16], torch.bfloat16).tolist()
                             for l in range(32)]
                    a_steps.append(a)
                    b_steps.append(bf[s])
            c = _mma_emulate(a_steps, b_steps, False)  # the FP8 weights become a BF16 fragment
            ref = w2[e, 16 * u: 16 * u + 16].double() @ inter.double().T
            torch.testing.assert_close(c, ref, rtol=1e-9, atol=1e-9)


@settings(deadline=None, max_examples=20)
@given(E=st.integers(1, 3), h_blocks=st.integers(1, 3), i_64=st.integers(1, 4),
       fp8=st.booleans(), seed=st.integers(0, 2**16))
def test_round_trips(E, h_blocks, i_64, fp8, seed):
    H, I = 128 * h_blocks, 64 * i_64
    dtype = FP8 if fp8 else torch.bfloat16
    quant = "fp8_block" if fp8 else "bf16"
    w13 = _weights((E, 2 * I, H), dtype, seed)
    w2 = _weights((E, H, I), dtype, seed + 1)
    back13 = layout.unprepare_w13(layout.prepare_w13(w13, quant), quant, I, H)
    back2 = layout.unprepare_w2(layout.prepare_w2(w2, quant), quant, H, I)
    assert torch.equal(back13.view(torch.uint8), w13.view(torch.uint8))
    assert torch.equal(back2.view(torch.uint8), w2.view(torch.uint8))
    if fp8:
        g = torch.Generator().manual_seed(seed)
        s13 = torch.rand(E, -(-2 * I // 128), H // 128, generator=g) + 0.5
        s2 = torch.rand(E, H // 128, -(-I // 128), generator=g) + 0.5
        p13 = layout.prepare_w13_scale(s13, "fp8_block", I, H)
        assert p13.shape == (E, I // 8, H // 128, 2)
        assert torch.equal(layout.unprepare_w13_scale(p13, I, H), s13)
        p2 = layout.prepare_w2_scale(s2, "fp8_block", H, I)
        assert torch.equal(layout.unprepare_w2_scale(p2), s2)
        deq = layout.dequantize_w13(layout.prepare_w13(w13, quant), p13, I, H)
        rows = s13.repeat_interleave(128, 1)[:, :2 * I].repeat_interleave(128, 2)
        assert torch.equal(deq, w13.float() * rows)
        deq2 = layout.dequantize_w2(layout.prepare_w2(w2, quant), p2, H, I)
        assert torch.equal(deq2, w2.float() * s2.repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :, :I])


def test_per_tensor_scales_expand():
    E, H, I = 3, 256, 192
    s = torch.tensor([0.5, 1.0, 2.0])
    p13 = layout.prepare_w13_scale(s, "fp8_tensor", I, H)
    assert torch.equal(p13, s.reshape(E, 1, 1, 1).expand(E, I // 8, H // 128, 2))
    s2 = torch.tensor([[0.5, 0.25], [1.0, 1.0], [2.0, 4.0]])
    p = layout.prepare_w13_scale(s2, "fp8_tensor", I, H)  # I % 128 == 64: the per-row form
    assert torch.equal(p[..., 0], s2[:, :1, None].expand(E, I // 8, H // 128))
    assert torch.equal(p[..., 1], s2[:, 1:, None].expand(E, I // 8, H // 128))
    w2s = layout.prepare_w2_scale(s, "fp8_tensor", H, I)
    assert w2s.shape == (E, H // 128, 2) and torch.equal(w2s[:, 1, 1], s)
    assert layout.prepare_w13_scale(None, "bf16", I, H) is None
