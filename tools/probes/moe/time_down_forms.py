"""Probe: the two Down forms of the fused MoE (hpc_moe.heuristics: "tile" and "expert") at Hy3 TP8
(E = 192, top-8, H = 4096, I = 192), FP8 block and BF16, over T, timed cold (whole call in a CUDA graph
after a 128 MB written flush, hpc_common.bench.cold_us). Per row: the whole call in each form, the Down
stage alone in each form (the tile kernel; the expert kernel plus the top-k reduce, reading the index
and intermediate of a full call just before), the Down byte floors, and which form the heuristic picks.
Both forms are checked against the float64 reference first. This is the measurement that sets
heuristics.EXPERT_DOWN_MIN_PAIRS(_PER_EXPERT) (the crossover T) and decides whether the expert form stays.

    python tools/probes/moe/time_down_forms.py [--T 16,64,...] [--quant fp8_block,bf16] [--jsonl OUT/x.jsonl]

The FP8 rows' "alone" times include the input quantiser (hpc_common, ~5 us), the same in both forms.
--jsonl also writes one JSON line per row (tools/probe_results.py turns them into a results file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "moe"))
from test_fused_moe_gpu import _check_close, _reference, _run, _setup  # noqa: E402

BW = 4.27e6  # bytes per us


class _Only:
    """The extension with only the kernels named in `keep` launched (the others do nothing)."""

    def __init__(self, real, keep):
        self.real, self.keep = real, keep

    def __getattr__(self, name):
        return getattr(self.real, name) if name in self.keep else (lambda *a, **k: None)


def down_floors_us(c, T, K, H, I, fp8):
    """(tile form, expert form) Down floors: the hit experts' w2 (+ scales), the intermediate and out;
    the expert form adds its BF16 partials, written once and read once."""
    w = c.weights
    ids = c.ids.long()
    local = (ids >= 0) & (ids < w.num_local_experts)
    hit = torch.unique(ids[local]).numel()
    elem = 1 if fp8 else 2
    w2 = hit * H * I * elem + (hit * w.w2_scale[0].numel() * 4 if fp8 else 0)
    common = w2 + int(local.sum()) * I * 2 + T * H * 2
    partials = 2 * int(local.sum()) * H * 2
    return common / BW, (common + partials) / BW


def main():
    from hpc_common.bench import cold_us
    from hpc_moe import _ext, heuristics, kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--T", default="16,64,96,128,192,256,512,1024")
    ap.add_argument("--quant", default="fp8_block,bf16")
    ap.add_argument("--jsonl", type=Path, default=None)
    args = ap.parse_args()
    jsonl = args.jsonl.open("w") if args.jsonl else None
    real = _ext.load()
    H, I, E, K = 4096, 192, 192, 8
    print("quant      T    | call tile  call expert | down tile  down expert | floor tile  floor expert | heuristic")
    for quant in args.quant.split(","):
        fp8 = quant != "bf16"
        for T in (int(t) for t in args.T.split(",")):
            c = _setup(quant, T, H, I, E, K, 1, 0, "uniform", 7)
            ref = None
            call, alone = {}, {}
            for down in ("tile", "expert"):
                out = _run(c, down=down)
                torch.cuda.synchronize()
                ref = _reference(c) if ref is None else ref
                _check_close(out, ref, c.weights.quant, f"probe {quant} T={T} down={down}")
                call[down] = cold_us(lambda: _run(c, out=out, down=down), reps=50)
                keep = {"down"} if down == "tile" else {"down_experts", "topk_reduce"}
                _run(c, out=out, down=down)  # the index and intermediate the Down kernels read
                kernels._ext.load = lambda keep=keep: _Only(real, keep)
                try:
                    alone[down] = cold_us(lambda: _run(c, out=out, down=down, unfused=True), reps=50)
                finally:
                    kernels._ext.load = lambda: real
            ft, fe = down_floors_us(c, T, K, H, I, fp8)
            pick = heuristics.down_form(T * K, E, I, fp8)
            print(f"{quant:9s} {T:5d} | {call['tile']:9.1f}  {call['expert']:11.1f} | {alone['tile']:9.1f}  "
                  f"{alone['expert']:11.1f} | {ft:10.1f}  {fe:12.1f} | {pick}", flush=True)
            if jsonl:
                for down in ("tile", "expert"):
                    row = {"case": f"down_{down}", "model": "hy3_tp8", "T": T, "dtype": quant, "method": "cold",
                           "call_us": round(call[down], 2), "down_alone_us": round(alone[down], 2),
                           "down_floor_us": round(ft if down == "tile" else fe, 2), "heuristic": pick}
                    jsonl.write(json.dumps(row) + "\n")
                jsonl.flush()


if __name__ == "__main__":
    main()
