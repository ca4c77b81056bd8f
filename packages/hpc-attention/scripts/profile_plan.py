"""Run the decode planner once per head setting at batch 256 x 4K (the `ours_plan` benchmark
case) inside a profiler range, for ncu: what the 3 us between 8/1 and 64/8 heads are (NOTES.md),
and at 64/8 both line orders (head-major, the default, against request-major: the head-major plan
of 2048 one-head requests took ~1.6 us more).

    ncu --clock-control none --profile-from-start off --set full \\
        python3 packages/hpc-attention/scripts/profile_plan.py
"""

import torch

import hpc_attention as ha

cases = []
for hkv, head_major in ((1, None), (8, True), (8, False)):
    kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
    kv_lens[::7] = 100
    ws = ha.DecodeWorkspace(256, hkv, 8 * hkv, 4096)
    ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False, head_major=head_major)  # build + load
    cases.append((kv_lens, hkv, ws, head_major))
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kv_lens, hkv, ws, head_major in cases:
    ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False, head_major=head_major)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
