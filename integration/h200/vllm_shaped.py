"""On the H200: the vLLM adapter's operator calls on vLLM-shaped inputs, our kernels against the
operators' references (vLLM itself does not fit the device machine).

usage: vllm_shaped.py OUT_JSON
- attention: a cache laid out as vLLM allocates it (physical [blocks, block_size, Hkv, 2D], handed
  to the layer as the logical [blocks, Hkv, block_size, 2D]), viewed by ops.vllm_kv_views, one
  plan per step (ops.DecodeState) and decode per layer, BF16 and FP8 KV, blocks of 16 and 64;
  then the same plan + decode captured in a CUDA graph and replayed with new lengths;
- MoE: vLLM's expert weights [E, 2I, H] / [E, H, I] and top-k from softmax routing, through
  ops.prepare_experts / ops.fused_moe: BF16, and FP8 with vLLM's per-tensor ([E, 2] / [E], dynamic
  and static activation scale) and 128 x 128 block scales, against the float64 reference of the format;
- router: an FP32 gate through ops.RouterState.
"""

import json
import sys

import torch
from hpc_integration import ops

DEV = torch.device("cuda")
FP8 = torch.float8_e4m3fn


def vllm_cache(blocks, bs, hkv, d, dtype, g):
    phys = torch.randn(blocks, bs, hkv, 2 * d, generator=g, device=DEV).to(dtype)  # LBNHC, one layer
    return phys.permute(0, 2, 1, 3)  # the logical view vLLM hands the layer


