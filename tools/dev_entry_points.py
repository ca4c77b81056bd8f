"""Register the monorepo's entry points for a checkout that is not pip-installed (the device machine,
where tools/gpu_check.sh puts every package's src/ on PYTHONPATH): writes a minimal `.dist-info` folder
per package (METADATA + entry_points.txt, from the `[project.entry-points."<group>"]` tables of its
pyproject.toml and its `[project.scripts]` as `console_scripts`) into DIR, which then goes on PYTHONPATH
too, and a launcher per console script into DIR/bin (put it on PATH: `hpc-bench` then works as after a
pip install). hpc-common finds extensions (`hpc_ops.jit`), references (`hpc_ops.reference`) and
benchmark suites (`hpc_ops.bench`) through these entry points only. tools/dev_env.sh does all of it.

    python3 tools/dev_entry_points.py DIR
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TABLE = re.compile(r'^\[project\.entry-points\."([^"]+)"\]\s*$')
_SCRIPTS = "[project.scripts]"  # becomes the console_scripts group, as pip records it
LAUNCHER = """#!/usr/bin/env python3
import sys
from {module} import {func}
sys.exit({func}())
"""
_ENTRY = re.compile(r'^([A-Za-z0-9_.\-]+)\s*=\s*"([^"]+)"\s*$')


def entry_point_tables(pyproject: Path) -> tuple[str, dict[str, list[tuple[str, str]]]]:
    """(distribution name, {group: [(name, value), ...]}) of one pyproject.toml."""
    name, groups, group = None, {}, None
    for line in pyproject.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            m = _TABLE.match(line)
            group = m.group(1) if m else "console_scripts" if line == _SCRIPTS else None
            if group:
                groups.setdefault(group, [])
            continue
        if name is None and line.startswith("name") and "=" in line:
            name = line.split("=", 1)[1].strip().strip('"')
        m = _ENTRY.match(line)
        if group and m:
            groups[group].append((m.group(1), m.group(2)))
    return name or pyproject.parent.name, groups


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for pyproject in sorted([*ROOT.glob("packages/*/pyproject.toml"), ROOT / "integration" / "pyproject.toml"]):
        if not pyproject.is_file():
            continue
        name, groups = entry_point_tables(pyproject)
        dist = out / f"{name.replace('-', '_')}-0.0.dev0.dist-info"
        dist.mkdir(exist_ok=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.dev0\n")
        (dist / "entry_points.txt").write_text(
            "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps) + "\n" for g, eps in groups.items()))
        for script, target in groups.get("console_scripts", []):
            module, _, func = target.partition(":")
            launcher = out / "bin" / script
            launcher.parent.mkdir(exist_ok=True)
            launcher.write_text(LAUNCHER.format(module=module, func=func))
            launcher.chmod(0o755)
        print(f"{name}: {', '.join(f'{g} ({len(e)})' for g, e in groups.items()) or 'no entry points'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
