"""JIT/AOT build of the CUDA sources shipped inside the hpc-ops wheels."""

from .build import COMMON_INCLUDE_DIR, build_extension, gencode_flags, load_extension, nvcc_compile_flags
from .spec import ExtensionSpec, registered
from .toolchain import JitError

__all__ = [
    "COMMON_INCLUDE_DIR",
    "ExtensionSpec",
    "JitError",
    "build_extension",
    "gencode_flags",
    "load_extension",
    "nvcc_compile_flags",
    "registered",
]
