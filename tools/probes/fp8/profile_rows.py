"""The group-128 row kernels side by side under ncu (FP8_DESIGN.md, odd group rows): 64 MB bf16 with
N = 4095 (fp8_quant_odd_row_tile_kernel), N = 2880 (the row tile kernel's covers) and N = 4096 (the
column tile kernel), each quantised once inside a CUDA profiler range:

    ncu --clock-control none --profile-from-start off --set full -o rep \\
        python3 tools/probes/fp8/profile_rows.py

(tools/gpu_check.sh runs it so with HPC_NCU_SCRIPTS=<this file>.)
"""

import torch

from hpc_common import fp8

MB = 1 << 20


def main() -> None:
    cases = []
    for n in (4095, 2880, 4096):
        m = (64 * MB) // (2 * n)
        cases.append(torch.randn(m, n, device="cuda").to(torch.bfloat16))
    for x in cases:  # build and warm up outside the range
        fp8.quantize_per_token_group(x, 128)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for x in cases:
        fp8.quantize_per_token_group(x, 128)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
