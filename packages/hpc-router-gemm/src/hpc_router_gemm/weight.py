"""The prepared router weight: the FP32 weight plus its BF16 split, made once at load time.

CUDA graphs replay kernels with the buffer addresses they were captured with. The split
buffers (W_hi, W_lo) therefore never move: `refresh()` rewrites them in place, so a graph
captured before a weight update reads the new split on its next replay, provided `refresh()`
(or `update_()`) ran first. Rules:

* Eager calls check the weight's version counter (torch bumps it on every in-place op on the
  tensor or its views) and raise `StaleWeightError` when the split is older than the weight
  (`RouterWeight(..., auto_refresh=True)` refreshes instead; the implicit per-tensor cache
  used when `router_gemm` is given a plain tensor always refreshes).
* Graph replays run no Python, so nothing can check them: after updating a weight in place,
  call `refresh()` (or update through `update_()`, which does both) before the next replay.
  `stale_weights()` lists every prepared weight that is out of date, for a serving engine to
  assert on before it replays its graphs.
* Writes the version counter cannot see: `weight.data.copy_(...)`, writes by other kernels
  through raw pointers, and tensors made under `torch.inference_mode()` (which have no
  counter). For those, call `refresh()` yourself; `verify()` recomputes the split and says
  whether the stored one still matches (slow; for tests and debugging).
"""

from __future__ import annotations

import weakref

import torch
from hpc_common.checks import check_aligned, check_tensor
from hpc_common.launch import require_hopper

from .reference import LO_SCALE, split_weight

_OP = "router_gemm"


class StaleWeightError(RuntimeError):
    """The BF16 split of a router weight is older than the weight (it was updated in place
    and `refresh()` was not called)."""


