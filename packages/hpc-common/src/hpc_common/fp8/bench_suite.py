"""hpc-bench suite of the FP8 quantisers (entry point `hpc_ops.bench: fp8_quant`): the cases of
hpc_common.fp8.bench, and without a GPU the references checked against the E4M3 rounding bound."""

from __future__ import annotations

import types

import torch

from ..bench.layouts import Layout
from ..bench.suite import BenchCase, BenchSuite, check_row

# The README's modes, at 64 MB (BF16 [8192, 4096]): the quick run.
QUICK_MODES = ("per_tensor_static", "per_tensor_dynamic", "per_token", "group128_col", "per_token_head")
# E4M3 keeps 3 mantissa bits: round-to-nearest moves a value by at most half a step, and the top binade
# [256, 448] has steps of 32, so |dequantised - x| <= 16 scale = amax / 28 (scale = amax / 448; the check allows
# 1e-5 more for the float32 rounding of the scale and of the dequantising product).
E4M3_REL_BOUND = 16.0 / 448.0


class Fp8QuantSuite(BenchSuite):
    op = "fp8_quant"
    title = "FP8 quantisation (hpc_common.fp8)"
    order, aliases = 40, ("fp8", "quant")
    layouts = (
        Layout("FP8 quantisation", case=("input_mb", "M", "N", "dtype"), split=("mode",),
               show=("pct_of_copy", "bitwise")),
    )

    def __init__(self):
        self._state = None

    def _inputs(self):
        if self._state is None:
            dev = torch.device("cuda", torch.cuda.current_device())
            self._state = (torch.tensor([0.02], device=dev), torch.Generator(dev).manual_seed(0))
        return self._state

    def cases(self, quick: bool) -> list[BenchCase]:
        from . import bench

        modes = QUICK_MODES if quick else bench.MODES
        args = types.SimpleNamespace(reps=50 if quick else 100, no_ref=False)
        items = bench._cases(quick, (64,) if quick else None, modes)
        return [BenchCase(f"fp8 {mode} {mb} MB N={n} {str(dtype)[6:]}", self._runner(mode, mb, n, dtype, args),
                          est_s=1.0 + 0.05 * mb)
                for mode, mb, n, dtype in items]

    def _runner(self, mode, mb, n, dtype, args):
        def run() -> list[dict]:
            from ..bench.results import Rows
            from ..bench.timing import METHODS
            from . import bench

            static, gen = self._inputs()
            rows = Rows()
            bench.bench_case(rows, mode, mb, n, dtype, args, static, gen, METHODS)
            return rows.rows

        return run

    def cpu_check(self) -> list[dict]:
        from . import reference as ref

        g = torch.Generator().manual_seed(0)
        x = (torch.randn(37, 640, generator=g) * torch.logspace(-3, 2, 37)[:, None]).to(torch.bfloat16)
        xf = x.double()
        rows = []
        cases = {
            "per_tensor_dynamic": (ref.quantize_per_tensor_ref(x), xf.abs().amax()),
            "per_token": (ref.quantize_per_token_ref(x), xf.abs().amax(-1, keepdim=True)),
            "group128": (ref.quantize_per_token_group_ref(x, 128),
                         xf.view(37, 5, 128).abs().amax(-1).repeat_interleave(128, 1)),
        }
        for mode, ((q, s), amax) in cases.items():
            group = 128 if mode == "group128" else None
            deq = ref.dequantize_ref(q, s, group).double()
            err = ((deq - xf).abs() / amax).max().item()
            rows.append(check_row(f"{mode} reference: |dequantised - x| / amax", err, E4M3_REL_BOUND * (1 + 1e-5),
                                  shape="37x640"))
            want_scale = (amax / 448.0).float()
            got_scale = s.double().repeat_interleave(128, 1) if group else s.double()
            rows.append(check_row(f"{mode} reference: scale against amax / 448",
                                  ((got_scale - want_scale.double()) / want_scale.double()).abs().max().item(),
                                  1e-7, shape="37x640"))
        return rows


SUITE = Fp8QuantSuite()
