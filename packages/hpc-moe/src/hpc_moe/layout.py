"""The prepared weight layout the fused-MoE kernels read (DESIGN.md, "Prepared weight layout").

Pure torch: runs on the CPU or the GPU, once at load time. Every transform is a reshape and a
permute of the bytes (no arithmetic on values), and each has an inverse used by the tests and by
the CPU reference path.

Both GEMMs feed mma.sync with the weights as the A operand (16 rows) and the token activations as
B (8 columns). Along K the rows are cut into 64-byte groups; a group is two MMA steps (m16n8k16
BF16 or m16n8k32 E4M3: 32 bytes of K each). Lane l = 4g + q (g = l // 4, q = l % 4) takes bytes
[16q, 16q + 16) of each group of its B column g (one 16-byte load), and the K positions of the MMA
are permuted to match: the fragment word w (0..3 of A's a0/a2 halves, b0/b1) of step s is group
byte 16q + 8s + 4 * half. The same permutation on A and B leaves the dot products unchanged.

- Gate-Up tile t of expert e: gate rows 8t..8t+7 as tile rows 0-7, up rows I+8t..I+8t+7 as rows
  8-15 (so a lane's C fragment holds gate and up of the same row). Per group and step, lane l's
  16 bytes are the A registers a0..a3: (row g, half 0), (row g+8, half 0), (row g, half 1),
  (row g+8, half 1), 4 bytes each. `[E, I/8, 16*H]` in the weights' dtype.
- Down tile u: rows 16u..16u+15 of w2, K = I. BF16: the same byte order as Gate-Up. FP8 (converted
  to BF16 in registers): per 32-element group, lane l's 16 bytes hold the 8 E4M3 values of its
  BF16 fragment for step 0 then step 1, each step as a0..a3 with 2 values each. `[E, H/16, 16*I]`.
- Scales (FP32): `w13s [E, I/8, H/128, 2]` (gate block, up block of the tile's rows);
  `w2s [E, H/128, ceil(I/128)]`, the checkpoint's block layout.
"""

from __future__ import annotations

import math

import torch

FP8 = torch.float8_e4m3fn
_QUANTS = ("bf16", "fp8_tensor", "fp8_block")


def _bytes(w: torch.Tensor) -> torch.Tensor:
    return w.contiguous().view(torch.uint8)


