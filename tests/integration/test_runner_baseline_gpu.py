"""The baseline runner's SGLang kernels on an SM90 GPU (marker gpu; skipped without SGLang, whose
bundle is put on PYTHONPATH as integration/README.md, "End-to-end runner", says).

- SGLang's Triton decode attention over the runner's paged cache against the reference backend's
  attention (hpc_attention.reference.decode_reference, float64) for 8/1, 32/4 and 64/8 heads, BF16
  and FP8 KV, lengths 1, 63, 64, 65 and 799 over 64-token scrambled pages: max |error| <= 2 % of max
  |out| with BF16 KV and <= 6 % with FP8 KV (the kernel casts Q and the softmax weights to E4M3 for
  its dot products, as SGLang does; E4M3 rounds to 2^-4 relative).
- "auto" picks SGLang's attention where it imports, and no probe of it or of SGLang's prologue
  differs from the torch path (a mismatch is a bug, not a fallback to accept).
- Graph replay of the step equals its eager steps bit for bit (the indices and split counts are
  rebuilt inside the graph from the device lengths; batch 1 and 5, a page boundary crossed).
- Greedy tokens over 8 graph-replayed steps from a 700-token synthetic context: the SGLang baseline
  equals ours and the SDPA baseline; logits within 8 % of max |logit| (the e2e tolerance).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from hpc_integration.runner import DecodeRunner, RunOptions, StepGraph, preset, random_weights
from hpc_integration.runner.backends.baseline import BaselineBackend
from hpc_integration.runner.backends.baseline_sglang import SGLangTritonDecode
from hpc_integration.runner.kv_cache import PagedKVCache

pytestmark = pytest.mark.gpu


def _have_sglang() -> bool:
    try:
        return importlib.util.find_spec("sglang") is not None
    except ValueError:
        return False


needs_sglang = pytest.mark.skipif(not _have_sglang(), reason="SGLang not importable: unpack the bundle "
                                  "(.sglbundle/*.tar.xz) onto PYTHONPATH (integration/README.md)")
CASES = {"qwen3_30b_a3b": ("bf16", "bf16"), "hy3_tp8": ("fp8", "fp8_block")}


@needs_sglang
@pytest.mark.parametrize("heads", [(8, 1), (32, 4), (64, 8)])
@pytest.mark.parametrize("kv", [torch.bfloat16, torch.float8_e4m3fn])
def test_sglang_decode_matches_the_reference_attention(heads, kv):
    from hpc_attention.reference import decode_reference

    Hq, Hkv = heads
    D, ps, lens = 128, 64, [1, 63, 64, 65, 799]
    dev = torch.device("cuda")
    cache = PagedKVCache(1, len(lens), 1024, ps, Hkv, D, kv, dev, scale=1 / 64)
    cache.fill_random(len(lens), max(lens), seed=3)
    kc, vc = cache.layer(0)
    table = cache.page_table
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    q = torch.randn(len(lens), Hq, D, generator=torch.Generator(device=dev).manual_seed(4), device=dev)
    q = q.to(torch.bfloat16)
    dec = SGLangTritonDecode(len(lens), cache.pages_per_request, ps, Hq, Hkv, D, dev)
    dec.plan(table, kv_lens)
    out = dec(q, kc, vc, D ** -0.5, cache.scale).double()
    ref = decode_reference(q, kc, vc, table, kv_lens, sm_scale=D ** -0.5, k_scale=cache.scale, v_scale=cache.scale)
    err = ((out - ref).abs().amax(dim=(1, 2)) / ref.abs().max()).tolist()
    tol = 0.06 if kv == torch.float8_e4m3fn else 0.02
    assert max(err) <= tol, f"{Hq}/{Hkv} heads, {kv}: max |error| / max |out| per request {err} (tolerance {tol})"


@pytest.fixture(scope="module", params=sorted(CASES))
def model(request):
    name = request.param
    cfg = preset(name, num_layers=2, vocab_size=2048, max_position=2048)
    return name, cfg, random_weights(cfg, seed=0, device="cuda"), CASES[name]


def _runner(cfg, w, backend, kv, quant, batch=4):
    return DecodeRunner(cfg, w, backend, RunOptions(kv_dtype=kv, moe_quant=quant, max_batch=batch, max_kv_len=1024))


@needs_sglang
def test_auto_takes_sglang_and_no_probe_differs(model):
    name, cfg, w, (kv, quant) = model
    rt = _runner(cfg, w, "baseline", kv, quant)
    assert rt.impl["attention"] == "sglang_triton_decode", f"{name}: {rt.impl}"
    assert "mismatch" not in rt.impl.get("fallback", ""), f"{name}: {rt.impl}"


@needs_sglang
@pytest.mark.parametrize("batch", [1, 5])
def test_sglang_baseline_graph_replay_equals_eager_steps(model, batch):
    name, cfg, w, (kv, quant) = model
    rt = _runner(cfg, w, "baseline", kv, quant, batch=batch)
    st = rt.synthetic_context(batch, 60, seed=batch)  # 60 + 6 steps crosses the 64-token page
    start = st.ids.clone()
    eager = rt.generate(st, 6)
    graph = StepGraph(rt, st)
    for _ in range(2):
        st.start(rt.cache, start, 60)
        toks, logits = rt.generate(st, 6, graph=graph)
        assert torch.equal(toks, eager[0]), f"{name} B={batch}: graph tokens differ from eager"
        assert torch.equal(logits, eager[1]), f"{name} B={batch}: graph logits differ from eager (bitwise)"


@needs_sglang
def test_sglang_baseline_keeps_the_greedy_tokens_of_ours_and_sdpa(model):
    name, cfg, w, (kv, quant) = model
    out = {}
    for label, backend in (("sglang", "baseline"), ("sdpa", BaselineBackend(attention="torch_sdpa", prologue="torch")),
                           ("ours", "ours")):
        rt = _runner(cfg, w, backend, kv, quant)
        st = rt.synthetic_context(4, 700, seed=11)
        out[label] = rt.generate(st, 8, graph=StepGraph(rt, st))
        del rt
    t, logits = out["sglang"]
    for other in ("sdpa", "ours"):
        assert torch.equal(t, out[other][0]), f"{name}: SGLang baseline tokens differ from {other}"
        err = ((logits - out[other][1]).abs().max() / out[other][1].abs().max()).item()
        assert err <= 0.08, f"{name}: SGLang baseline logits vs {other}: {err:.3%} of max |logit|"
