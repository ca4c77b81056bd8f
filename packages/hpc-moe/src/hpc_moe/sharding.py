"""Shard a full checkpoint's MoE tensors for one tensor-parallel (TP) / expert-parallel (EP) rank,
the way SGLang and vLLM shard them, into what `MoEWeights.prepare` takes.

    shard = shard_moe_weights(w13, w2, "fp8_block", w13_scale=s13, w2_scale=s2,
                              tp_rank=r, tp_size=2)          # or ep_rank=r, ep_size=2
    weights = shard.prepare()                                # MoEWeights of this rank
    out = fused_moe(hidden, weights, topk_ids, topk_weights) # partial: all-reduce over the ranks

* TP (vLLM `FusedMoE._load_w13` / `_load_w2`, SGLang `FusedMoE._load_w13` / `_load_w2`): every
  expert keeps the intermediate slice [r * I / tp, (r + 1) * I / tp): the gate rows and the up rows
  of w13 [E, 2I, H] are each sliced, w2 [E, H, I] keeps those columns. Partial outputs summed over
  the ranks give the full MoE (SiLU * up is per intermediate index; Down is a sum over it).
* EP (vLLM `determine_expert_map`, "linear" placement; SGLang the same): rank r keeps the global
  experts [r * E / ep, (r + 1) * E / ep); the router's global ids are kept, other ranks' contribute
  nothing. TP and EP may be combined (the partial sum then runs over tp_size * ep_size ranks).
* Scales: "fp8_tensor" per-expert scales follow their experts (replicated over TP); "fp8_block"
  128 x 128 block scales are sliced with the rows and columns they cover.

Block scales and a TP slice that is not on the 128 grid: Hy3-FP8 at TP8 has I = 1536 / 8 = 192 per
rank, so rank 1's slice starts at row 192, in the middle of scale block 1, and a 192-row w13 of
gate then up rows has a 128-row block holding gate and up rows of different source blocks. One
scale per 128 x 128 block cannot express that. vLLM refuses it (`validate_fp8_block_shape_moe`,
vllm/model_executor/layers/quantization/utils/fp8_utils.py, called from Fp8MoEMethod.create_weights),
and so does SGLang (Fp8MoEMethod.create_weights, sglang/srt/layers/quantization/fp8.py); SGLang's
CPU path instead pads the *full* I to a multiple of tp * 128 (`adjust_config_with_unaligned_cpu_tp`,
sglang/srt/configs/update_config.py), which at Hy3 TP8 gives 256-row ranks 0-5 and all-zero ranks
6-7. `unaligned` says what this helper does:

* "error" (default): raise a ValueError naming `tp_size`, as the frameworks do.
* "pad": exact. Zero intermediate rows are put in front of the slice (up to the previous 128
  boundary) and after it (to a multiple of 128), so every 128-row block of the shard lies inside one
  source block and keeps its scale; zero rows add nothing (SiLU(0) * 0 = 0 and a zero Down column).
  Hy3 TP8: every rank gets I = 256 holding its own 192 rows (balanced), 33 % more weight bytes.
* "requantize": keeps I / tp rows. A shard block whose rows come from source blocks of one scale
  keeps its bytes and scale (exact); any other block is dequantised (float64) and quantised again
  with scale amax / 448 on the rank's grid (e4m3 round-to-nearest-even): lossy, by at most half an
  e4m3 step of the new scale per element. `MoEShard.requantized_blocks` counts those blocks.

An I / tp that is not a multiple of 64 (the kernels' tile, any format) is refused unless
unaligned="pad", which then pads to a multiple of 64 (128 for "fp8_block").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hpc_common.fp8 import reference as fp8_ref

from . import checks
from .reference import BLOCK

_OP = "shard_moe_weights"
UNALIGNED = ("error", "pad", "requantize")
# Same-size integer views, so a gather with zero padding copies bytes (no float conversion).
_INT_VIEW = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8}


@dataclass(frozen=True, eq=False)
class MoEShard:
    """One rank's MoE tensors in the checkpoint layout `MoEWeights.prepare` takes (w13 [E_local,
    2I_local, H] gate rows then up rows, w2 [E_local, H, I_local], scales as for prepare), plus
    where they came from: global experts [ep_rank * E_local, (ep_rank + 1) * E_local) and global
    intermediate rows [intermediate_start, intermediate_start + intermediate_size - pad_front -
    pad_back) stored at local rows pad_front.. (the padding rows are zeros)."""

    quant: str
    w13: torch.Tensor
    w2: torch.Tensor
    w13_scale: torch.Tensor | None
    w2_scale: torch.Tensor | None
    a1_scale: torch.Tensor | float | None
    tp_rank: int
    tp_size: int
    ep_rank: int
    ep_size: int
    num_experts: int
    intermediate_start: int
    intermediate_size: int
    pad_front: int
    pad_back: int
    requantized_blocks: int

    def prepare_kwargs(self) -> dict:
        """The keyword arguments of `MoEWeights.prepare` for this shard."""
        return dict(w13=self.w13, w2=self.w2, quant=self.quant, w13_scale=self.w13_scale, w2_scale=self.w2_scale,
                    a1_scale=self.a1_scale, ep_rank=self.ep_rank, ep_size=self.ep_size,
                    num_experts=self.num_experts)

    def prepare(self):
        """`MoEWeights.prepare(**self.prepare_kwargs())`: the prepared weights of this rank."""
        from .weights import MoEWeights

        return MoEWeights.prepare(**self.prepare_kwargs())


def _check_rank(rank: object, size: object, name: str) -> None:
    for arg, v in ((f"{name}_rank", rank), (f"{name}_size", size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{_OP}: {arg} must be an int, got {type(v).__name__}")
    if size < 1:
        raise ValueError(f"{_OP}: {name}_size must be >= 1, got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"{_OP}: {name}_rank must satisfy 0 <= {name}_rank < {name}_size = {size}, got {rank}")


def _round_up(a: int, b: int) -> int:
    return -(-a // b) * b


def _needs_padding(inter: int, lo: int, size: int, block: bool) -> bool:
    """Whether the plain slice [lo, lo + size) cannot be a shard: not whole 64-row tiles, or (block
    scales) a 128-row block of its w13 or w2 that would mix source blocks."""
    if size % checks.I_MULTIPLE:
        return True
    if not block:
        return False
    src = _source_rows(lo, size, 0, size)
    return bool(_mixed_blocks(torch.cat([src, src + inter])) or _mixed_blocks(src))


def _source_rows(lo: int, size: int, front: int, total: int) -> torch.Tensor:
    """Global intermediate index of each of the shard's `total` rows (-1: a zero padding row)."""
    src = torch.full((total,), -1, dtype=torch.long)
    src[front:front + size] = torch.arange(lo, lo + size)
    return src


