"""hpc-common: shared build, launch, FP8 and test/benchmark utilities for hpc-ops."""

from ._version import __version__
from .launch import get_num_sms, get_pdl, pdl_enabled, set_num_sms, set_pdl

__all__ = ["__version__", "get_num_sms", "get_pdl", "pdl_enabled", "set_num_sms", "set_pdl"]
