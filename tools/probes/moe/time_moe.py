"""Probe: the fused MoE (hpc_moe.kernels.run_fused_moe) per stage and per tile-form Down split, timed cold
(whole call in a CUDA graph with a 128 MB written flush and two events, hpc_common.bench.cold_us).

Shapes: hy3_tp8 (E=192, top-8, H=4096, I=192) and qwen3_30b (E=128, top-8, H=2048, I=768). Per row: the byte
floor (distinct experts' weights and scales plus activations over 4.27 TB/s), the whole call with the Down
splits the heuristic picks, each stage alone (Gate-Up; the tile-form Down at 1 split), the whole call in
the expert form (where the format and I allow it), and the whole call with each forced split count
(`--splits`, tile form). Every variant is checked against the float64
reference first. This is the measurement behind heuristics.down_tile_splits.

    python tools/probes/moe/time_moe.py [--models qwen3_30b,hy3_tp8] [--T 1,4,16,64] [--quant bf16,fp8_block]
                                        [--splits 1,2,3,4] [--jsonl OUT/x.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "moe"))
from test_fused_moe_gpu import _check_close, _reference, _run, _setup  # noqa: E402

SHAPES = {"hy3_tp8": (4096, 192, 192, 8), "qwen3_30b": (2048, 768, 128, 8)}  # H, I, E, K


def cold_us(fn):
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
    """The extension with only the kernels named in `keep` launched (the others do nothing)."""

    def __init__(self, real, keep):
        self.real, self.keep = real, keep

    def __getattr__(self, name):
        return getattr(self.real, name) if name in self.keep else (lambda *a, **k: None)


def main():
    from hpc_common.launch import get_num_sms
    from hpc_moe import _ext, heuristics, kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="qwen3_30b,hy3_tp8")
    ap.add_argument("--T", default="1,4,16,64")
    ap.add_argument("--quant", default="bf16,fp8_block")
    ap.add_argument("--splits", default="1,2,3,4")
    ap.add_argument("--jsonl", type=Path, default=None)
    args = ap.parse_args()
    jsonl = args.jsonl.open("w") if args.jsonl else None
    real = _ext.load()
    sms = get_num_sms(torch.device("cuda"))
    for model in args.models.split(","):
        H, I, E, K = SHAPES[model]
        for quant in args.quant.split(","):
            for T in (int(t) for t in args.T.split(",")):
                c = _setup(quant, T, H, I, E, K, 1, 0, "uniform", 7)
                out = _run(c)
                torch.cuda.synchronize()
                ref = _reference(c)
                _check_close(out, ref, c.weights.quant, f"probe {model} {quant} T={T}")
                form = heuristics.down_form(T * K, E, I, quant != "bf16")
                pick = kernels.window_down_splits(c.weights, T, K, out, c.ws, sms) if form == "tile" else 0
                row = {"model": model, "quant": quant, "T": T, "method": "cold", "floor_us": round(floor_us(c, T), 2),
                       "form": form, "splits_picked": pick, "call_us": round(cold_us(lambda: _run(c, out=out)), 2)}
                for name, keep in (("gate_up", {"gate_up"}), ("down1", {"down"})):
                    _run(c, out=out, down="tile", down_splits=1)
                    kernels._ext.load = lambda keep=keep: _Only(real, keep)
                    try:
                        row[f"{name}_alone_us"] = round(cold_us(
                            lambda: _run(c, out=out, unfused=True, down="tile", down_splits=1)), 2)
                    finally:
                        kernels._ext.load = lambda: real
                if heuristics.expert_down_supported(I, quant != "bf16"):
                    o = _run(c, down="expert")
                    torch.cuda.synchronize()
                    _check_close(o, ref, c.weights.quant, f"probe {model} {quant} T={T} expert form")
                    row["call_expert_us"] = round(cold_us(lambda: _run(c, out=out, down="expert")), 2)
                for s in (int(x) for x in args.splits.split(",")):
                    o = _run(c, down="tile", down_splits=s)
                    torch.cuda.synchronize()
                    _check_close(o, ref, c.weights.quant, f"probe {model} {quant} T={T} splits={s}")
                    row[f"call_tile_s{s}_us"] = round(cold_us(lambda s=s: _run(c, out=out, down="tile",
                                                                               down_splits=s)), 2)
                print(json.dumps(row), flush=True)
                if jsonl:
                    jsonl.write(json.dumps(row) + "\n")
                    jsonl.flush()


if __name__ == "__main__":
    main()