def _gather(t: torch.Tensor, dim: int, src: torch.Tensor) -> torch.Tensor:
    """t's slices `src` along `dim` (a copy), zero where src < 0."""
    ints = t.view(_INT_VIEW[t.dtype])
    pad = src < 0
    out = ints.index_select(dim, src.clamp(min=0).to(t.device))
    if bool(pad.any()):
        index = [slice(None)] * t.dim()
        index[dim] = pad.to(t.device)
        out[tuple(index)] = 0
    return out.view(t.dtype)


def _mixed_blocks(src_rows: torch.Tensor) -> list[int]:
    """The shard's 128-row blocks whose real rows (src_rows >= 0) come from more than one source block."""
    src_blocks = torch.where(src_rows >= 0, src_rows // BLOCK, -1)
    mixed = []
    for b in range(-(-src_blocks.numel() // BLOCK)):
        real = src_blocks[b * BLOCK:(b + 1) * BLOCK]
        real = real[real >= 0]
        if real.numel() and bool((real != real[0]).any()):
            mixed.append(b)
    return mixed


def _block_scales(q: torch.Tensor, scale: torch.Tensor, src_rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The shard's 128 x 128 block scales of q [E, R, K] (rows already gathered from source rows
    `src_rows`, -1 = zero row) from the source scales [E, ceil(R_src / 128), K / 128]. Blocks
    whose rows come from several source scales are re-quantised in place in q (module docstring).
    Returns (scales [E, ceil(R / 128), K / 128] FP32, number of re-quantised (expert, block) pairs)."""
    E, R, K = q.shape
    KB = K // BLOCK
    src_blocks = torch.where(src_rows >= 0, src_rows // BLOCK, -1).to(scale.device)
    out = torch.ones(E, -(-R // BLOCK), KB, dtype=torch.float32, device=scale.device)
    mixed = set(_mixed_blocks(src_rows))
    requantized = 0
    for b in range(out.shape[1]):
        rows = slice(b * BLOCK, min(R, (b + 1) * BLOCK))
        blk = src_blocks[rows]
        real = blk >= 0
        if not bool(real.any()):
            continue  # only padding rows: zeros, any scale
        if b not in mixed:
            out[:, b] = scale[:, int(blk[real][0])]
            continue
        row_scale = scale[:, blk.clamp(min=0)].double()  # [E, r, KB]: each row's source scale
        first = row_scale[:, int(real.nonzero()[0])]  # [E, KB]
        same = (row_scale[:, real] == first[:, None]).all(dim=1)  # [E, KB]: one scale after all
        vals = q[:, rows].double() * row_scale.repeat_interleave(BLOCK, dim=2)  # exact: 4 x 24 bits
        amax = vals.abs().reshape(E, -1, KB, BLOCK).amax(dim=(1, 3))
        new_scale = fp8_ref.scale_from_amax(amax)  # FP32 [E, KB]
        requant = fp8_ref.e4m3_from_float32((vals / new_scale.double().repeat_interleave(BLOCK, dim=1)[:, None])
                                            .float())
        keep = same.repeat_interleave(BLOCK, dim=1)[:, None].expand_as(vals)
        q8 = q.view(torch.uint8)  # FP8 moved as bytes: no FP8 index_put kernel is needed
        q8[:, rows] = torch.where(keep, q8[:, rows], requant.view(torch.uint8))
        out[:, b] = torch.where(same, first.float(), new_scale)
        requantized += int((~same).sum())
    return out, requantized


def shard_moe_weights(w13: torch.Tensor, w2: torch.Tensor, quant: str = "bf16", *,
                      w13_scale: torch.Tensor | None = None, w2_scale: torch.Tensor | None = None,
                      a1_scale: torch.Tensor | float | None = None, tp_rank: int = 0, tp_size: int = 1,
                      ep_rank: int = 0, ep_size: int = 1, unaligned: str = "error") -> MoEShard:
    """One rank's share of a full MoE layer (module docstring: TP, EP, scales, `unaligned`).

    w13 [E, 2I, H] (gate rows then up rows), w2 [E, H, I], w13_scale / w2_scale / a1_scale: the
    whole layer in the layout MoEWeights.prepare takes with all E experts (E = num_experts).
    tp_size must divide I and ep_size must divide E. CPU or CUDA tensors; the result is on the
    same device. Without TP the weights are views of the inputs (EP only slices experts); with TP
    they are copies. Call it at load time (it reads scales on the host)."""
    quant = checks.check_quant(quant, _OP)
    E, H, inter = checks.check_weight_tensors(w13, w2, quant, _OP)
    checks.check_scales(quant, w13_scale, w2_scale, a1_scale, E, H, inter, w13.device, _OP)
    _check_rank(tp_rank, tp_size, "tp")
    _check_rank(ep_rank, ep_size, "ep")
    if unaligned not in UNALIGNED:
        raise ValueError(f"{_OP}: unaligned must be one of {', '.join(map(repr, UNALIGNED))}, got {unaligned!r}")
    if E % ep_size:
        raise ValueError(f"{_OP}: ep_size ({ep_size}) must divide the number of experts w13.shape[0] = {E}")
    if inter % tp_size:
        raise ValueError(f"{_OP}: tp_size ({tp_size}) must divide the intermediate size I = w2.shape[2] = {inter}")
    e_local = E // ep_size
    experts = slice(ep_rank * e_local, (ep_rank + 1) * e_local)
    size = inter // tp_size
    lo = tp_rank * size
    block = quant == "fp8_block"

    front, total = 0, size
    if _needs_padding(inter, lo, size, block) and unaligned == "pad":
        grain = BLOCK if block else checks.I_MULTIPLE
        front = lo % BLOCK if block else 0
        total = _round_up(front + size, grain)
    elif size % checks.I_MULTIPLE:
        raise ValueError(f"{_OP}: I / tp_size = {inter} / {tp_size} = {size} is not a multiple of "
                         f"{checks.I_MULTIPLE} (the kernels' tile); unaligned='pad' pads each rank with zero rows")
    src = _source_rows(lo, size, front, total)
    rows13 = torch.cat([src, torch.where(src >= 0, src + inter, -1)])  # fused rows: gate, then up
    if block and unaligned != "requantize" and (_mixed_blocks(rows13) or _mixed_blocks(src)):
        why = ("the checkpoint's own up rows start inside a block (I % 128 != 0), which no zero padding "
               "of the slice realigns" if unaligned == "pad" else "the slice is not on the 128 grid")
        raise ValueError(
            f"{_OP}: quant='fp8_block' with tp_size = {tp_size}: rank {tp_rank}'s intermediate rows [{lo}, "
            f"{lo + size}) of I = {inter} would put rows of different 128 x 128 scale blocks into one block "
            f"({why}); vLLM and SGLang refuse this too. unaligned='pad' (exact: zero rows up to the 128 grid) "
            f"or unaligned='requantize' (lossy) shard it")

    views = tp_size == 1 and total == size  # EP only: slices of the experts, no copy
    if views:
        q13, q2 = w13[experts], w2[experts]
    else:
        q13 = _gather(w13[experts], 1, rows13)
        q2t = _gather(w2[experts].transpose(1, 2), 1, src)  # [E, I_local, H]: w2's columns as rows

    s13 = s2 = None
    requantized = 0
    if quant == "fp8_tensor":
        s13, s2 = w13_scale[experts], w2_scale[experts]
    elif block and views:
        s13, s2 = w13_scale[experts], w2_scale[experts]
    elif block:
        s13, n13 = _block_scales(q13, w13_scale[experts], rows13)
        s2t, n2 = _block_scales(q2t, w2_scale[experts].transpose(1, 2), src)
        s2 = s2t.transpose(1, 2).contiguous()
        requantized = n13 + n2
    if not views:
        q2 = q2t.transpose(1, 2).contiguous()
    return MoEShard(quant=quant, w13=q13, w2=q2, w13_scale=s13, w2_scale=s2, a1_scale=a1_scale,
                    tp_rank=tp_rank, tp_size=tp_size, ep_rank=ep_rank, ep_size=ep_size, num_experts=E,
                    intermediate_start=lo, intermediate_size=total, pad_front=front,
                    pad_back=total - front - size, requantized_blocks=requantized)
