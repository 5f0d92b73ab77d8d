"""The one colour scale every renderer uses: viridis, dark for little attention."""

from __future__ import annotations

import numpy as np

# viridis sampled at 0, 1/4, 1/2, 3/4, 1.
_RAMP = np.array(
    [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], dtype=float
)


def rgb(weight: float) -> tuple[int, int, int]:
    """The colour of a weight in [0, 1] (clipped), as 0–255 channels."""
    position = min(max(weight, 0.0), 1.0) * (len(_RAMP) - 1)
    low = min(int(position), len(_RAMP) - 2)
    mix = _RAMP[low] + (position - low) * (_RAMP[low + 1] - _RAMP[low])
    red, green, blue = (round(channel) for channel in mix)
    return red, green, blue


def ink(weight: float) -> str:
    """Black or white, whichever reads on the cell colour of ``weight``."""
    return "black" if weight > 0.6 else "white"
