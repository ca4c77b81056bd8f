"""Run the decode planner once per head setting at batch 256 x 4K (the `ours_plan` benchmark
case) inside a profiler range, for ncu: what the 3 us between 8/1 and 64/8 heads are (NOTES.md).

    ncu --clock-control none --profile-from-start off --set full \\
        python3 packages/hpc-attention/scripts/profile_plan.py
"""

import torch

import hpc_attention as ha

cases = []
for hkv in (1, 8):
    kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
    kv_lens[::7] = 100
    ws = ha.DecodeWorkspace(256, hkv, 8 * hkv, 4096)
    ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False)  # build + module load
    cases.append((kv_lens, hkv, ws))
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kv_lens, hkv, ws in cases:
    ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
