"""Pure-torch references of the FP8 E4M3 quantisers (CPU or GPU, no extension needed).

They perform exactly the float32 operations of the kernels (include/hpc_common/fp8_quant.cuh),
so on any device the kernel's output equals these bit for bit:

    xf     = float32(x)                                   (exact for bf16 / fp16)
    amax   = max |xf| over the finite elements of the segment (NaN, +-Inf ignored; 0 if none)
    scale  = max(amax, AMAX_FLOOR) / 448                  (IEEE float32 division)
             ue8m0: rounded up to the next power of two (exact bit operation)
    inv    = 1 / scale                                    (IEEE float32 division)
    q      = e4m3(xf * inv)                               (IEEE product, then RNE, saturating)

`e4m3` rounds to nearest, ties to even; finite values beyond +-448 and +-Inf become +-448;
NaN becomes the single encoding 0x7F (torch's own cast keeps the sign bit: 0x7F or 0xFF).
These functions avoid host synchronisation, so they can be captured in a CUDA graph (the
benchmark times them as the `torch_ref` baseline). Divisions are always tensor / tensor:
torch's CUDA kernel turns `tensor / python_scalar` into a product with the scalar's
reciprocal, which is not the IEEE quotient (one ulp off for amax / 448, seen on an H200).
"""

from __future__ import annotations

import math

import torch

E4M3_MAX = 448.0
# Dynamic scales never go below AMAX_FLOOR / 448 (float32 rounding of 1e-10), so zero rows
# get a finite normal scale and zero output. Same constant as kAmaxFloor in the header.
AMAX_FLOOR = 1e-10
NAN_CODE = 0x7F
FP8 = torch.float8_e4m3fn


def e4m3_from_float32(q: torch.Tensor) -> torch.Tensor:
    """float32 -> float8_e4m3fn: RNE, +-Inf and overflow to +-448, every NaN to 0x7F."""
    # Clamp first: older torch releases turn overflow into NaN instead of saturating.
    out = q.clamp(-E4M3_MAX, E4M3_MAX).to(FP8)
    return out.view(torch.uint8).masked_fill(torch.isnan(q), NAN_CODE).view(FP8)


def finite_amax(xf: torch.Tensor, dim=None, keepdim: bool = True) -> torch.Tensor:
    """max |xf| over `dim` (all dims when None) ignoring NaN and +-Inf; 0 over no element."""
    a = xf.abs().masked_fill(~torch.isfinite(xf), 0.0)
    if dim is None:
        return a.amax() if a.numel() else a.new_zeros(())
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if any(a.shape[d] == 0 for d in dims):
        return a.sum(dim=dims, keepdim=keepdim)  # zeros of the right shape (amax has no identity)
    return a.amax(dim=dims, keepdim=keepdim)


def scale_from_amax(amax: torch.Tensor, ue8m0: bool = False) -> torch.Tensor:
    """max(amax, AMAX_FLOOR) / 448 in float32; with `ue8m0` rounded up to a power of two."""
    a = amax.to(torch.float32).clamp(min=AMAX_FLOOR)
    s = a / torch.full_like(a, E4M3_MAX)
    if ue8m0:
        bits = s.view(torch.int32)
        up = (bits & 0x7F800000) + 0x00800000
        s = torch.where((bits & 0x007FFFFF) != 0, up, bits).view(torch.float32)
    return s


def reciprocal(scale: torch.Tensor) -> torch.Tensor:
    """1 / scale, an IEEE float32 division on every device."""
    s = scale.to(torch.float32)
    return torch.ones_like(s) / s


def quantize_with_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """e4m3(float32(x) * (1 / scale)) with `scale` broadcast against x."""
    return e4m3_from_float32(x.to(torch.float32) * reciprocal(scale))


