"""Run the decode kernel once per case inside a profiler range, for ncu: where the ~10 us of
per-call fixed cost at 8/1 heads goes (NOTES.md). Cases: 1x128K+31x4K with BF16 and FP8 KV and
64x0.5K BF16, Hq=8, Hkv=1, page 64; the plan is built before the range.

    ncu --clock-control none --profile-from-start off --set full \\
        python3 packages/hpc-attention/scripts/profile_decode.py
"""

import torch

import hpc_attention as ha

PAGE = 64
runs = []
for lens, kv_dtype in (([131072] + [4096] * 31, torch.bfloat16), ([131072] + [4096] * 31, torch.float8_e4m3fn),
                       ([512] * 64, torch.bfloat16)):
    B = len(lens)
    pages = [(n + PAGE - 1) // PAGE for n in lens]
    num_pages = sum(pages)
    k = torch.randn(num_pages, PAGE, 1, 128, device="cuda").to(kv_dtype)
    v = torch.randn(num_pages, PAGE, 1, 128, device="cuda").to(kv_dtype)
    pt = torch.zeros(B, max(pages), dtype=torch.int32, device="cuda")
    perm = torch.randperm(num_pages, device="cuda").int()
    pos = 0
    for b, n in enumerate(pages):
        pt[b, :n] = perm[pos:pos + n]
        pos += n
    q = torch.randn(B, 8, 128, device="cuda").to(torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    ws = ha.DecodeWorkspace(B, 1, 8, max(lens))
    plan = ha.plan_decode(kv_lens, 1, 8, workspace=ws, kv_dtype=kv_dtype)
    out = torch.empty(B, 8, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(q, k, v, pt, kv_lens, plan, out=out)  # build + module load outside the range
    runs.append((q, k, v, pt, kv_lens, plan, out))
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for q, k, v, pt, kv_lens, plan, out in runs:
    ha.decode(q, k, v, pt, kv_lens, plan, out=out)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
