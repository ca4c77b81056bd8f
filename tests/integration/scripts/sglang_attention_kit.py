"""SGLang's attention test kit (sglang/test/kits/attention_unittest) against the "hpc" backend.

usage: python sglang_attention_kit.py OUT_JSON [DEVICE] [HEAD_DIM] [BACKENDS] [GRAPH]
Runs every dense case (extend and decode; page sizes 1, 16, 32; MHA, GQA, MQA) eagerly for each
backend, and with GRAPH=1 the kit's CUDA-graph decode mode too. Writes one record per case:
{"backend", "case", "mode", "status": pass|mismatch|skip|error, "max_err", "detail"} plus the
operator call counts of hpc_integration.ops.
"""

import json
import sys
import traceback
import unittest

import torch


class _TC(unittest.TestCase):
    def runTest(self):
        pass


def extra_cases(da, backend: str) -> tuple:
    """Decode cases the kit's list lacks: page size 1, MQA, and a GQA group of 8 across pages."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    mk = lambda name, hq, hkv, page, prefix: da.DenseAttentionCase(  # noqa: E731
        name=name, backend=backend, forward_mode=ForwardMode.DECODE, num_heads=hq, num_kv_heads=hkv,
        page_size=page, prefix_lens=prefix)
    return (mk("extra_mha_decode_page_size_1", 4, 4, 1, (3, 9, 1)),
            mk("extra_gqa_decode_page_size_1", 4, 2, 1, (14, 2)),
            mk("extra_mqa_decode_page_boundary", 4, 1, 16, (14, 15, 16, 33)),
            mk("extra_gqa8_decode_page_size_16", 8, 1, 16, (47, 5)))


def main(out_json: str, device: str = "cpu", head_dim: str = "128", backends: str = "hpc", graph: str = "0") -> None:
    head_dim = int(head_dim)
    import hpc_integration.sglang as plugin
    from hpc_integration import ops

    plugin.register()
    from sglang.test.kits.attention_unittest.attention_methods import dense_attention as da

    torch.set_grad_enabled(False)
    tc = _TC()
    dtype = torch.bfloat16
    records = []
    for be in backends.split(","):
        for case in da.make_dense_cases(be) + extra_cases(da, be):
            rec = {"backend": be, "case": case.name, "mode": "eager", "page_size": case.page_size,
                   "heads": [case.num_heads, case.num_kv_heads], "decode": bool(case.forward_mode.is_decode())}
            try:
                fx = da.build_dense_attention_fixture(tc, case, device=device, dtype=dtype, head_dim=head_dim)
                out = da.run_dense_fixture_eager(fx)
                ref = da.expected_dense_fixture_output(fx)
                rec["max_err"] = (out.float() - ref.float()).abs().max().item()
                try:
                    torch.testing.assert_close(out, ref, atol=da.DENSE_ATOL, rtol=da.DENSE_RTOL)
                    rec["status"] = "pass"
                except AssertionError as e:
                    rec.update(status="mismatch", detail=str(e)[:300])
            except unittest.SkipTest as e:
                rec.update(status="skip", detail=str(e)[:300])
            except Exception as e:
                rec.update(status="error", detail=f"{type(e).__name__}: {e}"[:600], tb=traceback.format_exc()[-2000:])
            records.append(rec)
            print(rec["backend"], rec["case"], rec["status"], rec.get("max_err"), rec.get("detail", ""), flush=True)
        if graph == "1":
            from sglang.test.kits.attention_unittest.runner_modes import cuda_graph_decode_runner as cg

            for case in da.make_dense_cases(be):
                if not case.forward_mode.is_decode():
                    continue
                rec = {"backend": be, "case": case.name, "mode": "cuda_graph_decode"}
                try:
                    cg.run_dense_cuda_graph_decode_case(tc, case, dtype=dtype, device=device, head_dim=head_dim)
                    rec["status"] = "pass"
                except unittest.SkipTest as e:
                    rec.update(status="skip", detail=str(e)[:300])
                except Exception as e:
                    rec.update(status="error", detail=f"{type(e).__name__}: {e}"[:600],
                               tb=traceback.format_exc()[-2000:])
                records.append(rec)
                print(rec["backend"], rec["case"], rec["mode"], rec["status"], rec.get("detail", ""), flush=True)
    json.dump({"records": records, "calls": dict(ops.CALLS)}, open(out_json, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