def _version_of(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors do not track versions
        return None


def check_weight(weight: object, arg: str = "weight") -> torch.Tensor:
    """Validate a router weight: FP32 [N, K], contiguous, N and K multiples of 64, on an SM90
    GPU, 16-byte aligned."""
    check_tensor(weight, arg, _OP, dtype=torch.float32, ndim=2)
    n, k = weight.shape
    if n < 64 or n % 64 or k < 64 or k % 64:
        raise ValueError(f"{_OP}: {arg} must be [N, K] with N and K positive multiples of 64, got {list(weight.shape)}")
    check_tensor(weight, arg, _OP, contiguous=True)
    require_hopper(weight, arg, _OP)
    check_aligned(weight, arg, _OP, 16)
    return weight


def _in_capture() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class RouterWeight:
    """A router weight prepared for `router_gemm`: keeps the FP32 weight (read by the exact
    small-M path) and its split W_hi = bf16(W), W_lo = bf16((W - W_hi) * 256) (read by the
    tensor-core path). Build it once at load time, outside any graph capture.

    weight: FP32 [N, K] CUDA tensor, contiguous, N and K multiples of 64. It is kept by
    reference (not copied): updating it in place requires `refresh()` before the next call
    or graph replay.
    """

    def __init__(self, weight: torch.Tensor, *, auto_refresh: bool = False):
        check_weight(weight)
        if _in_capture():
            raise RuntimeError(f"{_OP}: build RouterWeight before CUDA-graph capture, not during it")
        self.weight = weight
        self.auto_refresh = bool(auto_refresh)
        self.w_hi = torch.empty(weight.shape, dtype=torch.bfloat16, device=weight.device)
        self.w_lo = torch.empty(weight.shape, dtype=torch.bfloat16, device=weight.device)
        self._version: int | None = None
        self._data_ptr = weight.data_ptr()
        self.refresh()
        _live.add(self)

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    def refresh(self) -> "RouterWeight":
        """Recompute the split from the current weight, in place (same buffers, so captured
        graphs see it). Must not run during graph capture."""
        if _in_capture():
            raise RuntimeError(f"{_OP}: RouterWeight.refresh() must run outside CUDA-graph capture")
        if self.weight.data_ptr() != self._data_ptr:
            raise StaleWeightError(
                f"{_OP}: the weight tensor now points at other memory (was .data reassigned?); build a new "
                "RouterWeight (and re-capture graphs that used the old one)"
            )
        with torch.no_grad():
            hi, lo = split_weight(self.weight)
            self.w_hi.copy_(hi)
            self.w_lo.copy_(lo)
        self._version = _version_of(self.weight)
        return self

    def update_(self, new_weight: torch.Tensor) -> "RouterWeight":
        """Copy `new_weight` into the weight and refresh the split: the safe way to do an
        online weight update (addresses unchanged, so captured graphs stay valid)."""
        with torch.no_grad():
            self.weight.copy_(new_weight)
        return self.refresh()

    @property
    def is_stale(self) -> bool:
        """True when the weight changed (in place, through torch) since the last refresh."""
        if self.weight.data_ptr() != self._data_ptr:
            return True
        v = _version_of(self.weight)
        return v is not None and v != self._version

    def verify(self) -> bool:
        """Recompute the split and compare it with the stored one (bitwise). Slow."""
        hi, lo = split_weight(self.weight)
        return bool(torch.equal(hi, self.w_hi) and torch.equal(lo, self.w_lo))

    def ensure_fresh(self) -> None:
        """Raise StaleWeightError (or refresh, with auto_refresh outside capture) if stale."""
        if not self.is_stale:
            return
        if self.auto_refresh and not _in_capture():
            self.refresh()
            return
        where = " during CUDA-graph capture" if _in_capture() else ""
        raise StaleWeightError(
            f"{_OP}: the router weight was updated in place after its BF16 split was made{where}; call "
            "RouterWeight.refresh() (or update through RouterWeight.update_()) before the next call or graph replay"
        )

    def __repr__(self) -> str:
        n, k = self.weight.shape
        return f"RouterWeight(N={n}, K={k}, device={self.weight.device}, stale={self.is_stale})"


_live: "weakref.WeakSet[RouterWeight]" = weakref.WeakSet()
# Implicit cache for plain tensors passed to router_gemm: id(weight) -> (weakref, RouterWeight
# over a weak proxy). Entries die with the weight.
_cache: dict[int, tuple[weakref.ref, "RouterWeight"]] = {}


def stale_weights() -> list[RouterWeight]:
    """Every live prepared weight whose split is out of date (call before replaying graphs)."""
    out = []
    for rw in list(_live):
        try:
            if rw.is_stale:
                out.append(rw)
        except RuntimeError:  # a cached split whose weight was freed
            continue
    return out


def prepare(weight: torch.Tensor) -> RouterWeight:
    """The cached RouterWeight of a plain FP32 weight tensor (made on first use, refreshed
    automatically in eager mode when the weight changed in place). The cache holds no strong
    reference to the weight. During graph capture the entry must already exist and be fresh."""
    key = id(weight)
    entry = _cache.get(key)
    if entry is not None and entry[0]() is weight:
        rw = entry[1]
        if rw.weight.data_ptr() != weight.data_ptr() or rw.shape != weight.shape:
            entry = None
        else:
            rw.ensure_fresh()
            return rw
    if _in_capture():
        raise RuntimeError(
            f"{_OP}: weight has no prepared split; call hpc_router_gemm.prepare(weight) (or use RouterWeight) "
            "once before CUDA-graph capture"
        )
    rw = _CachedRouterWeight(weight)
    _cache[key] = (weakref.ref(weight, lambda _r, k=key: _cache.pop(k, None)), rw)
    return rw


class _CachedRouterWeight(RouterWeight):
    """RouterWeight that refers to its weight weakly (so the cache does not keep it alive)."""

    def __init__(self, weight: torch.Tensor):
        self._weight_ref = weakref.ref(weight)
        super().__init__(weight, auto_refresh=True)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        w = self._weight_ref()
        if w is None:
            raise RuntimeError(f"{_OP}: the weight of this cached split was freed")
        return w

    @weight.setter
    def weight(self, value: torch.Tensor) -> None:
        self._weight_ref = weakref.ref(value)


__all__ = ["LO_SCALE", "RouterWeight", "StaleWeightError", "check_weight", "prepare", "stale_weights"]
