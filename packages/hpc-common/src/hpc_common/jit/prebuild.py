"""Compile every hpc-ops kernel ahead of time: `python -m hpc_common.jit.prebuild`.

Run it when building a serving image (or on one machine of an air-gapped cluster, then copy
HPC_JIT_CACHE_DIR); at run time set HPC_JIT_DISABLE=1 so no process compiles on the hot path.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points

from .spec import registered

EXT_GROUP = "hpc_ops.jit"


def discover() -> list[str]:
    """Import every module registered under the entry-point group `hpc_ops.jit` (each package's
    `_ext`, which declares its ExtensionSpecs on import). hpc-common knows no package by name: an
    installed package is found by its metadata alone. Returns the modules imported."""
    found = []
    for mod in dict.fromkeys(ep.value for ep in entry_points(group=EXT_GROUP)):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # the module exists but its own import failed: a real error
                raise
            print(f"[hpc-ops] entry point {EXT_GROUP}: {mod} is declared but not installed", file=sys.stderr)
            continue
        found.append(mod)
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--list", action="store_true", help="list the extensions, build nothing")
    args = ap.parse_args(argv)
    discover()
    specs = registered()
    for name, spec in sorted(specs.items()):
        if args.list:
            print(name, *[s.name for s in spec.sources])
            continue
        path = spec.build()
        print(f"{name}: {path}")
    if not specs:
        print("no hpc-ops extensions found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
