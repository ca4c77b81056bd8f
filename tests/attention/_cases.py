"""Building decode inputs for the GPU tests: paged caches with pages in random order, NaN in
every row no request may read (pages past a length and the tail of each last page), and the
FA3-style accuracy check against a float64 reference."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpc_attention.reference import decode_lowp_baseline, decode_reference
from hpc_common.testing import assert_close, error_stats, poison_

FP8 = torch.float8_e4m3fn


@dataclass
class Case:
    q: torch.Tensor
    q_scale: torch.Tensor | None
    k: torch.Tensor
    v: torch.Tensor
    page_table: torch.Tensor
    kv_lens: torch.Tensor
    lens: list[int]
    k_scale: float
    v_scale: float
    sm_scale: float
    max_kv_len: int

    def describe(self) -> str:
        short = self.lens if len(self.lens) <= 8 else self.lens[:8] + ["..."]
        return (f"lens={short} Hq={self.q.shape[1]} Hkv={self.k.shape[2]} page={self.k.shape[1]} "
                f"kv={str(self.k.dtype).replace('torch.', '')} q={str(self.q.dtype).replace('torch.', '')}")


def make_case(lens, num_kv_heads: int, group: int, kv_dtype=torch.bfloat16, *, page_size: int = 64, seed: int = 0,
              q_dtype=torch.bfloat16, device="cuda", extra_pages: int = 3, max_kv_len: int | None = None) -> Case:
    gen = torch.Generator(device=device).manual_seed(seed)
    cpu_gen = torch.Generator().manual_seed(seed)
    B = len(lens)
    need = [(L + page_size - 1) // page_size for L in lens]
    max_kv_len = max_kv_len if max_kv_len is not None else max(1, max(lens))
    max_pages = max(1, (max_kv_len + page_size - 1) // page_size)
    num_pages = sum(need) + extra_pages
    shape = (num_pages, page_size, num_kv_heads, 128)
    if kv_dtype == FP8:
        k = (torch.randn(shape, generator=gen, device=device) * 2).to(FP8)
        v = (torch.randn(shape, generator=gen, device=device) * 2).to(FP8)
        k_scale, v_scale = 0.37, 0.61
    else:
        k = torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16)
        v = torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16)
        k_scale = v_scale = 1.0
    perm = torch.randperm(num_pages, generator=cpu_gen)
    used, spare = perm[:sum(need)], perm[sum(need):]
    page_table = torch.empty(B, max_pages, dtype=torch.int32)
    pos = 0
    for b, n in enumerate(need):
        page_table[b, :n] = used[pos:pos + n].int()
        pos += n
        # Entries past the length point at poisoned pages: reading them would show as NaN.
        fill = spare[torch.randint(len(spare), (max_pages - n,), generator=cpu_gen)] if len(spare) else 0
        page_table[b, n:] = fill if isinstance(fill, int) else fill.int()
        L = lens[b]
        if n and L % page_size:
            last = int(page_table[b, n - 1])
            poison_(k[last, L % page_size:])
            poison_(v[last, L % page_size:])
    for pg in spare.tolist():
        poison_(k[pg])
        poison_(v[pg])
    Hq = num_kv_heads * group
    q_scale = None
    if q_dtype == FP8:
        q = (torch.randn(B, Hq, 128, generator=gen, device=device) * 3).to(FP8)
        q_scale = torch.rand(B, Hq, generator=gen, device=device) * 0.5 + 0.1
    else:
        q = torch.randn(B, Hq, 128, generator=gen, device=device, dtype=torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    return Case(q=q, q_scale=q_scale, k=k, v=v, page_table=page_table.to(device), kv_lens=kv_lens, lens=list(lens),
                k_scale=k_scale, v_scale=v_scale, sm_scale=128 ** -0.5, max_kv_len=max_kv_len)


def reference(case: Case, dtype=torch.float64) -> torch.Tensor:
    return decode_reference(case.q, case.k, case.v, case.page_table, case.lens, sm_scale=case.sm_scale,
                            k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale, dtype=dtype)


def check_accuracy(out: torch.Tensor, case: Case, what: str = "decode") -> dict:
    """FA3-style rule: error against float64 at most twice PyTorch's own BF16 error, plus a
    small floor; reports where it fails."""
    ref = reference(case)
    base = decode_lowp_baseline(case.q, case.k, case.v, case.page_table, case.lens, sm_scale=case.sm_scale,
                                k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale)
    ours = error_stats(out, ref)
    theirs = error_stats(base, ref)
    assert torch.isfinite(out.float()).all(), f"{what}: non-finite output for {case.describe()}"
    assert_close(out, ref, atol=2 * theirs["max_abs_err"] + 2e-3, name=f"{what} [{case.describe()}]")
    assert ours["rel_err"] <= 2 * theirs["rel_err"] + 1e-3, (
        f"{what}: rel err {ours['rel_err']:.3e} > 2 x torch-bf16 {theirs['rel_err']:.3e} + 1e-3 for {case.describe()}")
    return ours
