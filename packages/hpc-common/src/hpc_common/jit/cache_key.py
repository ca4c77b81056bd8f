"""The cache key of a build: every byte that can change the produced binary, and nothing else.

The key hashes the *contents* of the sources and of every header they include, each under a
name relative to the folder it was found in (never an absolute path), the compiler flags
without their include paths, and the toolchain versions. Two clones of one commit at different
paths, or the same wheel in two virtual environments, therefore get the same key and share a
prebuilt cache.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

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


def logical_name(path: Path, roots: Sequence[Path]) -> str:
    """`<i>:<path relative to roots[i]>` for the first root that holds `path` (else relative to
    roots[0]): the same string in every checkout of the same tree."""
    path = Path(path).resolve()
    for i, root in enumerate(roots):
        try:
            return f"{i}:{path.relative_to(root).as_posix()}"
        except ValueError:
            continue
    return f"0:{Path(os.path.relpath(path, roots[0])).as_posix()}"


def _strip_include_paths(flags: Iterable[str]) -> list[str]:
    """Flags without `-I<dir>`: the folders' contents are hashed, their location is not."""
    return [f for f in flags if not f.startswith("-I")]


def build_key(
    name: str,
    sources: Iterable[Path],
    include_dirs: Iterable[Path],
    flags: Iterable[str],
    toolchain: Iterable[str],
) -> str:
    sources = [Path(s).resolve() for s in sources]
    include_dirs = [Path(d).resolve() for d in include_dirs]
    # Roots: the sources' folders first (in source order), then the include dirs.
    roots = list(dict.fromkeys([s.parent for s in sources] + include_dirs))
    h = hashlib.sha256()
    h.update(name.encode())
    h.update(b"\0")
    for src in sources:  # the order of the sources is part of the build (object names)
        h.update(logical_name(src, roots).encode())
        h.update(b"\0")
    files = sorted((logical_name(f, roots), f) for f in included_files(sources, include_dirs))
    for logical, f in files:
        h.update(logical.encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    for part in [*_strip_include_paths(flags), *toolchain]:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]
