"""SGLang's own Qwen3-MoE / Qwen3 attention layers, one decode step on backend "hpc", with the fused
prologue (hpc_integration.sglang.prologue's hooks) and without it (HPC_SGLANG_PROLOGUE=0 when the
backend is built: SGLang's QK-Norm, RoPE and KV write), against a float64 reference.

usage: python sglang_prologue_layer.py OUT_JSON [DEVICE]
DEVICE cpu (with HPC_INTEGRATION_CPU_REFERENCE=1: the prologue and decode run the operators'
references) or cuda (an SM90 GPU: the kernels). For each case writes the errors of both paths
against float64 (q after QK-Norm + RoPE, the K rows written, the layer output), whether V rows are
equal, whether every slot outside the batch's out_cache_loc is unchanged, the operator calls, the
case's `failures` (see `verdict`) and the start-up messages; prints one line per case.
A whole KV pool of random values stands in for the prefix (and poisons the untouched slots).
"""

import json
import logging
import os
import sys
import traceback
import unittest

import torch

FP8 = torch.float8_e4m3fn


class _TC(unittest.TestCase):
    def runTest(self):
        pass


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _fixture(heads, page_size, prefix_lens, mode, device):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods import dense_attention as da

    fm = ForwardMode.DECODE if mode == "decode" else ForwardMode.EXTEND
    case = da.DenseAttentionCase(name=f"prologue_{mode}", backend="hpc", forward_mode=fm, num_heads=heads[0],
                                 num_kv_heads=heads[1], page_size=page_size, prefix_lens=prefix_lens,
                                 extend_lens=() if mode == "decode" else tuple(3 for _ in prefix_lens))
    return da.build_dense_attention_fixture(_TC(), case, device=device, dtype=torch.bfloat16, head_dim=128)


def _fp8_pool(runner, device):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    old = runner.token_to_kv_pool
    runner.token_to_kv_pool = MHATokenToKVPool(size=old.size, page_size=old.page_size, dtype=FP8,
                                               head_num=old.head_num, head_dim=old.head_dim, layer_num=1,
                                               device=device, enable_memory_saver=False, enable_alt_stream=False)
    runner.kv_cache_dtype = FP8


def _stub_fallback_rope_kernel():
    """SGLang's RotaryEmbedding imports vllm's rotary kernel at construction on a device that is
    neither CUDA nor its CPU engine (this venv); it is never called there (the CPU runs forward_native)."""
    import importlib.util
    import types

    if "vllm._custom_ops" in sys.modules or importlib.util.find_spec("vllm") is not None:
        return

    def never(*args, **kwargs):
        raise AssertionError("the fallback rotary kernel ran on the CPU")

    mod = types.ModuleType("vllm._custom_ops")
    mod.rotary_embedding = never
    sys.modules.setdefault("vllm", types.ModuleType("vllm"))
    sys.modules["vllm._custom_ops"] = mod


def _single_rank_tp_group():
    """0.5.17's linear layers ask parallel_state for the TP group (only to skip symmetric memory with
    one rank); 0.5.23 reads it from get_parallel(), overridden in main. One rank: a stand-in group."""
    import types

    try:
        from sglang.srt.distributed import parallel_state as ps
    except ImportError:
        return
    if getattr(ps, "_TP", "absent") is None:
        ps._TP = types.SimpleNamespace(world_size=1, rank_in_group=0, device_group=None)


