"""Helpers shared by the test suites of every hpc-ops package."""

from .compare import assert_bitwise_equal, assert_close, error_stats
from .poison import poison_, poisoned_empty

__all__ = ["assert_bitwise_equal", "assert_close", "error_stats", "poison_", "poisoned_empty"]
