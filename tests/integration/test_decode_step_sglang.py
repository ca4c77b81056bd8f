"""integration/h200/decode_step_sglang.py's CPU pieces (config building, server arguments, the replay
timer's bookkeeping, row assembly and the combine verdict), so a bug in them cannot waste a device
call. The SGLang model runner itself needs CUDA (run_h200.sh step `sglstep`)."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mod():
    spec = importlib.util.spec_from_file_location("decode_step_sglang", ROOT / "integration/h200/decode_step_sglang.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_model_dir_shapes(mod, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    shape = mod.write_model_dir("hy3_tp8", str(tmp_path), layers=3)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert shape == {"Hq": 8, "Hkv": 1, "hidden": 4096, "experts": 192, "top_k": 8, "moe_I": 192, "layers": 3,
                     "vocab": mod.VOCAB}
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["head_dim"] == 128
    assert cfg["num_hidden_layers"] == 3 and cfg["max_position_embeddings"] >= mod.CONTEXT + 512
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    assert tok.encode("t5 t77", add_special_tokens=False) == [5, 77]
    shape = mod.write_model_dir("qwen3_30b_a3b", str(tmp_path / "q"), layers=4)
    assert (shape["Hq"], shape["Hkv"], shape["experts"], shape["moe_I"]) == (32, 4, 128, 768)


def test_server_kwargs_differ_only_in_attention(mod):
    a = mod.server_kwargs("ours", "/m", [1, 4, 16, 64])
    b = mod.server_kwargs("sglang_triton", "/m", [1, 4, 16, 64])
    assert a.pop("attention_backend") == "hpc" and b.pop("attention_backend") == "triton"
    assert a == b
    assert a["kv_cache_dtype"] == "fp8_e4m3" and a["load_format"] == "dummy"
    assert a["cuda_graph_bs_decode"] == [1, 4, 16, 64] and a["max_running_requests"] == 64
    assert mod.provider_env("ours")["HPC_INTEGRATION_OPS"] == "attention,moe"
    assert mod.provider_env("sglang_triton")["HPC_INTEGRATION_OPS"] == "none"


def test_pool_holds_every_request(mod):
    for batches in ([1], [4, 16], [1, 4, 16, 64]):
        n = mod.pool_tokens(batches)
        per_req = mod.CONTEXT + mod.NEW_TOKENS + mod.steps_per_batch()
        assert n % mod.PAGE_SIZE == 0
        # whole pages per request, for every step the batch runs
        assert n // max(batches) >= -(-per_req // mod.PAGE_SIZE) * mod.PAGE_SIZE


@pytest.mark.parametrize("kw, word", [(dict(provider="flash"), "provider"), (dict(model="llama"), "model"),
                                      (dict(batches=[0]), "batches"), (dict(layers=0), "layers"),
                                      (dict(context=100), "context")])
def test_check_args_names_the_argument(mod, kw, word):
    args = dict(provider="ours", model="hy3_tp8", batches=[1], layers=4)
    args.update(kw)
    with pytest.raises(ValueError, match=word):
        mod.check_args(**args)


class _Clock:
    """Fake device clock: replay advances it by the replay's cost, flush by the flush's."""

    def __init__(self):
        self.t = 0.0
        self.log = []


class _Event:
    def __init__(self, clock):
        self.clock, self.at = clock, None

    def record(self):
        self.at = self.clock.t

    def elapsed_time(self, other):  # milliseconds, as torch.cuda.Event
        return other.at - self.at


def test_replay_timer_bookkeeping(mod):
    clock = _Clock()
    costs = [random.uniform(0.1, 0.9) for _ in range(40)]  # ms per replay, fresh each run
    it = iter(costs)

    def replay(key, fb):
        clock.log.append(("replay", key))
        clock.t += next(it)
        return key * 10

    def flush():
        clock.log.append(("flush",))
        clock.t += 5.0  # a flush must land before the start event

    syncs = []
    timer = mod.ReplayTimer(replay, lambda: _Event(clock), flush, lambda: syncs.append(1), rotation_replays=3)
    assert timer(1, None) == 10 and timer.replays == 1  # "off": untimed
    timer.mode = "cold"
    assert timer(2, None) == 20 and timer(3, None) == 30
    timer.mode = "rotation"
    assert timer(4, None) == 40
    t = timer.collect()
    assert syncs == [1] and timer.replays == 6
    assert t["cold"] == pytest.approx([costs[1] * 1e3, costs[2] * 1e3])
    assert t["rotation"] == pytest.approx([sum(costs[3:6]) * 1e3 / 3])
    assert clock.log[1] == ("flush",) and clock.log[3] == ("flush",) and ("flush",) not in clock.log[5:]
    assert timer.collect() == {"cold": [], "rotation": []}  # pending cleared
    timer.mode = "warm"
    with pytest.raises(ValueError, match="mode"):
        timer(5, None)
    with pytest.raises(ValueError, match="rotation_replays"):
        mod.ReplayTimer(replay, None, flush, None, rotation_replays=0)


def _run(mod, provider, model="hy3_tp8", tokens=((1, 2), (3, 4)), scale=1.0, calls=None):
    rng = random.Random(hash((provider, model)))
    batches = {}
    for b in ("1", "4"):
        batches[b] = {m: [rng.uniform(100, 900) * scale for _ in range(5)] for m in mod.METHODS}
        batches[b]["tokens"] = [list(t) for t in tokens]
    if calls is None:
        calls = {"attention.kernel": 8, "moe.kernel": 8, "prologue.kernel": 8} if provider == "ours" else {}
    return {"provider": provider, "model": model, "attention_backend": mod.PROVIDERS[provider][0],
            "sglang": "0.5.17", "kv_dtype": "fp8_e4m3", "context": mod.CONTEXT,
            "shape": {"Hq": 8, "Hkv": 1, "layers": 4, "vocab": mod.VOCAB}, "batches": batches, "calls": calls}


def test_assemble_rows(mod):
    import statistics

    ours, base = _run(mod, "ours", scale=0.5), _run(mod, "sglang_triton", tokens=((1, 2), (3, 5)))
    rows = mod.assemble_rows([ours, base])
    assert len(rows) == 2 * 2 * len(mod.METHODS)
    for r in rows:
        src = ours if r["provider"] == "ours" else base
        assert r["median_us"] == pytest.approx(statistics.median(src["batches"][str(r["batch"])][r["method"]]))
        assert r["greedy_match"] is False and r["greedy_steps"] == 2  # the second step differs
        assert (r["Hq"], r["Hkv"], r["kv_dtype"], r["layers"], r["context"], r["sglang"]) == (
            8, 1, "fp8_e4m3", 4, mod.CONTEXT, "0.5.17")
    same = mod.assemble_rows([ours, _run(mod, "sglang_triton")])
    assert all(r["greedy_match"] is True for r in same)
    alone = mod.assemble_rows([ours])
    assert all(r["greedy_match"] is None for r in alone)
    with pytest.raises(ValueError, match="no samples"):
        bad = _run(mod, "ours")
        bad["batches"]["1"]["cold"] = []
        mod.assemble_rows([bad])


def test_combine_writes_results_and_verdict(mod, tmp_path, capsys):
    from hpc_common.bench.results import load_results

    runs = tmp_path / "runs"
    runs.mkdir()
    for r in (_run(mod, "ours", scale=0.5), _run(mod, "sglang_triton")):
        (runs / f"{r['model']}_{r['provider']}.json").write_text(json.dumps(r))
    assert mod.combine(str(runs), str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("sglstep: PASS") and "hy3_tp8 B=4 cold: ours" in out
    meta, rows = load_results(tmp_path / "sglang_step.json")
    assert meta["sglang"] == "0.5.17" and len(rows) == 2 * 2 * len(mod.METHODS)
    assert {r["provider"] for r in rows} == {"ours", "sglang_triton"}
    assert all({"model", "batch", "Hq", "Hkv", "kv_dtype", "method", "median_us", "greedy_match"} <= set(r)
               for r in rows)
    assert (tmp_path / "sglang_step.md").read_text().count("\n| hy3_tp8 |") == len(rows)
    # ours not on the kernels, and a model without its baseline: FAIL naming both
    (runs / "hy3_tp8_ours.json").write_text(json.dumps(_run(mod, "ours", calls={"attention.kernel": 2})))
    (runs / "qwen3_30b_a3b_ours.json").write_text(json.dumps(_run(mod, "ours", model="qwen3_30b_a3b")))
    assert mod.combine(str(runs), str(tmp_path)) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("sglstep: FAIL") and "moe.kernel" in last and "qwen3_30b_a3b: no sglang_triton run" in last
    assert mod.combine(str(tmp_path / "none"), str(tmp_path)) == 1
