"""Global-memory workspace of the cluster-free split-K (splitk_workspace.cuh): FP32 partial
tiles and one arrival counter per tile, which the kernel leaves at zero after every call.

One workspace per (device, stream), so calls on different streams never share counters. It
grows by powers of two; a replaced workspace is kept alive (a CUDA graph captured with it
keeps its pointers). Nothing is allocated during graph capture: a zero fill there would
only run at replay, so a capture that finds no workspace large enough gets None and the
caller uses the cluster reduction instead, which sums the same partials in the same order
(same bits, possibly slower). Warm up on the capture stream to get the workspace path in
graphs.
"""

from __future__ import annotations

import torch

_cache: dict[tuple[int, int], "SplitWorkspace"] = {}
_retired: list["SplitWorkspace"] = []


class SplitWorkspace:
    __slots__ = ("partials", "counters")

    def __init__(self, partials: torch.Tensor, counters: torch.Tensor):
        self.partials, self.counters = partials, counters

    def fits(self, floats: int, tiles: int) -> bool:
        return self.partials.numel() >= floats and self.counters.numel() >= tiles


def _pow2_at_least(n: int, floor: int) -> int:
    return max(floor, 1 << max(0, (n - 1).bit_length()))


def workspace_floats(tiles: int, splits: int, bm: int, bn: int) -> int:
    """FP32 elements of the partials of `tiles` tiles of bm x bn split `splits` ways."""
    return tiles * splits * bm * bn


def get_workspace(device: torch.device, stream: int, floats: int, tiles: int) -> SplitWorkspace | None:
    """The workspace of (device, stream) with room for `floats` partial elements and `tiles`
    counters, allocated (on the current stream, counters zeroed) when missing or too small;
    None under graph capture when that would need an allocation."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, int(stream))
    ws = _cache.get(key)
    if ws is not None and ws.fits(floats, tiles):
        return ws
    if torch.cuda.is_current_stream_capturing():
        return None
    if ws is not None:
        _retired.append(ws)
        floats = max(floats, ws.partials.numel())
        tiles = max(tiles, ws.counters.numel())
    dev = torch.device("cuda", index)
    ws = SplitWorkspace(torch.empty(_pow2_at_least(floats, 1 << 16), dtype=torch.float32, device=dev),
                        torch.zeros(_pow2_at_least(tiles, 256), dtype=torch.int32, device=dev))
    _cache[key] = ws
    return ws
