"""The TMA producer of the decode kernel against the cp.async one (GPU): both feed the same
consumer arithmetic, so outputs must be identical bit for bit, on every page size the TMA path
takes (16 .. 256: 4 .. 1 boxes per tile), both KV dtypes, FP8 Q, strided (non-contiguous)
caches, and short tails inside a page. A bad page table never faults."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import DecodeOptions
from hpc_common.testing import assert_bitwise_equal, poisoned_empty

from ._cases import FP8, check_accuracy, make_case

pytestmark = pytest.mark.gpu


def decode_with(case, tma: bool, **kw):
    """The case decoded by the TMA (tma) or cp.async producer; returns the output and the producer that ran
    (pages under 16 tokens always take cp.async; a layout the driver cannot encode raises)."""
    B, Hq = case.q.shape[:2]
    Hkv = case.k.shape[2]
    ws = ha.DecodeWorkspace(B, Hkv, Hq, case.max_kv_len, num_ctas=kw.pop("num_ctas", None))
    options = DecodeOptions(min_tiles=kw.pop("min_tiles", None), producer="tma" if tma else "cp_async")
    plan = ha.plan_decode(case.kv_lens, Hkv, Hq, workspace=ws, options=options)
    out = poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
              k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale, out=out, **kw)
    torch.cuda.synchronize()
    return out, "tma" if tma and case.k.shape[1] >= 16 else "cp_async"


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("page_size", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("group", [1, 8, 16])
def test_tma_bitwise_equals_cp_async(page_size, group, kv_dtype):
    lens = [1, 15, 17, 63, 64, 65, 300, 1000, 4100, 0]
    case = make_case(lens, 2, group, kv_dtype, page_size=page_size, seed=page_size + group)
    ref, name = decode_with(case, False)
    assert name == "cp_async"
    got, name = decode_with(case, True)
    assert name == "tma"
    assert_bitwise_equal(got, ref, name=f"TMA vs cp.async producer ({case.describe()})")
    check_accuracy(got, case, "TMA producer")


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_tma_fp8_q_and_small_grid(kv_dtype):
    """FP8 Q (rows of 128 bytes by bulk copy) and many tasks per CTA (ring wrap-around)."""
    case = make_case([1, 77, 640, 3000, 129, 5], 2, 8, kv_dtype, q_dtype=FP8, seed=12)
    ref, _ = decode_with(case, False, num_ctas=3, min_tiles=1)
    got, name = decode_with(case, True, num_ctas=3, min_tiles=1)
    assert name == "tma"
    assert_bitwise_equal(got, ref, name="TMA vs cp.async, FP8 q")


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("page_size", [16, 64, 128])
def test_tma_strided_cache(page_size, kv_dtype):
    """K and V as views of one [pages, 2, page_size, Hkv + 1, 128] buffer: every outer stride
    differs from the contiguous one (the tensor map carries them)."""
    case = make_case([700, 64, 3, 2000], 2, 4, kv_dtype, page_size=page_size, seed=21)
    P = case.k.shape[0]
    buf = torch.full((P, 2, page_size, 3, 128), float("nan"), dtype=torch.float32, device="cuda").to(case.k.dtype)
    buf[:, 0, :, :2] = case.k
    buf[:, 1, :, :2] = case.v
    k, v = buf[:, 0, :, :2], buf[:, 1, :, :2]
    assert not k.is_contiguous()
    strided = type(case)(**{**case.__dict__, "k": k, "v": v})
    ref, _ = decode_with(case, False)
    got, name = decode_with(strided, True)
    assert name == "tma"
    assert_bitwise_equal(got, ref, name="TMA on a strided cache vs contiguous cp.async")


def test_small_pages_fall_back_to_cp_async():
    case = make_case([100, 7], 1, 8, torch.bfloat16, page_size=8, seed=3)
    out, name = decode_with(case, True)
    assert name == "cp_async"
    check_accuracy(out, case)


@pytest.mark.parametrize("tma", [False, True], ids=["cp_async", "tma"])
def test_bad_page_ids_never_fault(tma):
    """Without validation, out-of-range page ids are clamped on the device: no fault, and the
    next call on good inputs is still right."""
    case = make_case([300, 5000], 1, 8, FP8, seed=4)
    pt = case.page_table.clone()
    pt[0, 1] = 1 << 30
    pt[1, 3] = -7
    bad = type(case)(**{**case.__dict__, "page_table": pt})
    decode_with(bad, tma, validate=False)
    out, _ = decode_with(case, tma)
    check_accuracy(out, case)
