"""The routing index and task lists of the fused MoE, in Python (pure torch, CPU or GPU).

The kernels build this index in shared memory from `topk_ids` (DESIGN.md, "Pipeline"); this
module computes the same thing the slow, obvious way, so the CPU tests can state its
properties and the GPU tests can compare the kernels' enumeration with it.

* Only the (token, k) pairs whose global id lies in the rank's range
  `[expert_start, expert_start + num_local_experts)` are routed; -1 and other ranks' ids are
  dropped.
* `counts[e]`: pairs routed to local expert e. `offsets` is the exclusive scan of `counts`, so
  expert e owns the contiguous slots `[offsets[e], offsets[e + 1])`, the experts in id order.
* Inside an expert's range this twin puts the slots in (token, k) order (row-major over
  `topk_ids`). The kernels place them with shared-memory atomics, so their order inside an
  expert may differ run to run; nothing depends on it, because Gate-Up writes its result to
  `inter[t * k + j]` (the pair's own row) and Down sums a token's k pairs in j order.
* Gate-Up tasks: (local expert, w13 tile, chunk of <= GATE_UP_CHUNK slots), the active experts in
  id order, then the I/8 tiles of 16 rows (8 gate + 8 up), then the chunks (consecutive CTAs
  share a w13 tile in the L2); the kernel's CTA c takes tasks c, c + grid, ...
* Down tasks: one CTA per (16-row tile of H, chunk of <= down_chunk_tokens(k) tokens), in the
  order of the linear block id of the grid (H/16, chunks): chunks outer, tiles inner. A split tile-form
  Down (heuristics.down_tile_splits) runs S CTAs per task, each over every S-th group of 4 active experts.

The kernels run a large T as consecutive windows of tokens (kernels.window_tokens(k), so a
window's index fits in shared memory); within a window the index is the one below.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GATE_UP_CHUNK = 16  # slots per Gate-Up task: two n8 MMA blocks (keeps the register double buffer in budget)
DOWN_MAX_CHUNK = 256  # tokens per Down task at most; with k pairs per token, at most 1024 pairs
DOWN_MAX_PAIRS = 1024
W13_TILE_ROWS = 8  # gate rows (and as many up rows) per Gate-Up tile
W2_TILE_ROWS = 16  # H rows per Down tile


@dataclass(frozen=True)
class RoutingIndex:
    """The routing of one call, restricted to the rank's experts.

    counts: int64 [E_local]; offsets: int64 [E_local + 1] (exclusive scan, offsets[-1] = slots);
    slot_of: int64 [T, k], the slot of each (token, k) pair or -1 when it is not routed here;
    slot_token / slot_k: int64 [slots], the (token, k) pair that owns each slot."""

    counts: torch.Tensor
    offsets: torch.Tensor
    slot_of: torch.Tensor
    slot_token: torch.Tensor
    slot_k: torch.Tensor

    @property
    def num_slots(self) -> int:
        return int(self.offsets[-1])

    @property
    def active_experts(self) -> list[int]:
        """Local experts with at least one slot, in id order."""
        return [int(e) for e in (self.counts > 0).nonzero().flatten()]

    def expert_range(self, e: int) -> tuple[int, int]:
        return int(self.offsets[e]), int(self.offsets[e + 1])


def build_index(topk_ids: torch.Tensor, expert_start: int, num_local_experts: int) -> RoutingIndex:
    """The routing index of `topk_ids` [T, k] (global ids, -1 = none) for the rank owning global
    experts [expert_start, expert_start + num_local_experts)."""
    if topk_ids.dim() != 2:
        raise ValueError(f"build_index: topk_ids must be 2-D [T, k], got shape {tuple(topk_ids.shape)}")
    T, k = topk_ids.shape
    dev = topk_ids.device
    local = topk_ids.to(torch.int64).reshape(-1) - expert_start
    routed = (topk_ids.reshape(-1) >= 0) & (local >= 0) & (local < num_local_experts)
    pos = routed.nonzero().flatten()  # flat (token, k) positions, ascending
    experts = local[pos]
    counts = torch.bincount(experts, minlength=num_local_experts)[:num_local_experts]
    offsets = torch.zeros(num_local_experts + 1, dtype=torch.int64, device=dev)
    offsets[1:] = torch.cumsum(counts, 0)
    # A stable sort by expert keeps (token, k) order inside each expert's range.
    order = torch.sort(experts, stable=True).indices
    slot_pos = pos[order]
    slot_of = torch.full((T * k,), -1, dtype=torch.int64, device=dev)
    slot_of[slot_pos] = torch.arange(slot_pos.numel(), dtype=torch.int64, device=dev)
    return RoutingIndex(counts=counts, offsets=offsets, slot_of=slot_of.view(T, k),
                        slot_token=slot_pos // k if k else slot_pos, slot_k=slot_pos % k if k else slot_pos)


def gate_up_tasks(index: RoutingIndex, intermediate_size: int,
                  chunk: int = GATE_UP_CHUNK) -> list[tuple[int, int, int, int]]:
    """Gate-Up tasks in the kernel's order: (local expert, w13 tile, first slot, end slot)."""
    if intermediate_size % W13_TILE_ROWS:
        raise ValueError(f"gate_up_tasks: intermediate_size {intermediate_size} is not a multiple of {W13_TILE_ROWS}")
    tasks = []
    for e in index.active_experts:
        lo, hi = index.expert_range(e)
        for tile in range(intermediate_size // W13_TILE_ROWS):
            for s in range(lo, hi, chunk):
                tasks.append((e, tile, s, min(s + chunk, hi)))
    return tasks


def down_chunk_tokens(top_k: int) -> int:
    """Tokens per Down task: min(256, 1024 // k) (k = 8: 128)."""
    return min(DOWN_MAX_CHUNK, DOWN_MAX_PAIRS // top_k)


def down_tasks(num_tokens: int, hidden_size: int, top_k: int) -> list[tuple[int, int, int]]:
    """Down tasks in the kernel's order: (16-row H tile, first token, end token)."""
    if hidden_size % W2_TILE_ROWS:
        raise ValueError(f"down_tasks: hidden_size {hidden_size} is not a multiple of {W2_TILE_ROWS}")
    chunk = down_chunk_tokens(top_k)
    return [(u, t, min(t + chunk, num_tokens))
            for t in range(0, num_tokens, chunk) for u in range(hidden_size // W2_TILE_ROWS)]
