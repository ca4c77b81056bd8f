"""The cache key of a build: every byte that can change the produced binary."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterable

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def included_files(sources: Iterable[Path], include_dirs: Iterable[Path]) -> list[Path]:
    """Sources plus every header they include, transitively, that resolves inside our
    include dirs or next to the including file. System and CUDA headers are not followed:
    the nvcc version stands for them in the key."""
    include_dirs = [Path(d) for d in include_dirs]
    seen: dict[Path, None] = {}
    stack = [Path(s).resolve() for s in sources]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen[path] = None
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in _INCLUDE_RE.findall(text):
            for base in [path.parent, *include_dirs]:
                cand = (base / name).resolve()
                if cand.is_file():
                    stack.append(cand)
                    break
    return sorted(seen)


def build_key(
    name: str,
    sources: Iterable[Path],
    include_dirs: Iterable[Path],
    flags: Iterable[str],
    toolchain: Iterable[str],
) -> str:
    h = hashlib.sha256()
    h.update(name.encode())
    include_dirs = list(include_dirs)
    for f in included_files(sources, include_dirs):
        # Hash the file name relative to nothing machine-specific: its basename and bytes.
        h.update(f.name.encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    for part in [*flags, *toolchain]:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]