def attention_case(hq, hkv, bs, fp8, g):
    from hpc_attention.reference import decode_reference

    lens, grow, d, max_len = [1, 63, 64, 1000, 4097, 17], 5, 128, 8192
    need = [-(-(n + grow) // bs) for n in lens]  # blocks for the lengths of both steps
    nb = sum(need) + 8
    kv = vllm_cache(nb, bs, hkv, d, torch.bfloat16, g)
    if fp8:
        kv = (kv.float() * 0.5).to(FP8)
    k, v = ops.vllm_kv_views(kv, d, fp8)
    ids = torch.randperm(nb, generator=g, device=DEV).int()
    bt = torch.zeros(len(lens), max_len // bs, dtype=torch.int32, device=DEV)
    at = 0
    for i, m in enumerate(need):
        bt[i, :m] = ids[at:at + m]
        at += m
    q = torch.randn(len(lens), hq, d, generator=g, device=DEV).to(torch.bfloat16)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    st = ops.DecodeState(16, hkv, hq, max_len, DEV, FP8 if fp8 else torch.bfloat16)
    ks, vs = (0.7, 1.3) if fp8 else (1.0, 1.0)
    kw = dict(sm_scale=d ** -0.5, k_scale=ks, v_scale=vs)

    def step(out=None):
        st.plan(seq_lens)  # once per step (the metadata builder), then per layer:
        return st.decode(q, k, v, bt, seq_lens, out=out, **kw)

    out = step()
    ref = decode_reference(q.cpu(), k.cpu(), v.cpu(), bt.cpu(), lens, **kw)
    rel = ((out.double().cpu() - ref).norm() / ref.norm()).item()
    out_g = torch.empty_like(out)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(out_g)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(out_g)
    seq_lens.copy_(torch.tensor([n + grow for n in lens], dtype=torch.int32))
    graph.replay()  # re-plans from the new device lengths
    eager = step()
    torch.cuda.synchronize()
    same = bool(torch.equal(out_g, eager))
    tol = 0.02 if fp8 else 0.01
    return dict(check=f"attention {hq}/{hkv} block {bs} {'fp8' if fp8 else 'bf16'}", rel_err=rel,
                graph_equals_eager=same, ok=rel < tol and same)


def routing(T, E, k, g):
    """(weights [T, k] renormalised, ids [T, k]) of softmax top-k over random logits, as vLLM routes."""
    wts, ids = torch.topk(torch.softmax(torch.randn(T, E, generator=g, device=DEV), -1), k)
    return wts / wts.sum(-1, keepdim=True), ids


def cosine(out, ref):
    return torch.nn.functional.cosine_similarity(out.double().cpu().flatten(), ref.flatten(), dim=0).item()


def moe_case(g):
    from hpc_moe.reference import fused_moe_reference

    T, H, inter, E, k = 16, 2048, 192, 32, 8
    x = torch.randn(T, H, generator=g, device=DEV).to(torch.bfloat16)
    w13 = (torch.randn(E, 2 * inter, H, generator=g, device=DEV) * 0.02).to(torch.bfloat16)
    w2 = (torch.randn(E, H, inter, generator=g, device=DEV) * 0.02).to(torch.bfloat16)
    wts, ids = routing(T, E, k, g)
    out = ops.fused_moe(x, ops.prepare_experts(w13, w2), ids.int(), wts)
    ref = fused_moe_reference(x.cpu(), w13.cpu(), w2.cpu(), ids.cpu(), wts.cpu())
    cos = cosine(out, ref)
    return dict(check="moe bf16 T=16 H=2048 I=192 E=32 top-8", cosine=cos, ok=cos >= 0.99999)


def moe_fp8_case(quant, static, g):
    """vLLM's FP8 MoE parameters as its Fp8MoEMethod loads them (the layout HpcFp8MoEMethod hands to
    ops.prepare_experts): E4M3 w13 [E, 2I, H] / w2 [E, H, I] with per-tensor scales w13_weight_scale
    [E, 2] (gate, up shards) / w2_weight_scale [E], or 128 x 128 block scales w13_weight_scale_inv
    [E, 2I/128, H/128] / w2_weight_scale_inv [E, H/128, I/128]; a static activation scale is the
    largest of the experts' w13_input_scale, as the adapter takes it."""
    from hpc_moe.reference import fused_moe_reference_quant

    T, H, inter, E, k = 16, 2048, 256, 32, 8
    x = torch.randn(T, H, generator=g, device=DEV).to(torch.bfloat16)
    w13 = (torch.randn(E, 2 * inter, H, generator=g, device=DEV) * 8).to(FP8)
    w2 = (torch.randn(E, H, inter, generator=g, device=DEV) * 8).to(FP8)
    if quant == "fp8_block":
        s13 = torch.rand(E, 2 * inter // 128, H // 128, generator=g, device=DEV) * 2e-3 + 1e-3
        s2 = torch.rand(E, H // 128, inter // 128, generator=g, device=DEV) * 2e-3 + 1e-3
    else:
        s13 = torch.rand(E, 2, generator=g, device=DEV) * 2e-3 + 1e-3
        s2 = torch.rand(E, generator=g, device=DEV) * 2e-3 + 1e-3
    a1 = (torch.rand(E, generator=g, device=DEV) * 0.01 + 0.005).max().reshape(1) if static else None
    wts, ids = routing(T, E, k, g)
    weights = ops.prepare_experts(w13, w2, quant, w13_scale=s13, w2_scale=s2, a1_scale=a1, num_experts=E)
    out = ops.fused_moe(x, weights, ids.int(), wts)
    ref = fused_moe_reference_quant(x.cpu(), w13.cpu(), w2.cpu(), ids.cpu(), wts.cpu(), quant=quant,
                                    w13_scale=s13.cpu(), w2_scale=s2.cpu(),
                                    a1_scale=None if a1 is None else a1.cpu())
    cos = cosine(out, ref)
    act = "static" if static else "dynamic"
    return dict(check=f"moe {quant} ({act} activations) vLLM layout T=16 H=2048 I=256 E=32 top-8", cosine=cos,
                ok=cos >= 0.9999)


def router_case(g):
    w = torch.randn(192, 4096, generator=g, device=DEV) * 0.02
    x = torch.randn(64, 4096, generator=g, device=DEV).to(torch.bfloat16)
    st = ops.RouterState(w)
    got = st(x)
    ref = x.double() @ w.double().T
    err = (got.double() - ref).abs().max().item()
    return dict(check="router fp32 [192, 4096] M=64", max_err=err, kernel=st.prepared is not None,
                ok=err <= 1e-4 and st.prepared is not None)


def main(out_json: str) -> None:
    g = torch.Generator(device=DEV).manual_seed(0)
    rows = []
    cases = [(attention_case, (hq, hkv, bs, fp8, g)) for hq, hkv in ((8, 1), (32, 4)) for bs in (16, 64)
             for fp8 in (False, True)] + [(moe_case, (g,))]
    cases += [(moe_fp8_case, (q, static, g))
              for q, static in (("fp8_tensor", False), ("fp8_tensor", True), ("fp8_block", False))]
    cases += [(router_case, (g,))]
    for fn, args in cases:
        try:
            rows.append(fn(*args))
        except Exception as e:  # one failing check must not hide the others
            rows.append(dict(check=f"{fn.__name__}{args[:-1]}", ok=False, error=f"{type(e).__name__}: {e}"[:500]))
        print(rows[-1], flush=True)
    json.dump({"rows": rows, "calls": dict(ops.CALLS)}, open(out_json, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