def _layer(kind, heads, g, rope_scaling=None):
    _stub_fallback_rope_kernel()
    from transformers import Qwen3MoeConfig

    hidden = 256
    torch.set_default_dtype(torch.bfloat16)  # as SGLang's model loader sets it
    try:
        if kind == "qwen3_moe":
            from sglang.srt.models.qwen3_moe import Qwen3MoeAttention

            cfg = Qwen3MoeConfig(hidden_size=hidden, num_attention_heads=heads[0], num_key_value_heads=heads[1],
                                 head_dim=128, rope_scaling=rope_scaling, max_position_embeddings=4096)
            m = Qwen3MoeAttention(hidden_size=hidden, num_heads=heads[0], num_kv_heads=heads[1], layer_id=0,
                                  rope_theta=10000, rope_scaling=rope_scaling, max_position_embeddings=4096,
                                  head_dim=128, rms_norm_eps=1e-6, config=cfg)
        else:
            from sglang.srt.models.qwen3 import Qwen3Attention

            m = Qwen3Attention(hidden_size=hidden, num_heads=heads[0], num_kv_heads=heads[1], layer_id=0,
                               rope_theta=1000000, rope_scaling=rope_scaling, head_dim=128,
                               max_position_embeddings=4096, rms_norm_eps=1e-6)
    finally:
        torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.06 * torch.randn(p.shape, generator=g))
    return m


def _randomise_pool(pool, g, scale):
    """Every slot random (in the cache dtype: FP8 codes of values / scale); returns CPU copies."""
    for buf in (pool.get_key_buffer(0), pool.get_value_buffer(0)):
        vals = torch.randn(buf.shape, generator=g) * 1.5
        if buf.dtype == FP8:
            buf.view(torch.uint8).copy_((vals / scale).to(FP8).view(torch.uint8))
        else:
            buf.copy_(vals.to(buf.dtype))
    return _snapshot(pool)


def _snapshot(pool):
    return pool.get_key_buffer(0).cpu().clone(), pool.get_value_buffer(0).cpu().clone()


def _restore(pool, init):
    for buf, src in zip((pool.get_key_buffer(0), pool.get_value_buffer(0)), init):
        buf.view(torch.uint8).copy_(src.view(torch.uint8)) if buf.dtype == FP8 else buf.copy_(src)


def _deq(x, scale):
    return x.double() * (scale if x.dtype == FP8 else 1.0)


def _bits(t):
    return t.view(torch.uint8) if t.dtype == FP8 else t


