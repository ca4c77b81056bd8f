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

# Packages of this monorepo whose `_ext` module declares ExtensionSpecs. Entry points in the
# group `hpc_ops.jit` add more (and cover installs where the list below is out of date).
KNOWN_EXT_MODULES = (
    "hpc_common._ext",
    "hpc_router_gemm._ext",
    "hpc_attention._ext",
    "hpc_moe._ext",
)


def discover() -> list[str]:
    found = []
    names = list(KNOWN_EXT_MODULES)
    try:
        names += [ep.value for ep in entry_points(group="hpc_ops.jit")]
    except Exception:  # pragma: no cover - metadata quirks must not stop a prebuild
        pass
    for mod in dict.fromkeys(names):
        try:
            importlib.import_module(mod)
            found.append(mod)
        except ModuleNotFoundError:
            continue
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
