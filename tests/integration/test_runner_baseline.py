"""The baseline backend's choice of decode attention and prologue, and SGLang's token indexing of the
paged cache, on the CPU (SGLang's Triton kernels need CUDA: test_runner_baseline_gpu.py runs them).

- token_kv_indices against a python loop over the page table (page sizes 1, 16, 64; lengths 1, a
  page boundary, the whole width).
- The glue of SGLangTritonDecode (the page-size-1 view of the cache, the per-step plan, k / v scales)
  with a float64 torch stand-in for SGLang's decode_attention_fwd that reads only what SGLang's kernel
  reads (kv_indptr, kv_indices, the [slots, Hkv, D] buffers, sm_scale * k_scale, v_scale): the runner's
  tokens with it equal those of the torch SDPA baseline for 8 steps across a page boundary, BF16 and
  FP8 KV, logits within BF16 rounding (measured 0.5 % of max |logit|; tolerance 2.5 %).
- The selection: "auto" falls back to SDPA (no SGLang here), and to SDPA with a note when the probe
  differs (a stand-in that leaves v_scale out); named choices that cannot run say why.
"""

from __future__ import annotations

import pytest
import torch

from hpc_integration.runner import DecodeRunner, ModelConfig, RunOptions, random_weights
from hpc_integration.runner.backends import baseline_sglang
from hpc_integration.runner.backends.baseline import BaselineBackend
from hpc_integration.runner.backends.baseline_sglang import SGLangTritonDecode, token_kv_indices

FP8 = torch.float8_e4m3fn


