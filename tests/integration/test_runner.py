"""The decode-step runner's parts on the CPU: the paged cache layout, configurations and their
errors, the attention sharding, the step state, and the e2e benchmark suite's wiring."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hpc_integration.runner import (DecodeRunner, ModelConfig, PagedKVCache, ParallelConfig, RunOptions, StepState,
                                    hf_config, preset, random_weights)
from hpc_integration.runner.backends.ours import kernel_reasons
from hpc_integration.runner.config import local_shapes
from hpc_integration.runner.sharding import rank_moe_checkpoint, shard_layer

ROOT = Path(__file__).resolve().parents[2]
FP8 = torch.float8_e4m3fn


# ---- paged cache --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8, torch.float32])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_cache_write_then_gather_round_trips(dtype, page_size):
    g = torch.Generator().manual_seed(page_size)
    B, L, Hkv, D = 3, 113, 2, 128
    cache = PagedKVCache(2, B, L, page_size, Hkv, D, dtype, "cpu", scale=1 / 64, seed=page_size)
    rows = torch.arange(B).repeat_interleave(L)
    pos = torch.arange(L).repeat(B)
    k, v = torch.randn(B * L, Hkv, D, generator=g), torch.randn(B * L, Hkv, D, generator=g)
    cache.write(1, cache.slots(rows, pos), k, v)
    for b in range(B):
        gk, gv = cache.gather(1, b, L)
        for got, x in ((gk, k), (gv, v)):
            want = x[b * L:(b + 1) * L]
            if dtype == FP8:  # e4m3(x / scale) * scale, the prologue's rule for a power-of-two scale
                want = (want * 64).clamp(-448, 448).to(FP8).float() / 64
            else:
                want = want.to(dtype).float()
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not cache.k[0].float().any(), "a write to layer 1 touched layer 0"


def test_cache_pages_are_scrambled_and_disjoint():
    cache = PagedKVCache(1, 4, 300, 16, 1, 128, torch.bfloat16, "cpu")
    pt = cache.page_table
    assert pt.shape == (4, 19) and pt.dtype == torch.int32
    assert sorted(pt.flatten().tolist()) == list(range(cache.num_pages))
    assert not torch.equal(pt.flatten(), torch.arange(cache.num_pages, dtype=torch.int32))
    slots = cache.slots(torch.tensor([2, 2, 2]), torch.tensor([0, 15, 16]))
    assert slots.tolist() == [int(pt[2, 0]) * 16, int(pt[2, 0]) * 16 + 15, int(pt[2, 1]) * 16]


def test_cache_rejects_bad_page_size_and_dtype():
    with pytest.raises(ValueError, match="page_size"):
        PagedKVCache(1, 1, 64, 48, 1, 128, torch.bfloat16, "cpu")
    with pytest.raises(ValueError, match="dtype"):
        PagedKVCache(1, 1, 64, 16, 1, 128, torch.float16, "cpu")


# ---- configurations -----------------------------------------------------------------------------

def test_presets_from_transformers_configs():
    cfg = preset("hy3_tp8", num_layers=3)
    assert (cfg.hidden_size, cfg.num_qo_heads, cfg.num_kv_heads, cfg.head_dim) == (4096, 8, 1, 128)
    assert (cfg.num_experts, cfg.top_k, cfg.moe_intermediate_size, cfg.num_layers) == (192, 8, 192, 3)
    q = preset("qwen3_30b_a3b")
    assert (q.hidden_size, q.num_qo_heads, q.num_kv_heads, q.num_experts, q.moe_intermediate_size) == (2048, 32, 4, 128, 768)
    assert preset("qwen3_30b_a3b_64x8").num_qo_heads == 64
    assert q.rope_theta == 1e6 and q.norm_topk_prob


@pytest.mark.parametrize("field, value, match", [
    ("mlp_only_layers", [0], "mlp_only_layers"), ("decoder_sparse_step", 2, "decoder_sparse_step"),
    ("hidden_act", "gelu", "hidden_act"), ("attention_bias", True, "attention_bias"),
    ("tie_word_embeddings", True, "tie_word_embeddings")])
def test_from_hf_refuses_what_the_runner_does_not_model(field, value, match):
    cfg = hf_config("tiny")
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_hf(cfg)


def test_from_hf_refuses_sliding_window():
    cfg = hf_config("tiny")
    cfg.use_sliding_window, cfg.sliding_window = True, 128
    with pytest.raises(ValueError, match="sliding_window"):
        ModelConfig.from_hf(cfg)


@pytest.mark.parametrize("kw, match", [({"num_qo_heads": 6}, "multiple of num_kv_heads"),
                                       ({"top_k": 99}, "top_k"), ({"head_dim": 0}, "head_dim")])
def test_model_config_errors(kw, match):
    base = dict(vocab_size=64, hidden_size=256, num_layers=1, num_qo_heads=4, num_kv_heads=4, head_dim=128,
                num_experts=8, top_k=2, moe_intermediate_size=64)
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("kw, match", [({"page_size": 48}, "page_size"), ({"kv_dtype": "fp16"}, "kv_dtype"),
                                       ({"moe_quant": "int4"}, "moe_quant"), ({"max_batch": 0}, "max_batch")])
def test_run_options_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        RunOptions(**kw)


def test_parallel_config_errors():
    cfg = preset("tiny")
    with pytest.raises(ValueError, match="tp_rank"):
        ParallelConfig(tp_rank=2, tp_size=2)
    with pytest.raises(ValueError, match="num_qo_heads"):
        ParallelConfig(tp_size=3).check(cfg)
    with pytest.raises(ValueError, match="num_experts"):
        ParallelConfig(ep_size=3).check(cfg)
    with pytest.raises(ValueError, match="equal"):
        ParallelConfig(tp_size=2, ep_size=4).check(cfg)


def _fake_runner(cfg, opts, par=ParallelConfig()):
    return SimpleNamespace(cfg=cfg, loc=local_shapes(cfg, par), opts=opts, par=par, device=torch.device("cpu"))


def test_ours_names_each_setting_the_kernels_do_not_serve():
    opts = RunOptions(page_size=64)
    base = dict(vocab_size=64, hidden_size=256, num_layers=1, num_qo_heads=4, num_kv_heads=2, head_dim=128,
                num_experts=64, top_k=4, moe_intermediate_size=64)
    reasons = " ".join(kernel_reasons(_fake_runner(ModelConfig(**base), opts)))
    assert "SM90" in reasons  # this CPU machine
    for kw, text in (({"head_dim": 64}, "head_dim=128"), ({"num_qo_heads": 64, "num_kv_heads": 2}, "GQA group 32"),
                     ({"hidden_size": 320}, "hidden size 320"), ({"moe_intermediate_size": 96}, "intermediate size"),
                     ({"num_experts": 96, "top_k": 4}, "router GEMM")):
        reasons = " ".join(kernel_reasons(_fake_runner(ModelConfig(**{**base, **kw}), opts)))
        assert text in reasons, (kw, reasons)


def test_runner_refuses_fp32_kv_outside_the_reference_and_long_caches():
    cfg = preset("tiny", num_layers=1, vocab_size=64, max_position=256)
    w = random_weights(cfg, seed=0)
    with pytest.raises(ValueError, match="fp32"):
        DecodeRunner(cfg, w, "baseline", RunOptions(kv_dtype="fp32", max_batch=1, max_kv_len=64))
    with pytest.raises(ValueError, match="max_position"):
        DecodeRunner(cfg, w, "reference", RunOptions(kv_dtype="fp32", max_batch=1, max_kv_len=512))
    with pytest.raises(ValueError, match="backend"):
        DecodeRunner(cfg, w, "fast", RunOptions(max_batch=1, max_kv_len=64))


def test_ours_backend_without_a_gpu_says_why():
    cfg = preset("tiny", num_layers=1, vocab_size=64, max_position=256)
    with pytest.raises(ValueError, match="SM90"):
        DecodeRunner(cfg, random_weights(cfg, seed=0), "ours", RunOptions(max_batch=1, max_kv_len=64))


# ---- sharding -----------------------------------------------------------------------------------

@pytest.mark.parametrize("tp", [2, 4])
def test_attention_shards_reassemble(tp):
    cfg = preset("tiny", num_layers=1, vocab_size=64)  # 4 / 2 heads: at TP 4 KV heads are replicated
    lw = random_weights(cfg, seed=3).layers[0]
    shards = [shard_layer(lw, cfg, ParallelConfig(tp_rank=r, tp_size=tp)) for r in range(tp)]
    torch.testing.assert_close(torch.cat([s.wq for s in shards]), lw.wq, rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([s.wo for s in shards], dim=1), lw.wo, rtol=0, atol=0)
    kv_heads = [s.wk.shape[0] // 128 for s in shards]
    assert kv_heads == [max(1, cfg.num_kv_heads // tp)] * tp
    if tp <= cfg.num_kv_heads:
        torch.testing.assert_close(torch.cat([s.wk for s in shards]), lw.wk, rtol=0, atol=0)
    else:  # rank r holds KV head r // (tp / Hkv): the head its query heads read
        for r, s in enumerate(shards):
            h = r // (tp // cfg.num_kv_heads)
            torch.testing.assert_close(s.wv, lw.wv[h * 128:(h + 1) * 128], rtol=0, atol=0)


@pytest.mark.parametrize("quant", ["bf16", "fp8_block"])
@pytest.mark.parametrize("split", [(2, 1), (1, 2)])
def test_moe_shards_sum_to_the_full_layer(quant, split):
    from hpc_moe.reference import fused_moe_reference_quant

    tp, ep = split
    cfg = preset("tiny", num_layers=1, vocab_size=64)
    lw = random_weights(cfg, seed=4).layers[0]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(7, cfg.hidden_size, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(cfg.num_experts, generator=g)[:cfg.top_k] for _ in range(7)]).int()
    wts = torch.softmax(torch.randn(7, cfg.top_k, generator=g), -1)

    def moe(ck, start):
        return fused_moe_reference_quant(x, ck["w13"], ck["w2"], ids, wts, quant=quant, w13_scale=ck.get("w13_scale"),
                                         w2_scale=ck.get("w2_scale"), expert_offset=start)

    full = moe(rank_moe_checkpoint(lw, quant, ParallelConfig()), 0)
    parts = 0
    for r in range(max(tp, ep)):
        par = ParallelConfig(tp_rank=r % tp, tp_size=tp, ep_rank=r % ep, ep_size=ep)
        parts = parts + moe(rank_moe_checkpoint(lw, quant, par), local_shapes(cfg, par).expert_start)
    torch.testing.assert_close(parts, full, rtol=1e-9, atol=1e-9)


# ---- step state ---------------------------------------------------------------------------------

def test_step_state_advances_in_place():
    cache = PagedKVCache(1, 2, 100, 16, 1, 128, torch.bfloat16, "cpu")
    st = StepState.new(cache, 2, vocab=10)
    st.start(cache, torch.tensor([3, 4]), 15)
    assert st.kv_lens.tolist() == [16, 16] and st.slots.tolist() == cache.slots(st.rows, st.positions).tolist()
    st.logits[:, 7] = 1.0
    ptrs = [t.data_ptr() for t in (st.ids, st.positions, st.kv_lens, st.slots)]
    st.advance(cache)
    assert st.ids.tolist() == [7, 7] and st.positions.tolist() == [16, 16] and st.kv_lens.tolist() == [17, 17]
    assert st.slots.tolist() == [int(cache.page_table[b, 1]) * 16 for b in range(2)]
    assert ptrs == [t.data_ptr() for t in (st.ids, st.positions, st.kv_lens, st.slots)]  # graphs read these
    with pytest.raises(ValueError, match="max_kv_len"):
        st.start(cache, torch.tensor([0, 0]), 100)
    with pytest.raises(ValueError, match="batch"):
        StepState.new(cache, 3, vocab=10)


# ---- the e2e suite ------------------------------------------------------------------------------

def test_e2e_suite_is_registered_and_lists_its_cases():
    from hpc_common.bench.suite import BenchSuite
    from hpc_integration.runner import bench

    spec = importlib.util.spec_from_file_location("dev_entry_points", ROOT / "tools" / "dev_entry_points.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)  # the parser gpu_check.sh registers entry points with
    name, groups = tool.entry_point_tables(ROOT / "integration" / "pyproject.toml")
    assert name == "hpc-integration" and groups["hpc_ops.bench"] == [("e2e", "hpc_integration.runner.bench:SUITE")]
    assert isinstance(bench.SUITE, BenchSuite) and bench.SUITE.op == "e2e"
    assert bench.SUITE.unavailable()  # no SM90 GPU on this machine
    full, quick = bench.SUITE.cases(False), bench.SUITE.cases(True)
    assert len(full) == len(bench.MODELS) and 0 < len(quick) < len(full)
    meta = bench.SUITE.meta()
    assert meta["e2e_models"]["hy3_tp8"]["Hkv"] == 1 and meta["e2e_context"] == 8192
