"""The scratch buffers of the fused MoE, sized once from a maximum token count (DESIGN.md,
"Workspace"), so a call allocates nothing and can be captured in a CUDA graph.

    inter      [max_tokens * top_k, I] BF16   silu(gate) * up of every routed slot
    xq         [max_tokens, H] FP8 E4M3       the quantised input (FP8 formats)
    xs         [max_tokens, H / 128] FP32     its scales, per token and group of 128
    y          [rows, H] BF16                 the expert-form Down's per-pair partial rows
    down_index [3 * rows + 2] int32           the routing index the Gate-Up kernel writes for it

with rows = heuristics.partial_rows(max_tokens, top_k) = min(max_tokens * top_k, 8192): one pipeline
window's pairs (y is 64 MB at 8192 pairs and H = 4096, what SGLang's Triton path allocates for its
[T, top_k, H] intermediate). Both Down forms can run on any workspace, so the form a call takes never
depends on how its workspace was made.

A graph replays kernels with the addresses it captured, so a workspace used in a capture must
live as long as the graph: keep a reference to it (the per-device cache below never frees one
that a capture used).
"""

from __future__ import annotations

import torch

from .heuristics import index_words, partial_rows

FP8 = torch.float8_e4m3fn
_OP = "MoEWorkspace"


class MoEWorkspace:
    """Buffers for calls of up to `max_tokens` tokens and top-`top_k` routing, for weights of
    hidden size H and intermediate size I on `device`. `fp8=False` leaves out xq / xs (BF16
    weights never quantise the input; they become 0-element tensors)."""

    __slots__ = ("max_tokens", "top_k", "hidden_size", "intermediate_size", "device", "fp8", "inter", "xq", "xs",
                 "y", "down_index", "captured")

    def __init__(self, max_tokens: int, top_k: int, hidden_size: int, intermediate_size: int,
                 device: torch.device | str | None = None, *, fp8: bool = True):
        for arg, v in (("max_tokens", max_tokens), ("top_k", top_k), ("hidden_size", hidden_size),
                       ("intermediate_size", intermediate_size)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{_OP}: {arg} must be a non-negative int, got {v!r}")
        if not 1 <= top_k <= 16:
            raise ValueError(f"{_OP}: top_k must be in 1..16, got {top_k}")
        if hidden_size % 128:
            raise ValueError(f"{_OP}: hidden_size must be a multiple of 128, got {hidden_size}")
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{_OP}: allocate the workspace before CUDA-graph capture, not during it")
        dev = torch.device(device) if device is not None else torch.device("cpu")
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.max_tokens, self.top_k = max_tokens, top_k
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.device, self.fp8 = dev, bool(fp8)
        self.inter = torch.empty(max_tokens * top_k, intermediate_size, dtype=torch.bfloat16, device=dev)
        rows = max_tokens if fp8 else 0
        self.xq = torch.empty(rows, hidden_size, dtype=FP8, device=dev)
        self.xs = torch.empty(rows, hidden_size // 128, dtype=torch.float32, device=dev)
        self.y, self.down_index = self.partials(max_tokens, top_k, hidden_size, dev)
        self.captured = False

    @staticmethod
    def partials(max_tokens: int, top_k: int, hidden_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The expert-form Down's buffers (y, down_index) for calls of up to max_tokens x top_k pairs."""
        rows = partial_rows(max_tokens, top_k)
        return (torch.empty(rows, hidden_size, dtype=torch.bfloat16, device=device),
                torch.empty(index_words(rows), dtype=torch.int32, device=device))

    @classmethod
    def view(cls, inter: torch.Tensor, xq: torch.Tensor, xs: torch.Tensor, y: torch.Tensor, down_index: torch.Tensor,
             max_tokens: int, top_k: int, hidden_size: int) -> MoEWorkspace:
        """A workspace over existing buffers (what the custom op rebuilds from its tensor arguments)."""
        ws = cls.__new__(cls)
        ws.max_tokens, ws.top_k = max_tokens, top_k
        ws.hidden_size, ws.intermediate_size = hidden_size, inter.shape[1]
        ws.device, ws.fp8 = inter.device, xq.shape[0] > 0
        ws.inter, ws.xq, ws.xs = inter, xq, xs
        ws.y, ws.down_index = y, down_index
        ws.captured = False
        return ws

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.inter, self.xq, self.xs, self.y, self.down_index))

    def fits(self, num_tokens: int, top_k: int, hidden_size: int, intermediate_size: int, fp8: bool,
             device: torch.device) -> bool:
        return (num_tokens <= self.max_tokens and top_k <= self.top_k and hidden_size == self.hidden_size
                and intermediate_size == self.intermediate_size and (self.fp8 or not fp8) and device == self.device)

    def check(self, num_tokens: int, top_k: int, hidden_size: int, intermediate_size: int, fp8: bool,
              device: torch.device, op: str) -> None:
        """Raise a clear error unless this workspace serves a call of these sizes."""
        if device != self.device:
            raise ValueError(f"{op}: workspace is on {self.device}, the call on {device}")
        if (hidden_size, intermediate_size) != (self.hidden_size, self.intermediate_size):
            raise ValueError(f"{op}: workspace was made for H={self.hidden_size}, I={self.intermediate_size}; "
                             f"the weights have H={hidden_size}, I={intermediate_size}")
        if num_tokens > self.max_tokens:
            raise ValueError(f"{op}: T = {num_tokens} tokens exceeds workspace.max_tokens = {self.max_tokens}")
        if top_k > self.top_k:
            raise ValueError(f"{op}: top-k = {top_k} exceeds workspace.top_k = {self.top_k}")
        if fp8 and not self.fp8:
            raise ValueError(f"{op}: FP8 weights need a workspace made with fp8=True")

    def __repr__(self) -> str:
        return (f"MoEWorkspace(max_tokens={self.max_tokens}, top_k={self.top_k}, H={self.hidden_size}, "
                f"I={self.intermediate_size}, device={self.device}, fp8={self.fp8}, {self.nbytes / 2**20:.2f} MiB)")


# One cached workspace per (device, H, I, fp8) for calls made without one. It grows (to the
# next power of two of tokens, the largest top-k seen) only outside graph capture; one a
# capture used is kept alive for the graphs that replay it.
_CACHE: dict[tuple, MoEWorkspace] = {}
_KEPT_FOR_GRAPHS: list[MoEWorkspace] = []


def cached_workspace(num_tokens: int, top_k: int, hidden_size: int, intermediate_size: int, fp8: bool,
                     device: torch.device, capturing: bool, op: str) -> MoEWorkspace:
    key = (device, hidden_size, intermediate_size, fp8)
    ws = _CACHE.get(key)
    if ws is None or not ws.fits(num_tokens, top_k, hidden_size, intermediate_size, fp8, device):
        if capturing:
            have = "none" if ws is None else f"max_tokens={ws.max_tokens}, top_k={ws.top_k}"
            raise RuntimeError(f"{op}: no cached workspace fits T={num_tokens}, top-k={top_k} during CUDA-graph "
                               f"capture (cached: {have}); pass workspace=MoEWorkspace(...) or make one eager call "
                               "of the largest size before capturing")
        tokens = max(num_tokens, ws.max_tokens if ws is not None else 1, 1)
        tokens = 1 << (tokens - 1).bit_length()
        top_k = max(top_k, ws.top_k if ws is not None else 1)
        if ws is not None and ws.captured:
            _KEPT_FOR_GRAPHS.append(ws)
        ws = _CACHE[key] = MoEWorkspace(tokens, top_k, hidden_size, intermediate_size, device, fp8=fp8)
    if capturing:
        ws.captured = True
    return ws


def clear_cache() -> None:
    """Drop the cached workspaces (those a graph capture used stay alive)."""
    for ws in _CACHE.values():
        if ws.captured:
            _KEPT_FOR_GRAPHS.append(ws)
    _CACHE.clear()
