"""Probe: the fused MoE (hpc_moe.kernels.run_fused_moe) at Hy3 TP8 (E=192, top-8, H=4096, I=192),
T = 1, 16, 256, FP8 block and BF16, timed cold (whole call in a CUDA graph with a 128 MB written flush
and two events, hpc_common.bench.cold_us). Prints one line per row with the byte
floor (distinct experts' weights and scales plus activations over 4.27 TB/s) and each kernel alone."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "moe"))
from test_fused_moe_gpu import _check_close, _reference, _run, _setup  # noqa: E402


def cold_us(fn):
    """hpc_common.bench's cold method (events inside the graph, after a written 128 MB flush)."""
    from hpc_common.bench import cold_us as bench_cold_us

    return bench_cold_us(fn, reps=50)


def floor_us(c, T):
    w = c.weights
    H, I = w.hidden_size, w.intermediate_size
    elem = 1 if w.quant != "bf16" else 2
    ids = c.ids.long()
    hit = torch.unique(ids[(ids >= 0) & (ids < w.num_local_experts)]).numel()
    wb = hit * 3 * H * I * elem
    sb = hit * (w.w13_scale[0].numel() + w.w2_scale[0].numel()) * 4 if elem == 1 else 0
    act = T * H * 2 * 2
    return (wb + sb + act) / 4.27e6


class _Only:
    """The extension with only the kernels named in `keep` launched (the others do nothing): the
    stages' own times (the FP8 quantiser always runs)."""

    def __init__(self, real, keep):
        self.real, self.keep = real, keep

    def __getattr__(self, name):
        return getattr(self.real, name) if name in self.keep else (lambda *a, **k: None)


def main():
    from hpc_moe import _ext, kernels

    real = _ext.load()
    for quant in ("fp8_block", "bf16"):
        for T in (1, 16, 256):
            c = _setup(quant, T, 4096, 192, 192, 8, 1, 0, "uniform", 7)
            fl = floor_us(c, T)
            out = _run(c)
            torch.cuda.synchronize()
            _check_close(out, _reference(c), c.weights.quant, f"probe {quant} T={T}")
            ours = cold_us(lambda: _run(c, out=out))
            unf = cold_us(lambda: _run(c, out=out, unfused=True))
            parts = {}
            for name, keep in (("quant", set()), ("gate_up", {"gate_up"}), ("down", {"down"})):
                kernels._ext.load = lambda keep=keep: _Only(real, keep)
                parts[name] = cold_us(lambda: _run(c, out=out, unfused=True))
            kernels._ext.load = lambda: real
            print(f"hy3_tp8 {quant:9s} T={T:4d} cold ours {ours:7.1f} us  unfused {unf:7.1f} us  "
                  f"floor {fl:6.1f} us  target {1.25 * fl + 6:6.1f} us | alone: quant {parts['quant']:.1f} "
                  f"+gate_up {parts['gate_up']:.1f} +down {parts['down']:.1f}", flush=True)


if __name__ == "__main__":
    main()
