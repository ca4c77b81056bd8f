"""tools/probes/fp8/sass_load_order.py on SASS text (cuobjdump is not needed here): the grouped and serial load orders of
the FP8 cover kernels (excerpts of their SASS, registers as ptxas gave them) are told apart, and scalar loads
and stores do not count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sass_load_order", ROOT / "tools" / "probes" / "fp8" / "sass_load_order.py")
slo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slo)


def _sass(name: str, lines: list[str]) -> str:
    body = "\n".join(f"        /*{16 * i:04x}*/                   {text} ;" for i, text in lines)
    return f"\n\tcode for sm_90a\n\t\tFunction : {name}\n{body}\n"


GROUPED = [
    (0, "@P3 LDG.E.128.CONSTANT R8, desc[UR6][R44.64]"),
    (1, "@P2 LDG.E.128.CONSTANT R12, desc[UR6][R36.64]"),
    (2, "IMAD.IADD R2, R39, 0x1, R3"),
    (3, "@P1 LDG.E.128.CONSTANT R16, desc[UR6][R36.64]"),
    (4, "@P0 LDG.E.128.CONSTANT R20, desc[UR6][R32.64]"),
    (5, "@P3 LOP3.LUT R0, R8, 0x7fff7fff, RZ, 0xc0, !PT"),
    (6, "STG.E.EF.64 desc[UR6][R4.64], R8"),
]
SERIAL = [
    (0, "@P3 LDG.E.128.CONSTANT R8, desc[UR6][R40.64]"),
    (1, "IMAD.IADD R2, R39, 0x1, R3"),
    (2, "@P3 LOP3.LUT R0, R8, 0x7fff7fff, RZ, 0xc0, !PT"),
    (3, "@P2 LDG.E.128.CONSTANT R12, desc[UR6][R42.64]"),
    (4, "@P1 LDG.E.128.CONSTANT R16, desc[UR6][R32.64]"),
    (5, "@P0 LDG.E.128.CONSTANT R20, desc[UR6][R36.64]"),
]
SCALAR_FIRST = [  # a scale's 4-byte load used at once, then the vectors: not serial
    (0, "LDG.E R3, desc[UR4][R2.64]"),
    (1, "FMUL R5, R3, 0.5"),
    (2, "LDG.E.128.CONSTANT R8, desc[UR6][R40.64]"),
    (3, "LDG.E.128.CONSTANT R12, desc[UR6][R42.64]"),
    (4, "LOP3.LUT R0, R8, 0x7fff7fff, RZ, 0xc0, !PT"),
]


def _report(lines):
    (name, code), = list(slo.functions(_sass("k", lines)))
    assert name == "k"
    return slo.report(code)


def test_grouped_loads_all_leave_before_the_first_use():
    before, total, first_use, serial = _report(GROUPED)
    assert (before, total, serial) == (4, 4, False)
    assert first_use == 5 * 16


def test_a_use_between_the_loads_is_serial():
    before, total, first_use, serial = _report(SERIAL)
    assert (before, total, serial) == (1, 4, True)
    assert first_use == 2 * 16


def test_scalar_loads_do_not_count():
    before, total, _, serial = _report(SCALAR_FIRST)
    assert (before, total, serial) == (2, 2, False)


def test_registers_of_a_wide_load_and_of_a_store():
    assert slo.loaded_registers("@P3 LDG.E.128.CONSTANT R8, desc[UR6][R44.64]") == {8, 9, 10, 11}
    assert slo.loaded_registers("LDG.E.64 R4, desc[UR6][R2.64]") == {4, 5}
    assert slo.reads("STG.E.EF.64 desc[UR6][R4.64], R8") == {4, 8}
    assert slo.reads("LOP3.LUT R0, R8, 0x7fff7fff, RZ, 0xc0, !PT") == {8}
