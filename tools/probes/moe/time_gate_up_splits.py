"""Probe: the Gate-Up split-K of the fused MoE (run_fused_moe(gate_up_splits=S), moe_gate_up_split.cuh) at Hy3 TP8
(E = 192, top-8, H = 4096, I = 192), S = 1 / 2 / 4 / 8 over small T, FP8 block and BF16. Every (T, S) is checked
against the float64 reference first. Per row: the whole call cold (CUDA graph after a 128 MB written flush,
hpc_common.bench.cold_us) and by rotation (L copies of the prepared weights, calls back to back in one graph,
hpc_common.bench.rotation_us), the Gate-Up kernel alone cold (FP8: with the input quantiser, whose own time is
printed once per T), the byte floors of the call and of the Gate-Up stage, and the S that heuristics.gate_up_splits
(today 1) and heuristics.predicted_gate_up_splits pick. This is the measurement that decides whether
gate_up_splits takes the predicted rule (DESIGN.md, "Gate-Up split-K").

    python tools/probes/moe/time_gate_up_splits.py [--T 1,2,...] [--quant fp8_block,bf16] [--splits 1,2,4,8]
        [--method cold|rotation|both] [--jsonl OUT/x.jsonl]

--jsonl also writes one JSON line per row (tools/probe_results.py turns them into a results file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "moe"))
from test_fused_moe_gpu import _check_close, _reference, _run, _setup  # noqa: E402

BW = 4.27e6  # bytes per us
H, I, E, K = 4096, 192, 192, 8


class _Only:
    """The extension with only the kernels named in `keep` launched (the others do nothing)."""

    def __init__(self, real, keep):
        self.real, self.keep = real, keep

    def __getattr__(self, name):
        return getattr(self.real, name) if name in self.keep else (lambda *a, **k: None)


def floors_us(c, T):
    """(whole call, Gate-Up stage) byte floors: the hit experts' weights and scales plus activations."""
    w = c.weights
    fp8 = w.quant != "bf16"
    elem = 1 if fp8 else 2
    ids = c.ids.long()
    local = (ids >= 0) & (ids < w.num_local_experts)
    hit = torch.unique(ids[local]).numel()
    s13 = hit * w.w13_scale[0].numel() * 4 if fp8 else 0
    s2 = hit * w.w2_scale[0].numel() * 4 if fp8 else 0
    pairs = int(local.sum())
    gate_up = hit * 2 * H * I * elem + s13 + T * H * elem + pairs * I * 2
    call = gate_up + hit * H * I * elem + s2 + T * H * 2 * 2
    return call / BW, gate_up / BW


def _copy_weights(w):
    return SimpleNamespace(**{**vars(w), **{n: getattr(w, n).clone() for n in ("w13", "w2", "w13_scale", "w2_scale")
                                             if getattr(w, n) is not None}})


def main():
    from hpc_common.bench import cold_us, rotation_us
    from hpc_common.bench.timing import rotation_copies
    from hpc_common.launch import get_num_sms
    from hpc_moe import _ext, heuristics, kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--T", default="1,2,3,4,5,8,16")
    ap.add_argument("--quant", default="fp8_block,bf16")
    ap.add_argument("--splits", default="1,2,4,8")
    ap.add_argument("--method", default="both", choices=("cold", "rotation", "both"))
    ap.add_argument("--jsonl", type=Path, default=None)
    args = ap.parse_args()
    jsonl = args.jsonl.open("w") if args.jsonl else None
    real = _ext.load()
    sms = get_num_sms(torch.device("cuda"))
    print(f"Hy3 TP8 (E={E}, top-{K}, H={H}, I={I}), {sms} SMs, us")
    print("quant      T  S | call cold  call rot | gate_up cold (quant) | floor call  gate_up | heuristic predicted")
    for quant in args.quant.split(","):
        fp8 = quant != "bf16"
        for T in (int(t) for t in args.T.split(",")):
            c = _setup(quant, T, H, I, E, K, 1, 0, "uniform", 7)
            fl_call, fl_gu = floors_us(c, T)
            pick = heuristics.gate_up_splits(T * K, E, I, H, sms, fp8)
            pred = heuristics.predicted_gate_up_splits(T * K, E, I, H, sms, fp8)
            out = torch.empty_like(c.hidden)
            copies = None
            if args.method != "cold":
                n = rotation_copies(int(fl_call * BW))
                copies = [SimpleNamespace(**{**vars(c), "weights": _copy_weights(c.weights)}) for _ in range(n)]
            kernels._ext.load = lambda: _Only(real, set())
            try:
                quant_alone = cold_us(lambda: _run(c, out=out, unfused=True), reps=50) if fp8 else 0.0
            finally:
                kernels._ext.load = lambda: real
            ref = None
            for S in (int(s) for s in args.splits.split(",")):
                if heuristics.gate_up_split_problem(S, T * K, H, fp8) is not None:
                    continue
                got = _run(c, gate_up_splits=S)
                torch.cuda.synchronize()
                ref = _reference(c) if ref is None else ref
                _check_close(got, ref, c.weights.quant, f"probe {quant} T={T} S={S}")
                assert not c.ws.split_counters.any(), f"probe {quant} T={T} S={S}: counters not reset"
                row = {"case": "gate_up_splits", "model": "hy3_tp8", "T": T, "dtype": quant, "splits": S,
                       "floor_us": round(fl_call, 2), "gate_up_floor_us": round(fl_gu, 2), "heuristic": pick,
                       "predicted": pred}
                cold = rot = float("nan")
                if args.method != "rotation":
                    cold = cold_us(lambda: _run(c, out=out, gate_up_splits=S), reps=50)
                    kernels._ext.load = lambda: _Only(real, {"gate_up"})
                    try:
                        gu = cold_us(lambda: _run(c, out=out, unfused=True, gate_up_splits=S), reps=50)
                    finally:
                        kernels._ext.load = lambda: real
                    row.update(method="cold", median_us=round(cold, 2), gate_up_alone_us=round(gu, 2),
                               quantiser_alone_us=round(quant_alone, 2))
                    if jsonl:
                        jsonl.write(json.dumps(row) + "\n")
                if copies is not None:
                    fns = [lambda ci=ci: _run(ci, out=out, gate_up_splits=S) for ci in copies]
                    rot = rotation_us(fns)
                    if jsonl:
                        jsonl.write(json.dumps({**{k: v for k, v in row.items() if not k.endswith("alone_us")},
                                                "method": "rotation", "median_us": round(rot, 2),
                                                "copies": len(copies)}) + "\n")
                if jsonl:
                    jsonl.flush()
                gu_txt = f"{gu:7.1f} ({quant_alone:4.1f})" if args.method != "rotation" else "      -       "
                print(f"{quant:9s} {T:3d} {S:2d} | {cold:9.1f} {rot:9.1f} | {gu_txt:>20s} | {fl_call:10.1f} "
                      f"{fl_gu:8.1f} | {pick:9d} {pred:9d}", flush=True)
            del copies
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
