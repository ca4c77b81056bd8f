"""Debug the widening producer (temporary): one tiny decode under compute-sanitizer with -lineinfo."""
import sys
import torch
from hpc_common.jit import ExtensionSpec
import hpc_attention as ha
from hpc_attention import _ext, heuristics, paged_decode as pd

spec = ExtensionSpec(name="_hpc_attention_dbg_C", sources=_ext.SPEC.sources, include_dirs=_ext.SPEC.include_dirs,
                     cuda_flags=["-lineinfo"])
_ext.load = spec.load
lens = eval(sys.argv[1]) if len(sys.argv) > 1 else [64]
flags = int(sys.argv[2]) if len(sys.argv) > 2 else 0
heuristics.WIDEN_FP8_KV = True
heuristics.USE_TMA_PRODUCER = False
B = len(lens); hkv = 1; G = 8; page = 64
maxp = (max(lens) + page - 1) // page
k = (torch.randn(B * maxp + 4, page, hkv, 128, device="cuda") * 0.5).to(torch.float8_e4m3fn)
v = (torch.randn(B * maxp + 4, page, hkv, 128, device="cuda") * 0.5).to(torch.float8_e4m3fn)
pt = torch.arange(B * maxp, dtype=torch.int32, device="cuda").view(B, maxp)
q = torch.randn(B, hkv * G, 128, device="cuda", dtype=torch.bfloat16)
kv_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
plan = ha.plan_decode(kv_lens, hkv, hkv * G, max_kv_len=max(lens))
pd.DIAG["flags"] = flags
out = ha.decode(q, k, v, pt, kv_lens, plan)
torch.cuda.synchronize()
print("OK", pd.LAST_PRODUCER, float(out.float().abs().sum()), flush=True)
