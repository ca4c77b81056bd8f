"""hpc-moe: fused latency-oriented Mixture-of-Experts for Hopper.

This release ships the pure-torch reference (`hpc_moe.reference.fused_moe_reference`); the
fused CUDA pipeline (routing index, Gate-Up GEMM through the index, SiLU*up with FP8
requantisation, Down GEMM, weighted reduce) lands in a later release.
"""

from ._version import __version__

__all__ = ["__version__"]