def _as(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return b.contiguous().view(dtype)


# Byte permutations of one 16-row tile whose rows are `row_bytes` long. Source order
# [rowhi 2][g 8][G][q 4][s 2][half 2][b 4]: row = 8 * rowhi + g, group byte = 16q + 8s + 4half + b.
_A_ORDER = (2, 4, 1, 3, 5, 0, 6)  # -> [G][s][g][q][half][rowhi][b]: lane (g, q) of step s, a0..a3


def _tiles_to_a(rows: torch.Tensor) -> torch.Tensor:
    """rows [..., 16, row_bytes] uint8 -> [..., 16 * row_bytes] in mma A-fragment order."""
    *lead, r, nb = rows.shape
    assert r == 16 and nb % 64 == 0
    x = rows.reshape(*lead, 2, 8, nb // 64, 4, 2, 2, 4)
    n = len(lead)
    x = x.permute(*range(n), *(n + d for d in _A_ORDER))
    return x.reshape(*lead, 16 * nb)


def _a_to_tiles(a: torch.Tensor, row_bytes: int) -> torch.Tensor:
    *lead, _ = a.shape
    n = len(lead)
    x = a.reshape(*lead, row_bytes // 64, 2, 8, 4, 2, 2, 4)
    inv = [0] * 7
    for i, d in enumerate(_A_ORDER):
        inv[d] = i
    x = x.permute(*range(n), *(n + d for d in inv))
    return x.reshape(*lead, 16, row_bytes)


# Down FP8: elements of a tile [rowhi 2][g 8][G][q 4][s 2][half 2][e 2] (K index 32G + 8q + 4s + 2half + e)
# -> [G][g][q][s][half][rowhi][e]: lane (g, q) holds 16 bytes per group, step 0 then step 1.
_W2_FP8_ORDER = (2, 1, 3, 4, 5, 0, 6)


def _check_quant(quant: str) -> None:
    if quant not in _QUANTS:
        raise ValueError(f"hpc_moe.layout: quant must be one of {_QUANTS}, got {quant!r}")


def prepare_w13(w13: torch.Tensor, quant: str) -> torch.Tensor:
    """w13 [E, 2I, H] (gate rows then up rows) -> [E, I/8, 16*H], same dtype."""
    _check_quant(quant)
    E, two_i, H = w13.shape
    inter = two_i // 2
    b = _bytes(w13)
    rb = b.shape[-1]
    gate = b[:, :inter].reshape(E, inter // 8, 8, rb)
    up = b[:, inter:].reshape(E, inter // 8, 8, rb)
    rows = torch.cat([gate, up], dim=2)  # [E, I/8, 16, rb]
    return _as(_tiles_to_a(rows), w13.dtype).reshape(E, inter // 8, 16 * H)


def unprepare_w13(w13p: torch.Tensor, quant: str, intermediate_size: int, hidden_size: int) -> torch.Tensor:
    _check_quant(quant)
    E = w13p.shape[0]
    b = _bytes(w13p)
    rb = b.shape[-1] // 16
    rows = _a_to_tiles(b.reshape(E, intermediate_size // 8, 16 * rb), rb)
    gate = rows[:, :, :8].reshape(E, intermediate_size, rb)
    up = rows[:, :, 8:].reshape(E, intermediate_size, rb)
    return _as(torch.cat([gate, up], dim=1), w13p.dtype).reshape(E, 2 * intermediate_size, hidden_size)


def prepare_w2(w2: torch.Tensor, quant: str) -> torch.Tensor:
    """w2 [E, H, I] -> [E, H/16, 16*I], same dtype."""
    _check_quant(quant)
    E, H, inter = w2.shape
    if w2.dtype == FP8:
        b = _bytes(w2).reshape(E, H // 16, 2, 8, inter // 32, 4, 2, 2, 2)
        out = b.permute(0, 1, *(2 + d for d in _W2_FP8_ORDER)).reshape(E, H // 16, 16 * inter)
        return _as(out, FP8)
    b = _bytes(w2).reshape(E, H // 16, 16, 2 * inter)
    return _as(_tiles_to_a(b), w2.dtype).reshape(E, H // 16, 16 * inter)


def unprepare_w2(w2p: torch.Tensor, quant: str, hidden_size: int, intermediate_size: int) -> torch.Tensor:
    _check_quant(quant)
    E = w2p.shape[0]
    H, inter = hidden_size, intermediate_size
    if w2p.dtype == FP8:
        inv = [0] * 7
        for i, d in enumerate(_W2_FP8_ORDER):
            inv[d] = i
        b = _bytes(w2p).reshape(E, H // 16, inter // 32, 8, 4, 2, 2, 2, 2)
        out = b.permute(0, 1, *(2 + d for d in inv)).reshape(E, H, inter)
        return _as(out, FP8)
    b = _bytes(w2p).reshape(E, H // 16, 16 * 2 * inter)
    return _as(_a_to_tiles(b, 2 * inter), w2p.dtype).reshape(E, H, inter)


def _block_w13_scale(s: torch.Tensor, quant: str, inter: int, hidden: int) -> torch.Tensor:
    """Any accepted w13 scale -> the checkpoint block form [E, ceil(2I/128), H/128] FP32."""
    s = s.to(torch.float32)
    nb_rows, nb_k = math.ceil(2 * inter / 128), hidden // 128
    if quant == "fp8_block":
        return s.reshape(s.shape[0], nb_rows, nb_k)
    E = s.shape[0]
    if s.dim() == 2:  # [E, 2]: gate scale, up scale -> per row, then per 128-row block
        rows = torch.cat([s[:, :1].expand(E, inter), s[:, 1:2].expand(E, inter)], dim=1)
    else:
        rows = s.reshape(E, 1).expand(E, 2 * inter)
    pad = nb_rows * 128 - 2 * inter
    rows = torch.nn.functional.pad(rows, (0, pad), value=1.0) if pad else rows
    # I % 64 == 0 and 2I rows: a 128-row block may hold the last gate rows and the first up rows only
    # when I % 128 == 64; a per-expert [E, 2] scale with gate != up then has no block form.
    blocks = rows.reshape(E, nb_rows, 128)
    if not torch.equal(blocks, blocks[:, :, :1].expand_as(blocks)):
        raise ValueError("prepare_w13_scale: distinct gate/up scales need I % 128 == 0 to form 128-row blocks")
    return blocks[:, :, 0:1].expand(E, nb_rows, nb_k).contiguous()


def prepare_w13_scale(w13_scale: torch.Tensor | None, quant: str, intermediate_size: int,
                      hidden_size: int) -> torch.Tensor | None:
    """fp8_tensor [E] or [E, 2] (gate, up) / fp8_block [E, ceil(2I/128), H/128] -> FP32
    [E, I/8, H/128, 2]: for tile t and K block kb, the scale of its gate rows and of its up rows."""
    _check_quant(quant)
    if quant == "bf16":
        return None
    inter = intermediate_size
    if quant == "fp8_tensor" and w13_scale.dim() == 2 and inter % 128:
        # the per-row form serves any I: gate rows take column 0, up rows column 1
        s = w13_scale.to(torch.float32)
        E = s.shape[0]
        g = s[:, 0].reshape(E, 1, 1).expand(E, inter // 8, hidden_size // 128)
        u = s[:, 1].reshape(E, 1, 1).expand(E, inter // 8, hidden_size // 128)
        return torch.stack([g, u], dim=-1).contiguous()
    blk = _block_w13_scale(w13_scale, quant, inter, hidden_size)  # [E, RB, KB]
    t = torch.arange(inter // 8, device=blk.device)
    gate_b = (8 * t) // 128
    up_b = (inter + 8 * t) // 128
    return torch.stack([blk[:, gate_b], blk[:, up_b]], dim=-1).contiguous()


def unprepare_w13_scale(w13s: torch.Tensor, intermediate_size: int, hidden_size: int) -> torch.Tensor:
    """[E, I/8, H/128, 2] -> block scales [E, ceil(2I/128), H/128]: each 128-row block from its
    first 8-row group (every group of a block holds the block's scale)."""
    E, tiles, nb_k, _ = w13s.shape
    inter = intermediate_size
    nb_rows = math.ceil(2 * inter / 128)
    out = torch.empty(E, nb_rows, nb_k, dtype=torch.float32, device=w13s.device)
    for rb in range(nb_rows):
        r = rb * 128
        out[:, rb] = w13s[:, r // 8, :, 0] if r < inter else w13s[:, (r - inter) // 8, :, 1]
    return out


def prepare_w2_scale(w2_scale: torch.Tensor | None, quant: str, hidden_size: int,
                     intermediate_size: int) -> torch.Tensor | None:
    """fp8_tensor [E] / fp8_block [E, H/128, ceil(I/128)] -> FP32 [E, H/128, ceil(I/128)]."""
    _check_quant(quant)
    if quant == "bf16":
        return None
    s = w2_scale.to(torch.float32)
    shape = (s.shape[0], hidden_size // 128, math.ceil(intermediate_size / 128))
    if quant == "fp8_tensor":
        return s.reshape(-1, 1, 1).expand(shape).contiguous()
    return s.reshape(shape).contiguous()


def unprepare_w2_scale(w2s: torch.Tensor) -> torch.Tensor:
    return w2s.clone()


def dequantize_w13(w13p: torch.Tensor, w13s: torch.Tensor | None, intermediate_size: int,
                   hidden_size: int) -> torch.Tensor:
    """The float32 [E, 2I, H] weights the Gate-Up kernel multiplies (prepared values times their
    prepared scales): the reference's weights for any format, exact per row."""
    w = unprepare_w13(w13p, "bf16" if w13s is None else "fp8_block", intermediate_size, hidden_size).float()
    if w13s is None:
        return w
    E, inter = w.shape[0], intermediate_size
    s = w13s.float()  # [E, I/8, KB, 2]
    gate = s[..., 0].repeat_interleave(8, dim=1).repeat_interleave(128, dim=2)
    up = s[..., 1].repeat_interleave(8, dim=1).repeat_interleave(128, dim=2)
    return w * torch.cat([gate, up], dim=1).reshape(E, 2 * inter, hidden_size)


def dequantize_w2(w2p: torch.Tensor, w2s: torch.Tensor | None, hidden_size: int,
                  intermediate_size: int) -> torch.Tensor:
    """The float32 [E, H, I] weights the Down kernel multiplies."""
    w = unprepare_w2(w2p, "bf16" if w2s is None else "fp8_block", hidden_size, intermediate_size).float()
    if w2s is None:
        return w
    s = w2s.float().repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)
    return w * s[:, :hidden_size, :intermediate_size]
