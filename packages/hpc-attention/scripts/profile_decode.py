"""Run the decode kernel once per case inside a profiler range, for ncu. Default cases (where
the ~10 us of per-call fixed cost at 8/1 heads goes, NOTES.md): 1x128K+31x4K with BF16 and FP8
KV and 64x0.5K BF16, Hq=8, Hkv=1, page 64. With `--heads 64/8 --kv fp8 --cases 1x128K+31x4K,64x4K`
(or the environment variable HPC_PROFILE_DECODE="64/8 fp8 1x128K+31x4K,64x4K", for
tools/gpu_check.sh's HPC_NCU_SCRIPTS): the 64/8 FP8 calls whose SM clock the timeline read at
1.76 GHz (sm__cycles_elapsed.avg.per_second answers it). Cases and inputs are the benchmark's
(benchmarks/bench_decode_attention.py); the plan is built before the range.

    ncu --clock-control none --profile-from-start off --set full \\
        python3 packages/hpc-attention/scripts/profile_decode.py [--heads 64/8 --kv fp8 --cases ...]
"""

import argparse
import os
import sys
from pathlib import Path

import torch

import hpc_attention as ha

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_decode_attention import PAGE, make_inputs, parse_case  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--heads", default=None, help="Hq/Hkv, e.g. 64/8 (default: the 8/1 cases above)")
ap.add_argument("--kv", default="bf16,fp8", help="comma list of KV dtypes")
ap.add_argument("--cases", default="1x128K+31x4K", help="comma list of cases")
args = ap.parse_args()
env = os.environ.get("HPC_PROFILE_DECODE")
if env and args.heads is None:
    args.heads, args.kv, args.cases = env.split()
if args.heads is None:  # the default 8/1 set
    setups = [(8, 1, "1x128K+31x4K", "bf16"), (8, 1, "1x128K+31x4K", "fp8"), (8, 1, "64x0.5K", "bf16")]
else:
    hq, hkv = (int(v) for v in args.heads.split("/"))
    setups = [(hq, hkv, c, kv) for kv in args.kv.split(",") for c in args.cases.split(",")]

gen = torch.Generator(device="cuda").manual_seed(0)
runs = []
for hq, hkv, case, kv in setups:
    lens = parse_case(case)
    q, k, v, pt, kv_lens, (ks, vs) = make_inputs(lens, hq, hkv, kv, gen)
    ws = ha.DecodeWorkspace(len(lens), hkv, hq, max(lens))
    plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ws, kv_dtype=k.dtype, page_table=pt, page_size=PAGE)
    out = torch.empty(len(lens), hq, 128, dtype=torch.bfloat16, device="cuda")
    call = (lambda q=q, k=k, v=v, pt=pt, kv_lens=kv_lens, plan=plan, ks=ks, vs=vs, out=out:
            ha.decode(q, k, v, pt, kv_lens, plan, k_scale=ks, v_scale=vs, out=out))
    call()  # build + module load outside the range
    runs.append(call)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for call in runs:
    call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