def quantize_per_tensor_ref(x: torch.Tensor, scale: torch.Tensor | float | None = None,
                            ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale for the whole tensor: given (static) or from the tensor's amax (dynamic).
    Returns (q like x, scale float32 [1])."""
    if scale is None:
        s = scale_from_amax(finite_amax(x.to(torch.float32)).reshape(1), ue8m0)
    elif isinstance(scale, torch.Tensor):
        s = scale.to(device=x.device, dtype=torch.float32).reshape(1)
    else:
        s = torch.tensor([scale], dtype=torch.float32, device=x.device)
    return quantize_with_scale(x, s), s


def quantize_per_token_ref(x: torch.Tensor, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] -> (q [M, N], scale [M, 1]): one scale per row."""
    s = scale_from_amax(finite_amax(x.to(torch.float32), dim=-1), ue8m0)
    return quantize_with_scale(x, s), s


def quantize_per_token_group_ref(x: torch.Tensor, group_size: int = 128, ue8m0: bool = False,
                                 column_major_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] -> (q [M, N], scale [M, ceil(N / group_size)]): one scale per row and group of
    `group_size` columns (the last group may be shorter). With `column_major_scales` the scale
    is a view with strides (1, M_pad), M_pad = M rounded up to 4, of a zero-initialised
    [G, M_pad] buffer (the layout DeepGEMM-style kernels read with TMA)."""
    m, n = x.shape
    g = math.ceil(n / group_size)
    xf = x.to(torch.float32)
    # Zero padding cannot change a max of absolute values.
    xp = torch.nn.functional.pad(xf, (0, g * group_size - n)).view(m, g, group_size)
    s = scale_from_amax(finite_amax(xp, dim=-1, keepdim=False), ue8m0)  # [M, G]
    q = e4m3_from_float32(xp * reciprocal(s).unsqueeze(-1)).view(m, g * group_size)[:, :n]
    if column_major_scales:
        s = column_major(s)
    return q.contiguous(), s


def quantize_per_token_head_ref(x: torch.Tensor, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, D] -> (q [T, H, D], scale [T, H, 1]): one scale per token and head."""
    s = scale_from_amax(finite_amax(x.to(torch.float32), dim=-1), ue8m0)
    return quantize_with_scale(x, s), s


def column_major(s: torch.Tensor) -> torch.Tensor:
    """[M, G] -> the same values as a [M, G] view with strides (1, M_pad) of a zeroed buffer."""
    m, g = s.shape
    m_pad = (m + 3) // 4 * 4
    buf = torch.zeros(g, m_pad, dtype=s.dtype, device=s.device)
    buf[:, :m] = s.t()
    return buf.t()[:m]


def dequantize_ref(q: torch.Tensor, scale: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
    """float32(q) * scale, with group scales [M, G] expanded over `group_size` columns."""
    qf = q.to(torch.float32)
    if group_size is not None:
        scale = scale.repeat_interleave(group_size, dim=-1)[..., : q.shape[-1]]
    return qf * scale


def cpu_demo() -> str:
    """Small-shape run of every mode, for the main job's report on machines without SM90."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 256, generator=g) * 3).to(torch.bfloat16)
    x[1] = 0  # a zero row keeps a finite scale
    x[2, 5] = float("inf")  # saturates to 448 and does not enter the row's amax
    lines = []
    for name, (q, s) in {
        "per-tensor dynamic": quantize_per_tensor_ref(x),
        "per-token": quantize_per_token_ref(x),
        "per-token-group-128": quantize_per_token_group_ref(x, 128),
        "per-token-per-head [4,2,128]": quantize_per_token_head_ref(x.view(4, 2, 128)),
    }.items():
        deq = dequantize_ref(q, s, 128 if "group" in name else None).reshape(x.shape).float()
        finite = torch.isfinite(x.float())
        err = ((deq - x.float()).abs()[finite] / x.float().abs()[finite].clamp_min(1e-3)).max().item()
        lines.append(f"{name:30s} scales {tuple(s.shape)}, max rel. dequant error {err:.3f}")
    return "\n".join(lines)
