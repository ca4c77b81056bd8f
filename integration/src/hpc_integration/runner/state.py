"""The static buffers of a decode step for one batch size: what a captured graph reads and writes.

A step reads `ids` (the token of each request) at `positions`, writes its K / V at `slots`, attends
over `kv_lens` = positions + 1 tokens, writes `logits`, then advances the state in place (next
greedy token into `ids`, positions and lengths + 1, the next slots from the page table), so graph
replays run consecutive decode steps with no host work between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepState:
    ids: torch.Tensor         # [B] int64
    positions: torch.Tensor   # [B] int32
    kv_lens: torch.Tensor     # [B] int32
    slots: torch.Tensor       # [B] int64
    rows: torch.Tensor        # [B] int64: the cache rows (requests) of the batch
    page_table: torch.Tensor  # [B, pages] int32: rows of the cache's page table
    logits: torch.Tensor      # [B, V] float32

    @classmethod
    def new(cls, cache, batch: int, vocab: int) -> "StepState":
        if not 1 <= batch <= cache.max_batch:
            raise ValueError(f"StepState: batch must be in [1, {cache.max_batch}] (the cache's max_batch), got {batch}")
        dev = cache.device
        z = lambda dtype: torch.zeros(batch, dtype=dtype, device=dev)  # noqa: E731
        return cls(ids=z(torch.int64), positions=z(torch.int32), kv_lens=z(torch.int32), slots=z(torch.int64),
                   rows=torch.arange(batch, device=dev), page_table=cache.page_table[:batch],
                   logits=torch.zeros(batch, vocab, dtype=torch.float32, device=dev))

    @property
    def batch(self) -> int:
        return self.ids.shape[0]

    def start(self, cache, ids: torch.Tensor, position: int | torch.Tensor) -> None:
        """Next step feeds `ids` [B] at `position` (an int, or [B] positions)."""
        pos = torch.as_tensor(position, device=self.positions.device).to(torch.int32).expand(self.batch)
        if int(pos.max()) >= cache.max_kv_len:
            raise ValueError(f"StepState.start: position {int(pos.max())} is past the cache's max_kv_len "
                             f"{cache.max_kv_len}")
        self.ids.copy_(ids.to(self.ids.device, torch.int64))
        self.positions.copy_(pos)
        self.kv_lens.copy_(pos + 1)
        self.slots.copy_(cache.slots(self.rows, self.positions))

    def advance(self, cache) -> None:
        """In place, recordable in a graph: the greedy token of `logits` becomes the next input."""
        self.ids.copy_(self.logits.argmax(-1))
        self.positions.add_(1)
        self.kv_lens.add_(1)
        self.slots.copy_(cache.slots(self.rows, self.positions))

    def snapshot(self) -> tuple[torch.Tensor, ...]:
        return tuple(t.clone() for t in (self.ids, self.positions, self.kv_lens, self.slots, self.logits))

    def restore(self, snap) -> None:
        for t, s in zip((self.ids, self.positions, self.kv_lens, self.slots, self.logits), snap):
            t.copy_(s)