def _loop_indices(page_table, kv_lens, page_size):
    indptr, idx = [0], []
    for b in range(page_table.shape[0]):
        for t in range(int(kv_lens[b])):
            idx.append(int(page_table[b, t // page_size]) * page_size + t % page_size)
        indptr.append(len(idx))
    return indptr, idx


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_kv_indices_match_a_python_loop(page_size, seed):
    g = torch.Generator().manual_seed(seed)
    B, P = 5, 3
    L = P * page_size
    table = torch.randperm(4 * B * P, generator=g)[:B * P].view(B, P).to(torch.int32)
    edge = [1, page_size, min(page_size + 1, L), L]  # one token, a full page, one past it, the whole width
    lens = torch.tensor(edge + [int(torch.randint(1, L + 1, (1,), generator=g))], dtype=torch.int32)
    indptr = torch.full((B + 3,), -7, dtype=torch.int32)
    indices = torch.full((B * L + 1,), -7, dtype=torch.int64)
    token_kv_indices(table, lens, page_size, indptr, indices)
    want_ptr, want_idx = _loop_indices(table, lens, page_size)
    assert indptr[:B + 1].tolist() == want_ptr
    assert indices[:len(want_idx)].tolist() == want_idx


def test_token_kv_indices_refuse_short_buffers():
    table = torch.zeros(2, 2, dtype=torch.int32)
    lens = torch.ones(2, dtype=torch.int32)
    with pytest.raises(ValueError, match="kv_indices >= 65"):
        token_kv_indices(table, lens, 16, torch.zeros(3, dtype=torch.int32), torch.zeros(64, dtype=torch.int64))


def _stand_in(v_scale_used: bool = True):
    """A float64 torch version of SGLang's decode_attention_fwd contract (what its kernel reads)."""
    def fwd(q, k_buf, v_buf, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits, max_kv_splits,
            sm_scale, k_scale, v_scale, **kw):
        assert k_buf.dim() == 3 and max_kv_splits == attn_logits.shape[2] and q.shape[0] <= kv_indptr.shape[0] - 1
        B, Hq, D = q.shape
        Hkv = k_buf.shape[1]

        def rows(buf, idx):  # FP8 moved as bytes: CPU indexing has no FP8 kernel everywhere
            src = buf.view(torch.uint8) if buf.dtype == FP8 else buf
            return src[idx].view(buf.dtype).double()

        for b in range(B):
            idx = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])]
            k, v = rows(k_buf, idx), rows(v_buf, idx)
            qb = q[b].double().view(Hkv, Hq // Hkv, D)
            p = torch.softmax(torch.einsum("hgd,nhd->hgn", qb, k) * sm_scale * k_scale, dim=-1)
            out = torch.einsum("hgn,nhd->hgd", p, v) * (v_scale if v_scale_used else 1.0)
            o[b] = out.reshape(Hq, D).to(o.dtype)
    return fwd


@pytest.fixture
def tiny():
    cfg = ModelConfig(vocab_size=512, hidden_size=256, num_layers=2, num_qo_heads=4, num_kv_heads=2, head_dim=128,
                      num_experts=8, top_k=2, moe_intermediate_size=64, max_position=1024, name="tiny")
    return cfg, random_weights(cfg, seed=0)


def _runner(cfg, w, backend, kv):
    return DecodeRunner(cfg, w, backend, RunOptions(kv_dtype=kv, max_batch=3, max_kv_len=64, page_size=16))


def _decode(rt, steps=8):
    prompts = torch.randint(0, 512, (3, 13), generator=torch.Generator().manual_seed(5))  # crosses page 16 -> 17
    st, _ = rt.prefill(prompts)
    return rt.generate(st, steps)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_sglang_decode_glue_matches_the_sdpa_baseline(tiny, kv, monkeypatch):
    cfg, w = tiny
    ref = _runner(cfg, w, BaselineBackend(attention="torch_sdpa"), kv)
    monkeypatch.setattr(baseline_sglang, "sglang_decode_ops", lambda device: (_stand_in(), None))
    rt = _runner(cfg, w, BaselineBackend(), kv)
    assert rt.impl["attention"] == "sglang_triton_decode" and "fallback" not in rt.impl
    assert isinstance(rt.backend.sgl_decode, SGLangTritonDecode)
    (t_ref, l_ref), (t, logits) = _decode(ref), _decode(rt)
    assert torch.equal(t, t_ref), f"kv={kv}: tokens differ from the SDPA baseline"
    err = ((logits - l_ref).abs().max() / l_ref.abs().max()).item()
    assert err <= 0.025, f"kv={kv}: max |logit diff| {err:.3%} of max |logit|"


def test_probe_mismatch_falls_back_with_a_note_or_raises_when_named(tiny, monkeypatch):
    cfg, w = tiny
    monkeypatch.setattr(baseline_sglang, "sglang_decode_ops", lambda device: (_stand_in(v_scale_used=False), None))
    rt = _runner(cfg, w, BaselineBackend(), "fp8")  # v_scale = 1/64 left out: 64x too large
    assert rt.impl["attention"] == "torch_sdpa" and rt.impl["fallback"] == "sglang_triton_decode_mismatch"
    assert rt.backend.sgl_decode is None
    with pytest.raises(ValueError, match="attention='sglang_triton_decode' differs from torch SDPA"):
        _runner(cfg, w, BaselineBackend(attention="sglang_triton_decode"), "fp8")


def test_auto_on_the_cpu_is_torch_and_named_choices_say_why(tiny):
    cfg, w = tiny
    rt = _runner(cfg, w, "baseline", "bf16")
    assert {k: rt.impl[k] for k in ("attention", "prologue", "router")} == {
        "attention": "torch_sdpa", "prologue": "torch", "router": "torch_fp32_matmul"}
    assert "fallback" not in rt.impl
    with pytest.raises(ValueError, match="attention='sglang_triton_decode' cannot run here: ImportError: .*CUDA"):
        _runner(cfg, w, BaselineBackend(attention="sglang_triton_decode"), "bf16")
    with pytest.raises(ValueError, match="prologue='sglang' cannot run here"):
        _runner(cfg, w, BaselineBackend(prologue="sglang"), "bf16")


@pytest.mark.parametrize("kw, match", [({"attention": "flashinfer"}, "attention must be one of"),
                                       ({"prologue": "fused"}, "prologue must be one of")])
def test_baseline_rejects_unknown_choices(kw, match):
    with pytest.raises(ValueError, match=match):
        BaselineBackend(**kw)
