"""hpc-integration: adapters that plug hpc-ops operators into SGLang and vLLM.

The adapters land with their operators; this release only reserves the package, its
dependency pins and its plugin entry points.
"""

from ._version import __version__

__all__ = ["__version__"]
