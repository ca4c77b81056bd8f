"""Run the decode kernel once per case inside a profiler range, for ncu. Default cases (where
the ~10 us of per-call fixed cost at 8/1 heads goes, NOTES.md): 1x128K+31x4K with BF16 and FP8
KV and 64x0.5K BF16, Hq=8, Hkv=1, page 64. With `--heads 64/8 --kv fp8 --cases 1x128K+31x4K,64x4K`
(or the environment variable HPC_PROFILE_DECODE="64/8 fp8 1x128K+31x4K,64x4K", for
tools/gpu_check.sh's HPC_NCU_SCRIPTS): the 64/8 FP8 calls whose SM clock the timeline read at
1.76 GHz (sm__cycles_elapsed.avg.per_second answers it). The plan is built before the range.

    ncu --clock-control none --profile-from-start off --set full \\
        python3 packages/hpc-attention/scripts/profile_decode.py [--heads 64/8 --kv fp8 --cases ...]
"""

import argparse
import os

import torch

import hpc_attention as ha

PAGE = 64
FP8 = torch.float8_e4m3fn


def parse_case(case: str) -> list[int]:
    lens = []
    for part in case.split("+"):
        n, length = part.split("x")
        tokens = int(float(length[:-1]) * 1024) if length.endswith("K") else int(length)
        lens += [tokens] * int(n)
    return lens


ap = argparse.ArgumentParser()
ap.add_argument("--heads", default=None, help="Hq/Hkv, e.g. 64/8 (default: the 8/1 cases above)")
ap.add_argument("--kv", default="bf16,fp8", help="comma list of KV dtypes")
ap.add_argument("--cases", default="1x128K+31x4K", help="comma list of cases")
args = ap.parse_args()
env = os.environ.get("HPC_PROFILE_DECODE")
if env and args.heads is None:
    args.heads, args.kv, args.cases = env.split()
if args.heads is None:  # the default 8/1 set
    setups = [(8, 1, [131072] + [4096] * 31, torch.bfloat16), (8, 1, [131072] + [4096] * 31, FP8),
              (8, 1, [512] * 64, torch.bfloat16)]
else:
    hq, hkv = (int(v) for v in args.heads.split("/"))
    setups = [(hq, hkv, parse_case(c), FP8 if kv == "fp8" else torch.bfloat16)
              for kv in args.kv.split(",") for c in args.cases.split(",")]

runs = []
for hq, hkv, lens, kv_dtype in setups:
    B = len(lens)
    pages = [(n + PAGE - 1) // PAGE for n in lens]
    num_pages = sum(pages)
    k = torch.randn(num_pages, PAGE, hkv, 128, device="cuda").to(kv_dtype)
    v = torch.randn(num_pages, PAGE, hkv, 128, device="cuda").to(kv_dtype)
    pt = torch.zeros(B, max(pages), dtype=torch.int32, device="cuda")
    perm = torch.randperm(num_pages, device="cuda").int()
    pos = 0
    for b, n in enumerate(pages):
        pt[b, :n] = perm[pos:pos + n]
        pos += n
    q = torch.randn(B, hq, 128, device="cuda").to(torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    ws = ha.DecodeWorkspace(B, hkv, hq, max(lens))
    plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ws, kv_dtype=kv_dtype, page_table=pt, page_size=PAGE)
    out = torch.empty(B, hq, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(q, k, v, pt, kv_lens, plan, out=out)  # build + module load outside the range
    runs.append((q, k, v, pt, kv_lens, plan, out))
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for q, k, v, pt, kv_lens, plan, out in runs:
    ha.decode(q, k, v, pt, kv_lens, plan, out=out)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
