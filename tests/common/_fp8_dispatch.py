"""The FP8 dispatch probe (fp8_dispatch_probe.cu, host code only, built with nvcc): it runs the launcher's own
geometry functions on the parameters the Python launcher would pass and names the kernel it would pick. Shared
by test_fp8_dispatch.py and test_fp8_finite_fast_path.py; the `probe` fixture (conftest.py) builds it once."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import torch
from hpc_common import _ext
from hpc_common.fp8 import heuristics, quant
from hpc_common.jit.toolchain import find_nvcc

PROBE = Path(__file__).with_name("fp8_dispatch_probe.cu")
MODE = {"per_tensor_static": quant.PER_TENSOR, "per_tensor": quant.PER_TENSOR, "per_token": quant.PER_TOKEN,
        "group": quant.PER_TOKEN_GROUP, "group_col": quant.PER_TOKEN_GROUP, "per_head": quant.PER_TOKEN_HEAD}


def build_probe(tmp_path_factory, *defines: str) -> Path:
    """The probe built with extra -D switches (the default build with none)."""
    exe = tmp_path_factory.mktemp("fp8_dispatch") / "probe"
    cmd = [str(find_nvcc()), "-std=c++17", "-O1", *defines, *(f"-I{d}" for d in _ext.SPEC.include_dirs), str(PROBE),
           "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


# The probe's input line: QuantParams fields in fp8_dispatch_probe.cu's order.
FIELDS = ("rows", "heads", "row_len", "seg_len", "segs_per_row", "x_stride_t", "x_stride_h", "q_stride_t",
          "q_stride_h", "scale_stride_row", "scale_stride_seg", "dtype", "vectorized", "peel", "q", "scale_source",
          "per_tensor_dynamic", "num_sms")


def fields(mode: str, x: torch.Tensor, group_size: int = 128) -> list[int]:
    """What _launch would pass for `mode` on x (a CPU tensor): heuristics.launch_fields itself, with the
    scale tensor the public function would allocate."""
    out = torch.empty(x.shape, dtype=torch.uint8)
    scale_out = None
    if mode in ("group", "group_col"):
        m, g = x.shape[0], math.ceil(x.shape[1] / group_size)
        scale_out = torch.empty(g, (m + 3) // 4 * 4).t()[:m] if mode == "group_col" else torch.empty(m, g)
    scale_source = quant._SCALE_STATIC if mode == "per_tensor_static" else quant._SCALE_DYNAMIC
    params = heuristics.launch_fields(x, out, scale_out, MODE[mode], group_size, scale_source)
    params.update(q=out.data_ptr(), num_sms=132)
    return [int(params[f]) for f in FIELDS]


def _run(probe: Path, rows: list[list[int]], *args: str) -> str:
    text = "\n".join(" ".join(str(v) for v in r) for r in rows) + "\n"
    return subprocess.run([str(probe), *args], input=text, capture_output=True, text=True, check=True).stdout


def choose(probe: Path, rows: list[list[int]]) -> list[str]:
    return _run(probe, rows).split()


def launch_geometry(probe: Path, rows: list[list[int]]) -> list[tuple[str, int, int, int, int]]:
    """(kernel, segments per CTA, lanes per segment, threads per CTA, CTAs) the launcher would use for each row of
    fields; the last two are 0 for kernels other than the tile kernels."""
    lines = _run(probe, rows, "geometry").splitlines()
    return [(name, *map(int, nums)) for name, *nums in (line.split() for line in lines)]


def geometry(probe: Path, rows: list[list[int]]) -> list[tuple[str, int, int]]:
    """(kernel, segments per CTA, lanes per segment) the launcher would use for each row of fields."""
    return [g[:3] for g in launch_geometry(probe, rows)]
