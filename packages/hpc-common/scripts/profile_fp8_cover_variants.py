"""Two builds of the row tile kernel's covers under ncu (FP8_NOTES.md, twenty-fifth session): group-128 of 64 MB
bf16 with N = 2880 on the default build (covers of whole vectors: the kernel without the partial-vector code, since
the twenty-sixth session) and on the build with -DHPC_FP8_COVER_WHOLE_VECTORS=0 (the partial-vector kernel). The
whole-vector kernel's first form read 37.8 against 32.3 us per cold call (A/B of a27c95a; profiled by this script
then as the switched-on build), its form with every address first 31.3 against 32.2 (A/B of 1b62255). Each
quantised once inside a CUDA profiler range:

    ncu --clock-control none --profile-from-start off --set full -o rep \\
        python3 packages/hpc-common/scripts/profile_fp8_cover_variants.py

(tools/gpu_check.sh runs it so with HPC_NCU_SCRIPTS=<this file>.)
"""

import torch

from hpc_common import fp8
from hpc_common.fp8 import quant

MB = 1 << 20
VARIANTS = ((), ("-DHPC_FP8_COVER_WHOLE_VECTORS=0",))


def main() -> None:
    n = 2880
    x = torch.randn((64 * MB) // (2 * n), n, device="cuda").to(torch.bfloat16)
    for defines in VARIANTS:  # build and warm up outside the range
        quant.EXT_DEFINES = defines
        fp8.quantize_per_token_group(x, 128)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for defines in VARIANTS:
        quant.EXT_DEFINES = defines
        fp8.quantize_per_token_group(x, 128)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    quant.EXT_DEFINES = ()


if __name__ == "__main__":
    main()
