"""The runner against transformers' own Qwen3MoeForCausalLM (float32, the same random weights) on the
tiny config, on the CPU: greedy tokens for 32 decode steps after an 11-token prompt, and logits.

Tolerances (max |logit| is about 15 here; the smallest top-1 margin 3.8): the reference backend in
float32 matches to float32 rounding (<= 1e-4 absolute; measured 3e-6). The BF16 baseline, with a BF16
or an FP8 cache, and the reference with an FP8 cache and FP8 block MoE weights (activations quantised
per 128-group) differ by their rounding: max over steps <= 8 % of max |logit| and the median step
<= 2.5 % (measured on three seeds: BF16 <= 3.5 % / 0.5 %, FP8 <= 5 % / 1.7 %)."""

from __future__ import annotations

import pytest
import torch

from hpc_integration.runner import DecodeRunner, ModelConfig, RunOptions, hf_config, random_weights
from hpc_integration.runner.hf import build_hf_model, hf_greedy

STEPS = 32
PROMPTS = (3, 11)


@pytest.fixture(scope="module", params=[0, 1])
def model(request):
    seed = request.param
    hcfg = hf_config("tiny", num_layers=2, vocab_size=512, max_position=1024)
    cfg = ModelConfig.from_hf(hcfg, name="tiny")
    w = random_weights(cfg, seed=seed)
    prompts = torch.randint(0, cfg.vocab_size, PROMPTS, generator=torch.Generator().manual_seed(seed + 1))
    hf = {}
    for quant in ("bf16", "fp8_block"):
        hf[quant] = hf_greedy(build_hf_model(hcfg, w, quant), prompts, STEPS)
    return cfg, w, prompts, hf, seed


def _run(cfg, w, prompts, backend, kv, quant):
    rt = DecodeRunner(cfg, w, backend, RunOptions(kv_dtype=kv, moe_quant=quant, max_batch=PROMPTS[0], max_kv_len=128,
                                                  page_size=16))
    st, logits0 = rt.prefill(prompts)
    return rt.generate(st, STEPS, logits0=logits0)


def _check_tokens(toks, ref, what):
    bad = (toks != ref).any(dim=1).nonzero().flatten().tolist()
    assert not bad, f"{what}: greedy tokens differ from transformers at steps {bad}"


def test_reference_matches_transformers_float32(model):
    cfg, w, prompts, hf, seed = model
    ht, hl = hf["bf16"]
    toks, logits = _run(cfg, w, prompts, "reference", "fp32", "bf16")
    assert toks.shape == (STEPS + 1, PROMPTS[0]) and logits.shape == (STEPS + 1, PROMPTS[0], cfg.vocab_size)
    _check_tokens(toks, ht, f"reference, seed {seed}")
    err = (logits - hl).abs().max().item()
    assert err <= 1e-4, f"seed {seed}: max |logit diff| {err:.2e} against transformers float32"


@pytest.mark.parametrize("backend, kv, quant", [("baseline", "bf16", "bf16"), ("baseline", "fp8", "bf16"),
                                                ("baseline", "fp8", "fp8_block"), ("reference", "fp8", "fp8_block")])
def test_low_precision_paths_keep_greedy_tokens(model, backend, kv, quant):
    cfg, w, prompts, hf, seed = model
    ht, hl = hf[quant]
    toks, logits = _run(cfg, w, prompts, backend, kv, quant)
    what = f"{backend} kv={kv} moe={quant} seed {seed}"
    _check_tokens(toks, ht, what)
    per_step = (logits - hl).abs().amax(dim=(1, 2))
    scale = hl.abs().max().item()
    assert per_step.max().item() <= 0.08 * scale, f"{what}: max |logit diff| {per_step.max():.3f} (scale {scale:.1f})"
    assert per_step.median().item() <= 0.025 * scale, f"{what}: median step {per_step.median():.3f} (scale {scale:.1f})"


def test_the_logit_checks_see_a_broken_layer(model):
    """The tolerances are not vacuous: RoPE left out of the baseline's prologue fails them."""
    from hpc_integration.runner.backends import baseline

    cfg, w, prompts, hf, seed = model
    ht, hl = hf["bf16"]
    orig = baseline.rope_neox
    baseline.rope_neox = lambda x, positions, cos_sin: x
    try:
        _, logits = _run(cfg, w, prompts, "baseline", "bf16", "bf16")
    finally:
        baseline.rope_neox = orig
    per_step = (logits - hl).abs().amax(dim=(1, 2))
    assert per_step.median().item() > 0.025 * hl.abs().max().item()
