"""The decode-step runner on an SM90 GPU: ours (and the baseline) against transformers' float32
model for 32 greedy steps under CUDA-graph replay, graph replay equal to eager steps bit for bit,
and ours against the reference backend. Two layers of Qwen3-30B-A3B shapes (BF16 KV and MoE) and of
Hy3 TP8 shapes (FP8 KV, FP8 block MoE); the prompt (50 tokens) and the 32 steps cross a 64-token
page boundary, so the in-graph plan and slots move to a new page mid-run.

Tolerances as in test_runner_hf.py (the BF16 / FP8 paths on the CPU): max over steps <= 8 % of max
|logit|, median step <= 2.5 %. transformers on the H200 machine comes from the SGLang bundle
(integration/README.md, "End-to-end runner"); without it the transformers test is skipped."""

from __future__ import annotations

import pytest
import torch

from hpc_integration.runner import DecodeRunner, RunOptions, StepGraph, preset, random_weights

pytestmark = pytest.mark.gpu

STEPS = 32
CASES = {"qwen3_30b_a3b": ("bf16", "bf16"), "hy3_tp8": ("fp8", "fp8_block")}


@pytest.fixture(scope="module", params=sorted(CASES))
def model(request):
    name = request.param
    cfg = preset(name, num_layers=2, vocab_size=2048, max_position=2048)
    w = random_weights(cfg, seed=0, device="cuda")
    return name, cfg, w, CASES[name]


def _runner(cfg, w, backend, kv, quant, batch=4):
    return DecodeRunner(cfg, w, backend, RunOptions(kv_dtype=kv, moe_quant=quant, max_batch=batch, max_kv_len=512))


def _prompts(cfg, batch=4, length=50):
    return torch.randint(0, cfg.vocab_size, (batch, length), generator=torch.Generator().manual_seed(7)).cuda()


def _check_logits(logits, ref, what):
    per_step = (logits - ref).abs().amax(dim=(1, 2))
    scale = ref.abs().max().item()
    assert per_step.max().item() <= 0.08 * scale, f"{what}: max |logit diff| {per_step.max():.3f} (scale {scale:.1f})"
    assert per_step.median().item() <= 0.025 * scale, f"{what}: median step {per_step.median():.3f}"


@pytest.mark.parametrize("backend", ["ours", "baseline"])
def test_graph_replayed_decode_matches_transformers(model, backend):
    pytest.importorskip("transformers", reason="transformers not importable: unpack the SGLang bundle's "
                        "transformers.tar.xz and deps.tar.xz onto PYTHONPATH (integration/README.md)")
    from hpc_integration.runner import hf_config
    from hpc_integration.runner.hf import build_hf_model, hf_greedy

    name, cfg, w, (kv, quant) = model
    prompts = _prompts(cfg)
    hf = build_hf_model(hf_config(name, num_layers=2, vocab_size=2048, max_position=2048), w, quant, device="cuda")
    ht, hl = hf_greedy(hf, prompts, STEPS)
    del hf
    rt = _runner(cfg, w, backend, kv, quant)
    st, logits0 = rt.prefill(prompts)
    toks, logits = rt.generate(st, STEPS, logits0=logits0, graph=StepGraph(rt, st))
    bad = (toks != ht).any(dim=1).nonzero().flatten().tolist()
    assert not bad, f"{backend} {name}: greedy tokens differ from transformers float32 at steps {bad}"
    _check_logits(logits, hl, f"{backend} {name} vs transformers")


@pytest.mark.parametrize("batch", [1, 5])
def test_graph_replay_equals_eager_steps(model, batch):
    name, cfg, w, (kv, quant) = model
    rt = _runner(cfg, w, "ours", kv, quant, batch=batch)
    st = rt.synthetic_context(batch, 300, seed=batch)
    start = st.ids.clone()
    eager = rt.generate(st, 6)
    graph = StepGraph(rt, st)
    runs = []
    for _ in range(2):
        st.start(rt.cache, start, 300)
        runs.append(rt.generate(st, 6, graph=graph))
    for toks, logits in runs:
        assert torch.equal(toks, eager[0]), f"{name} B={batch}: graph tokens differ from eager"
        assert torch.equal(logits, eager[1]), f"{name} B={batch}: graph logits differ from eager (bitwise)"


def test_ours_matches_the_reference_backend(model):
    name, cfg, w, (kv, quant) = model
    prompts = _prompts(cfg, batch=2, length=20)
    out = {}
    for backend in ("ours", "reference"):
        rt = _runner(cfg, w, backend, kv, quant, batch=2)
        st, logits0 = rt.prefill(prompts)
        out[backend] = rt.generate(st, 8, logits0=logits0)
    assert torch.equal(out["ours"][0], out["reference"][0]), f"{name}: greedy tokens differ from the reference"
    _check_logits(out["ours"][1], out["reference"][1], f"ours {name} vs reference")
