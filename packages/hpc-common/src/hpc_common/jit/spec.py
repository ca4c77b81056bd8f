"""ExtensionSpec: one operator family's sources, loaded once per process.

Every package declares its specs at import of its `_ext` module (listed under the entry-point group
`hpc_ops.jit`); `prebuild` imports those and walks the registry, so images and air-gapped clusters
can compile everything ahead of time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from .build import build_extension, load_extension

_REGISTRY: dict[str, "ExtensionSpec"] = {}


@dataclass
class ExtensionSpec:
    name: str
    sources: list[Path]
    include_dirs: list[Path] = field(default_factory=list)
    cuda_flags: list[str] = field(default_factory=list)
    cxx_flags: list[str] = field(default_factory=list)
    _module: ModuleType | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        _REGISTRY[self.name] = self

    @classmethod
    def for_package(cls, name: str, package_dir: Path) -> "ExtensionSpec":
        """The layout every hpc-ops package uses: csrc/*.cu + csrc/bindings.cpp, headers in include/."""
        package_dir = Path(package_dir)
        return cls(name=name,
                   sources=sorted((package_dir / "csrc").glob("*.cu")) + [package_dir / "csrc" / "bindings.cpp"],
                   include_dirs=[package_dir / "include"])

    def _args(self):
        return (self.name, self.sources, self.include_dirs, self.cuda_flags, self.cxx_flags)

    def build(self) -> Path:
        return build_extension(*self._args())

    def load(self) -> ModuleType:
        if self._module is None:
            with self._lock:
                if self._module is None:
                    self._module = load_extension(*self._args())
        return self._module


def registered() -> dict[str, ExtensionSpec]:
    return dict(_REGISTRY)
