"""Probe: one small case per format and shape family, printing the error figures (and where the
output differs most) instead of asserting, to diagnose a failing kernel in one GPU call."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "moe"))
from test_fused_moe_gpu import QUANTS, _reference, _run, _setup  # noqa: E402

CASES = [(1, 128, 64, 8, 2, 1, 0), (20, 256, 192, 16, 4, 2, 1), (300, 4096, 192, 192, 8, 1, 0),
         (1000, 256, 192, 32, 16, 1, 0)]

for quant in QUANTS:
    for T, H, I, E, K, eps, epr in CASES:
        c = _setup(quant, T, H, I, E, K, eps, epr, "uniform", 3)
        out = _run(c)
        torch.cuda.synchronize()
        ref = _reference(c)
        g, r = out.double(), ref
        nan_rows = out.isnan().any(1).sum().item()
        d = (g - r).abs().nan_to_num(float("inf"))
        cos = torch.nn.functional.cosine_similarity(g.flatten().nan_to_num(0), r.flatten(), dim=0).item()
        idx = d.flatten().argmax().item()
        print(f"{quant:17s} T={T:4d} H={H:4d} I={I:4d} E={E:3d} K={K} ep={eps}/{epr}: cos {cos:.7f} "
              f"maxrel {d.max().item() / r.abs().max().item():.3g} nan_rows {nan_rows} "
              f"worst (t={idx // H}, h={idx % H}) "
              f"got {g.flatten()[idx].item():.4g} ref {r.flatten()[idx].item():.4g}", flush=True)
