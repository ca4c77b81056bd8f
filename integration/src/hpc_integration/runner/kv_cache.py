"""The paged KV cache: per layer K and V of shape [num_pages, page_size, Hkv, D] (NHD, the layout
hpc_attention reads), BF16, FP8 E4M3 with one per-tensor scale for K and one for V, or float32 (the
reference backend). Request b owns the pages of row b of the page table; slot = page * page_size +
offset is where position p of request b lives (page_table[b, p // page_size], p % page_size).

Pages are handed out once, when the cache is made: every request gets enough pages for max_kv_len
tokens, in a scrambled order (so nothing works by accident on contiguous pages).
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


class PagedKVCache:
    def __init__(self, num_layers: int, max_batch: int, max_kv_len: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str, *, scale: float = 1.0, seed: int = 0):
        if page_size < 1 or page_size & (page_size - 1):
            raise ValueError(f"PagedKVCache: page_size must be a power of two, got {page_size}")
        if dtype not in (torch.bfloat16, FP8, torch.float32):
            raise ValueError(f"PagedKVCache: dtype must be bfloat16, float8_e4m3fn or float32, got {dtype}")
        self.page_size, self.dtype, self.device = page_size, dtype, torch.device(device)
        self.max_batch, self.max_kv_len = max_batch, max_kv_len
        self.pages_per_request = -(-max_kv_len // page_size)
        self.num_pages = max_batch * self.pages_per_request
        shape = (num_layers, self.num_pages, page_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        # FP8: stored = e4m3(value / scale); the other dtypes store values (scale 1).
        self.scale = float(scale) if dtype == FP8 else 1.0
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(self.num_pages, generator=g).to(torch.int32)
        self.page_table = order.view(max_batch, self.pages_per_request).to(self.device)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[i], self.v[i]

    def slots(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """int64 slots of (request row, position) pairs (both [T] tensors on the cache's device)."""
        rows, positions = rows.long(), positions.long()
        pages = self.page_table[rows, positions // self.page_size].long()
        return pages * self.page_size + positions % self.page_size

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Values -> the cache's stored dtype (FP8: x / scale, saturated, round to nearest even)."""
        if self.dtype == FP8:
            return (x.float() / self.scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        return x.to(self.dtype)

    def decode_values(self, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Stored -> values in `dtype`."""
        y = x.to(dtype)
        return y * self.scale if self.dtype == FP8 else y

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v [T, Hkv, D] values -> their slots of `layer` (torch indexing; FP8 moved as bytes, since
        index_put has no FP8 kernel on every device)."""
        for cache, x in ((self.k[layer], k), (self.v[layer], v)):
            flat = cache.view(-1, *cache.shape[2:])
            rows = self.encode(x)
            if self.dtype == FP8:
                flat, rows = flat.view(torch.uint8), rows.view(torch.uint8)
            flat[slots.long()] = rows

    def gather(self, layer: int, row: int, length: int, dtype: torch.dtype = torch.float32):
        """(k, v) [length, Hkv, D] values of request `row`'s first `length` positions."""
        n = -(-length // self.page_size)
        pages = self.page_table[row, :n].long()
        out = []
        for cache in (self.k[layer], self.v[layer]):
            x = cache[pages].reshape(n * self.page_size, *cache.shape[2:])[:length]
            out.append(self.decode_values(x, dtype))
        return out[0], out[1]

    def fill_random(self, rows: int, length: int, seed: int, std: float = 1.0) -> None:
        """Synthetic context: N(0, std) K and V at positions [0, length) of requests [0, rows), every
        layer (one layer at a time, so the float32 temporary stays one layer's size)."""
        g = torch.Generator(device=self.device).manual_seed(seed)
        n = -(-length // self.page_size)
        pages = self.page_table[:rows, :n].reshape(-1).long()
        for cache in (self.k, self.v):
            for i in range(cache.shape[0]):
                vals = torch.randn((pages.numel(), *cache.shape[2:]), generator=g, device=self.device) * std
                cache[i].view(torch.uint8 if self.dtype == FP8 else self.dtype)[pages] = (
                    self.encode(vals).view(torch.uint8) if self.dtype == FP8 else self.encode(vals))
