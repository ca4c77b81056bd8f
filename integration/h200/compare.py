"""Verdict of run_h200.sh from the files it wrote into OUT_DIR (prints one line per check, then
"h200 integration: PASS" or "h200 integration: FAIL: <checks>").

usage: compare.py OUT_DIR
"""

import json
import sys
from pathlib import Path

LOGPROB_ATOL = 0.05  # BF16 forward passes through different kernels; greedy ids must be equal
# The start-up and first-call lines of hpc_integration.sglang (attention.py / prologue.py)
PROLOGUE_ON = "fused prologue on: 2 of 2 Qwen3MoeAttention layers"
PROLOGUE_RAN = "fused prologue ran: decode QK-Norm, RoPE and KV write by hpc_attention.qk_norm_rope_store (kernels)"
PROLOGUE_OFF = "fused prologue off (SGLang's QK-Norm, RoPE and KV write run): HPC_SGLANG_PROLOGUE=0"


def main(out: str) -> None:
    d = Path(out)
    fails, lines = [], []

    def check(name, ok, detail=""):
        lines.append(f"{'PASS' if ok else 'FAIL'} {name} {detail}".rstrip())
        if not ok:
            fails.append(name)

    def load(name):
        p = d / name
        return json.loads(p.read_text()) if p.exists() else None

    kit = load("kit.json")
    if kit is None:
        check("kit", False, "no kit.json")
    else:
        for be in ("hpc", "triton"):
            for mode in ("eager", "cuda_graph_decode"):
                recs = [r for r in kit["records"] if r["backend"] == be and r["mode"] == mode]
                bad = [f"{r['case']}:{r['status']}" for r in recs if r["status"] != "pass"]
                check(f"kit {be} {mode}", bool(recs) and not bad, f"{len(recs) - len(bad)}/{len(recs)} {bad[:4]}")
        check("kit used our decode kernel", kit["calls"].get("attention.kernel", 0) > 0, str(kit["calls"]))
    ops = load("ops.json")
    if ops is None:
        check("ops", False, "no ops.json")
    else:
        for r in ops["rows"]:
            check(f"ops {r['check']}", r["ok"], json.dumps({k: v for k, v in r.items() if k not in ("check", "ok")}))
    layer = load("layer.json")
    if layer is None:
        check("layer", False, "no layer.json")
    else:
        for c in layer["cases"]:
            check(f"layer {c['case']} ({c['expect']})", not c["failures"], "; ".join(c["failures"]))
        fused = [c for c in layer["cases"] if c["expect"] == "fused"]
        check("layer prologue on the kernel", layer["device"] == "cuda" and bool(fused)
              and all(c["calls_ours"].get("prologue.kernel") == 1 for c in fused),
              str([c["calls_ours"] for c in fused]))
    runs = {n: load(f"engine_{n}.json") for n in ("default_graph", "ours_nograph", "ours_graph",
                                                  "ours_fp32router_graph")}
    base = runs["default_graph"]
    for n, r in runs.items():
        if r is None:
            check(f"engine {n}", False, "no output")
            continue
        check(f"engine {n} repeatable", all(x["repeat_same"] for x in r["results"]))
        if base is None or n == "default_graph":
            continue
        same = [x["ids"] == y["ids"] for x, y in zip(r["results"], base["results"])]
        diff = max((abs(a - b) for x, y in zip(r["results"], base["results"])
                    for a, b in zip(x["logprobs"], y["logprobs"]) if a is not None and b is not None), default=0.0)
        if n == "ours_fp32router_graph":  # other dummy gate weights (drawn in FP32): informative only
            lines.append(f"INFO engine {n} same tokens as default: {same}, max |dlogprob| {diff:.3g}")
        else:
            check(f"engine {n} same tokens as default", all(same), str(same))
            check(f"engine {n} logprobs within {LOGPROB_ATOL}", diff <= LOGPROB_ATOL, f"max {diff:.3g}")
    for n, words in (("ours_graph", "decode on hpc_attention kernels"), ("ours_graph", "MoE layers run hpc_moe"),
                     ("ours_nograph", PROLOGUE_ON), ("ours_nograph", PROLOGUE_RAN),
                     ("ours_graph", PROLOGUE_ON), ("ours_graph", PROLOGUE_RAN),
                     ("ours_fp32router_graph", PROLOGUE_OFF),
                     ("ours_fp32router_graph", "scored by hpc_router_gemm (kernels)")):
        log = d / f"engine_{n}.log"
        check(f"engine {n} log says '{words}'", log.exists() and words in log.read_text())
    print("\n".join(lines))
    print("h200 integration: PASS" if not fails else f"h200 integration: FAIL: {', '.join(fails)}")


if __name__ == "__main__":
    main(sys.argv[1])
