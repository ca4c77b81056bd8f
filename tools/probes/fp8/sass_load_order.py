"""How many of a kernel's global loads leave before the first instruction that reads a loaded register.

A streaming kernel wants every load of a thread in flight at once. ptxas may instead place the use of one
load before the next load is issued (in-order issue then holds the next load until the first has landed),
which serialises the DRAM round trips. An FP8 whole-vector cover kernel read 17 % slower than the kernel it
was cut from for this reason: its 4 loads per thread left one at a time (fp8_quant_tile.cuh says how the
kept form avoids it).

For every kernel of a cubin, the report counts its 16-byte global loads (LDG.E.128, the streaming kernels'
vectors; scalar loads such as a scale's are left out) up to the first use of loaded data, and how many there
are in all; a kernel whose first use comes before the fourth of them (or its last, if fewer) is marked SERIAL.
Needs cuobjdump (the CUDA toolkit's, or triton's: set CUOBJDUMP). Exit status 1 if any kernel is SERIAL.

    python3 tools/sass_load_order.py CUBIN [--filter fp8_quant_row_tile]
    python3 tools/sass_load_order.py --build-fp8 [-D HPC_FP8_COVER_WHOLE_VECTORS=0] [--filter ...]

`--build-fp8` compiles hpc-common's fp8_quant.cu with the JIT's flags (hpc_common importable).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
REG = re.compile(r"\bR(\d+)\b")
WIDTH = {".128": 4, ".64": 2}


def sass(cubin: Path) -> str:
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit("cuobjdump not found: set CUOBJDUMP (e.g. triton's backends/nvidia/bin/cuobjdump)")
    return subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def functions(text: str):
    """(name, [(offset, instruction text)]) per kernel."""
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        yield name, [(int(a, 16), i) for a, i in INSTR.findall(part)]


def split(instr: str) -> tuple[str, str]:
    """(opcode with its modifiers, operand text) of an instruction, its @P guard dropped."""
    body = instr.split(None, 1)[1] if instr.startswith("@") else instr
    op, _, operands = body.partition(" ")
    return op, operands


def is_vector_load(op: str) -> bool:
    return op.startswith("LDG") and ".128" in op


def loaded_registers(instr: str) -> set[int]:
    """The registers an LDG writes (its first operand and the ones its width covers)."""
    op, operands = split(instr)
    first = REG.search(operands)
    n = next((w for suffix, w in WIDTH.items() if suffix in op), 1)
    return set(range(int(first.group(1)), int(first.group(1)) + n)) if first else set()


def reads(instr: str) -> set[int]:
    """Registers an instruction reads: every register operand after the destination (all of them for
    stores)."""
    op, operands = split(instr)
    regs = [int(r) for r in REG.findall(operands)]
    if op.startswith(("STG", "ST.", "STS", "STL", "RED", "ATOM")):
        return set(regs)
    return set(regs[1:])


def report(code: list[tuple[int, str]]) -> tuple[int, int, int | None, bool]:
    """(loads before the first use, loads in all, offset of the first use, serial) of one kernel's code."""
    pending: set[int] = set()
    before, total, first_use = 0, 0, None
    for offset, instr in code:
        if is_vector_load(split(instr)[0]):
            total += 1
            if first_use is None:
                before += 1
                pending |= loaded_registers(instr)
        elif first_use is None and pending and reads(instr) & pending:
            first_use = offset
    # Serial: a use of loaded data comes before a load that is part of the same burst (the loads of the
    # thread's vectors, issued together in the kernels that stream well).
    serial = 0 < before < min(total, 4) and total > before
    return before, total, first_use, serial


def build_fp8(defines: list[str]) -> Path:
    """hpc-common's fp8_quant.cu as a cubin, with the JIT's flags (hpc_common.jit.build) and extra -D switches."""
    from hpc_common import _ext
    from hpc_common.jit.build import nvcc_compile_flags
    from hpc_common.jit.toolchain import find_nvcc

    src = next(s for s in _ext.SPEC.sources if Path(s).name == "fp8_quant.cu")
    out = Path(tempfile.mkdtemp()) / "fp8_quant.cubin"
    flags = nvcc_compile_flags(_ext.SPEC.include_dirs, [f"-D{d}" for d in defines])
    subprocess.run([str(find_nvcc()), *flags, "-cubin", "-o", str(out), str(src)], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cubin", nargs="?", type=Path)
    ap.add_argument("--build-fp8", action="store_true", help="compile fp8_quant.cu for sm_90a first")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="a define for --build-fp8")
    ap.add_argument("--filter", default="", help="only kernels whose mangled name contains this")
    args = ap.parse_args()
    cubin = build_fp8(args.defines) if args.build_fp8 else args.cubin
    if cubin is None:
        ap.error("give a cubin or --build-fp8")
    serial_any = False
    for name, code in functions(sass(cubin)):
        if args.filter not in name:
            continue
        before, total, first_use, serial = report(code)
        if total == 0:
            continue
        serial_any |= serial
        where = f"first use at {first_use:#x}" if first_use is not None else "no use found"
        mark = "SERIAL " if serial else "       "
        print(f"{mark}{before:3d} of {total:3d} loads before the first use ({where})  {name}", flush=True)
    sys.exit(1 if serial_any else 0)


if __name__ == "__main__":
    main()
