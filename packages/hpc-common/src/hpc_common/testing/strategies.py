"""Hypothesis strategies for shapes: draw sizes and seeds, never tensor contents."""

from __future__ import annotations

from hypothesis import strategies as st

# Sizes that sit on and around tile boundaries, plus deliberately awkward ones (FA3 style).
AWKWARD = (1, 2, 3, 7, 8, 15, 16, 17, 63, 64, 65, 113, 127, 128, 129, 239, 255, 256, 257, 799, 1023)


def dim(min_value: int = 1, max_value: int = 4096, multiple_of: int = 1) -> st.SearchStrategy[int]:
    """A size: mostly awkward/boundary values, sometimes anything in range."""
    pinned = [v for v in AWKWARD if min_value <= v <= max_value and v % multiple_of == 0]
    anyv = st.integers(min_value // multiple_of + (min_value % multiple_of > 0),
                       max_value // multiple_of).map(lambda k: k * multiple_of)
    return st.one_of(st.sampled_from(pinned), anyv) if pinned else anyv


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)