def run_case(name, kind, kv, expect, device, heads=(8, 2), page_size=16, prefix_lens=(14, 40, 1, 17, 62),
             mode="decode", rope_scaling=None, tweak=None, seed=0):
    """One layer, one step on each path; returns the record with its `failures` (empty: as expected).
    expect: "fused" (the prologue serves this layer's decode) or "framework" (SGLang's path runs)."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from hpc_attention.reference import decode_reference, prologue_reference
    from hpc_integration import ops
    from hpc_integration.sglang.attention import create_backend

    g = torch.Generator().manual_seed(seed)
    fx = _fixture(heads, page_size, prefix_lens, mode, device)
    runner, fb = fx.runner, fx.forward_batch
    scale = 0.5 if kv == "fp8" else 1.0  # a power of two: both paths round k / scale the same way
    if kv == "fp8":
        _fp8_pool(runner, device)
    layer = _layer(kind, heads, g, rope_scaling).to(device)
    if tweak == "k_norm_eps":
        layer.k_norm.variance_epsilon = 1e-5
    if kv == "fp8":  # the scales a checkpoint's KV quantisation leaves on the attention layer
        layer.attn.k_scale_float = layer.attn.v_scale_float = scale
        layer.attn.k_scale = layer.attn.v_scale = torch.tensor(scale, device=device)
    runner.model = torch.nn.ModuleDict({"attn0": layer}) if tweak != "other_model" else torch.nn.Linear(2, 2)
    pool = runner.token_to_kv_pool
    init = _randomise_pool(pool, g, scale)
    hidden = torch.randn(fb.positions.shape[0], 256, generator=g).to(device=device, dtype=torch.bfloat16)
    loc = fb.out_cache_loc.long().cpu()
    rec = {"case": name, "kind": kind, "kv": kv, "mode": mode, "heads": list(heads), "expect": expect}

    def step(prologue_on: bool):
        _restore(pool, init)
        os.environ["HPC_SGLANG_PROLOGUE"] = "1" if prologue_on else "0"
        backend = create_backend(runner)
        seen = {}
        decode = backend.forward_decode

        def spy(q, k, v, *a, **kw):  # what the attention receives: q after norm + rope, k None when fused
            seen["q"], seen["k_given"] = q.detach().cpu().clone(), k is not None
            return decode(q, k, v, *a, **kw)

        backend.forward_decode = spy
        before = dict(ops.CALLS)
        with torch.no_grad(), forward_context(ForwardContext(attn_backend=backend)):
            backend.init_forward_metadata(fb)
            out = layer(fb.positions, hidden, fb).cpu()
        calls = {k: n - before.get(k, 0) for k, n in ops.CALLS.items() if n != before.get(k, 0)}
        k_now, v_now = _snapshot(pool)
        return dict(out=out, q=seen.get("q"), k_given=seen.get("k_given"), k=k_now, v=v_now, calls=calls,
                    layers=len(backend.prologue_layers), backend=backend)

    fw, ours = step(False), step(True)
    rec.update(calls_framework=fw["calls"], calls_ours=ours["calls"], prologue_layers=ours["layers"],
               k_given_framework=fw["k_given"], k_given_ours=ours["k_given"])
    mask = torch.ones(init[0].shape[0], dtype=torch.bool)
    mask[loc] = False
    rec["untouched_same"] = all(bool(torch.equal(_bits(r[key])[mask], _bits(i)[mask]))
                                for r in (fw, ours) for key, i in (("k", init[0]), ("v", init[1])))
    rec["out_equal_paths"] = bool(torch.equal(fw["out"], ours["out"]))
    if mode == "decode":
        with torch.no_grad():
            qkv = layer.qkv_proj(hidden)[0].cpu()
        rope = layer.rotary_emb
        cpu = lambda t: t.detach().cpu()  # noqa: E731
        q_ref, k_ref, v_ref = prologue_reference(
            qkv, fb.positions.cpu(), cpu(rope.cos_sin_cache), num_qo_heads=heads[0], num_kv_heads=heads[1],
            q_norm_weight=cpu(layer.q_norm.weight), k_norm_weight=cpu(layer.k_norm.weight),
            eps=layer.q_norm.variance_epsilon, rope_style="neox" if rope.is_neox_style else "gptj",
            rotary_dim=rope.rotary_dim)
        err = lambda a, b: (a.double() - b).abs().max().item()  # noqa: E731
        for tag, r in (("framework", fw), ("ours", ours)):
            rec[f"q_err_{tag}"] = err(r["q"].view(q_ref.shape), q_ref)
            rec[f"k_err_{tag}"] = err(_deq(r["k"][loc], scale), k_ref)
            rec[f"v_err_{tag}"] = err(_deq(r["v"][loc], scale), v_ref)
        rec["v_rows_equal"] = bool(torch.equal(_bits(fw["v"][loc]), _bits(ours["v"][loc])))
        # float64 layer: attention over the random pool with the new tokens' exact K / V, then o_proj
        kc, vc = _deq(init[0], scale), _deq(init[1], scale)
        kc[loc], vc[loc] = k_ref, v_ref
        be, bs = ours["backend"], len(prefix_lens)
        pages = kc.shape[0] // page_size
        shape = (pages, page_size, heads[1], 128)
        attn = decode_reference(q_ref, kc[:pages * page_size].view(shape), vc[:pages * page_size].view(shape),
                                be.page_table[:bs].cpu(), be.kv_lens[:bs].cpu(), sm_scale=layer.attn.scaling)
        out_ref = attn.reshape(bs, -1) @ cpu(layer.o_proj.weight).double().T
        for tag, r in (("framework", fw), ("ours", ours)):
            rec[f"out_err_{tag}"] = err(r["out"], out_ref)
        rec["out_ref_max"] = out_ref.abs().max().item()
    rec["failures"] = verdict(rec)
    return rec


def verdict(rec, floor=1e-3):
    """What is wrong with one case's record (empty: nothing). Fused: the prologue ran once, the
    attention got k = None, q / K rows / output within twice the framework's float64 error plus a
    floor (the brief's rule), V rows equal, no other slot touched. Framework: no prologue call, the
    same output bits and cache as SGLang's own path."""
    bad = []
    if not rec["untouched_same"]:
        bad.append("a slot outside out_cache_loc changed")
    prologue_calls = sum(n for k, n in rec["calls_ours"].items() if k.startswith("prologue."))
    if rec["expect"] == "framework":
        if prologue_calls or not rec["out_equal_paths"] or rec.get("k_given_ours") is False:
            bad.append("the prologue served a layer it should leave to SGLang")
        return bad
    if rec["prologue_layers"] != 1 or prologue_calls != 1:
        bad.append(f"prologue not run once ({rec['prologue_layers']} layers, {prologue_calls} calls)")
    if rec["k_given_ours"] is not False or rec["k_given_framework"] is not True:
        bad.append("k handed to the attention on the fused path (or not on SGLang's)")
    if not rec["v_rows_equal"]:
        bad.append("V rows differ from SGLang's")
    for n in ("q", "k", "out"):
        if not rec[f"{n}_err_ours"] <= 2 * rec[f"{n}_err_framework"] + floor:
            bad.append(f"{n} error {rec[f'{n}_err_ours']:.3g} > 2 x SGLang's {rec[f'{n}_err_framework']:.3g} + {floor}")
    if not rec["out_err_ours"] < 0.05 * rec["out_ref_max"]:
        bad.append("output error above 5 % of its largest value")
    return bad


def main(out_json, device="cpu"):
    msgs = _Messages()
    logging.getLogger("hpc_integration").addHandler(msgs)
    import hpc_integration.sglang as plugin

    os.environ["HPC_SGLANG_PROLOGUE"] = "1"
    plugin.register()
    torch.set_grad_enabled(False)
    from sglang.srt.runtime_context import get_parallel

    _single_rank_tp_group()
    with get_parallel().override(attn_tp_size=1, attn_tp_rank=0, tp_size=1, tp_rank=0, tp_group=None):
        cases = _cases(device)
    json.dump({"device": device, "cases": cases, "messages": msgs.lines, "registered": sorted(plugin._REGISTERED),
               "prologue_targets": list(plugin._REGISTERED.get("prologue", ()))}, open(out_json, "w"), indent=1)
    for c in cases:
        print(c["case"], "ok" if not c["failures"] else f"FAIL {c['failures']}", flush=True)


def _guarded(name, kind, kv, expect, device, **kw):
    """run_case, with an exception recorded as the case's failure (the other cases still run)."""
    try:
        return run_case(name, kind, kv, expect, device, **kw)
    except Exception as e:
        return {"case": name, "kind": kind, "kv": kv, "expect": expect, "calls_ours": {},
                "failures": [f"{type(e).__name__}: {e}"[:500]], "traceback": traceback.format_exc()[-3000:]}


def _cases(device):
    """One layer per case (layer id 0 of a fresh one-layer pool)."""
    d = device
    return [
        _guarded("moe_bf16", "qwen3_moe", "bf16", "fused", d),
        _guarded("moe_fp8", "qwen3_moe", "fp8", "fused", d, heads=(4, 4), page_size=1, prefix_lens=(3, 9, 1), seed=1),
        _guarded("dense_bf16", "qwen3", "bf16", "fused", d, heads=(16, 1), page_size=32, prefix_lens=(31, 62), seed=2),
        _guarded("dense_fp8", "qwen3", "fp8", "fused", d, seed=3),
        _guarded("moe_yarn_bf16", "qwen3_moe", "bf16", "fused", d, seed=4,
                 rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}),
        _guarded("moe_extend", "qwen3_moe", "bf16", "framework", d, mode="extend", prefix_lens=(5, 0), seed=5),
        _guarded("moe_mrope_off", "qwen3_moe", "bf16", "framework", d, seed=6,
                 rope_scaling={"rope_type": "default", "mrope_section": [16, 24, 24]}),
        _guarded("moe_eps_off", "qwen3_moe", "bf16", "framework", d, tweak="k_norm_eps", seed=7),
        _guarded("other_model_off", "qwen3_moe", "bf16", "framework", d, tweak="other_model", seed=8),
    ]


if __name__ == "__main__":
    main(*sys.argv[1:])
