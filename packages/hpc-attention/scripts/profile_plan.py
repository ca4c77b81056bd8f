"""Run the decode planner inside a profiler range, for ncu: at batch 256 x 4K (the `ours_plan`
benchmark case, every 7th request 100 tokens, no page table) and on the benchmark's skewed case
1x128K+31x4K (batch 32, with the page table, as `ours_plan` per case), each at 8/1 and 64/8 heads
(64/8: the default head-major line, i.e. the aligned plan of decode_plan_aligned.cuh).

    ncu --clock-control none --profile-from-start off --set full \\
        python3 packages/hpc-attention/scripts/profile_plan.py
"""

import torch

import hpc_attention as ha

PAGE = 64
cases = []
for name in ("256x4K", "1x128K+31x4K"):
    for hkv in (1, 8):
        if name == "256x4K":
            kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
            kv_lens[::7] = 100
            page_table = None
        else:
            kv_lens = torch.tensor([131072] + [4096] * 31, dtype=torch.int32, device="cuda")
            page_table = torch.randperm(32 * 2048, device="cuda", dtype=torch.int32).view(32, 2048)
        B = kv_lens.numel()
        ws = ha.DecodeWorkspace(B, hkv, 8 * hkv, int(kv_lens.max()))
        kw = dict(workspace=ws, validate=False, page_table=page_table, page_size=PAGE if page_table is not None else None)
        ha.plan_decode(kv_lens, hkv, 8 * hkv, **kw)  # build + load
        cases.append((kv_lens, hkv, kw))
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kv_lens, hkv, kw in cases:
    ha.plan_decode(kv_lens, hkv, 8 * hkv, **kw)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
