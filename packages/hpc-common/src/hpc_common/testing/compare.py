"""Comparisons that say where and how values differ, NaN and Inf included."""

from __future__ import annotations

import torch


def error_stats(actual: torch.Tensor, expected: torch.Tensor) -> dict[str, float]:
    """max_abs_err, rel_err (||a-e|| / ||e||) and cosine similarity, in float64."""
    a = actual.detach().to(torch.float64).cpu().flatten()
    e = expected.detach().to(torch.float64).cpu().flatten()
    diff = a - e
    enorm = e.norm().item()
    cos = torch.nn.functional.cosine_similarity(a, e, dim=0).item() if a.numel() else 1.0
    return {
        "max_abs_err": diff.abs().max().item() if a.numel() else 0.0,
        "rel_err": diff.norm().item() / enorm if enorm > 0 else diff.norm().item(),
        "cosine": cos,
    }


def _where(mask: torch.Tensor, limit: int = 5) -> list[tuple[int, ...]]:
    idx = mask.nonzero()[:limit]
    return [tuple(int(i) for i in row) for row in idx]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float = 0.0,
                 name: str = "output", equal_nan: bool = False) -> None:
    """Elementwise |a - e| <= atol + rtol * |e|, in float64, with a report of the worst
    places (index, actual, expected) and of any NaN/Inf that appears on one side only."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a = actual.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    a_nan, e_nan = torch.isnan(a), torch.isnan(e)
    nan_mismatch = (a_nan != e_nan) if equal_nan else (a_nan | e_nan)
    both_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
    diff = (a - e).abs()
    bad = (diff > atol + rtol * e.abs()) & ~both_inf & ~(a_nan | e_nan)
    bad |= nan_mismatch
    inf_one_side = torch.isinf(a) ^ torch.isinf(e)
    bad |= inf_one_side
    if bool(bad.any()):
        n = int(bad.sum())
        finite = diff.masked_fill(~torch.isfinite(diff), 0)
        ranked = finite.masked_fill(~bad, -1.0).flatten()
        worst = torch.topk(ranked, k=min(5, n)).indices
        lines = [f"{name}: {n} of {a.numel()} elements out of tolerance (atol={atol}, rtol={rtol});"
                 f" max |diff| {finite.max().item():.3e}"]
        for flat in worst.tolist():
            ix = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
            lines.append(f"  at {ix}: actual {a[ix].item()!r} expected {e[ix].item()!r}")
        if bool(nan_mismatch.any()):
            lines.append(f"  NaN on one side at {_where(nan_mismatch)}")
        if bool(inf_one_side.any()):
            lines.append(f"  Inf on one side at {_where(inf_one_side)}")
        raise AssertionError("\n".join(lines))


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, *, name: str = "output") -> None:
    """Same bytes (shape and dtype too); reports the first differing elements."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise AssertionError(f"{name}: {actual.dtype}{tuple(actual.shape)} != {expected.dtype}{tuple(expected.shape)}")
    a = actual.detach().contiguous().cpu()
    e = expected.detach().contiguous().cpu()
    int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    ai, ei = a.view(int_dtype), e.view(int_dtype)
    bad = ai != ei
    if bool(bad.any()):
        places = _where(bad)
        detail = ", ".join(f"{p}: {ai[p].item():#x} vs {ei[p].item():#x}" for p in places)
        raise AssertionError(f"{name}: {int(bad.sum())} of {a.numel()} elements differ bitwise; first {detail}")
