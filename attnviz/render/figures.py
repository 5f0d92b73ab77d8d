"""What every matplotlib figure attnviz draws shares: settings applied without changing
matplotlib's global state, fonts' missing glyphs said once, files saved reproducibly (no
timestamps in PNG, SVG or PDF metadata), text fitted to its room, and pictures too large
for matplotlib's buffers refused.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from attnviz.choices import Output
from attnviz.errors import UsageError, warn
from attnviz.render.fonts import Fonts
from attnviz.render.style import (
    MIN_LABEL_POINTS,
)

if TYPE_CHECKING:
    pass

_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font")


# Settings for every drawing, applied with rc_context so that no global state changes:
# stable ids inside SVG files; PDF streams compressed, with TrueType (Type 42)
# fonts, since the Type 3 fonts matplotlib embeds by default fail the checks of
# IEEE and ACM submission systems.
# Each map is its own image in SVG and PDF, not all resampled into one.
_RC: Any = {  # (matplotlib's stubs spell every rc key out as a Literal)
    "svg.hashsalt": "attnviz",
    "pdf.compression": 6,
    "pdf.fonttype": 42,
    "image.composite_image": False,
}


@contextmanager
def drawing(missing_glyphs: set[str]) -> Iterator[None]:
    """Draw with attnviz's settings, collecting into ``missing_glyphs`` the characters no
    font has (matplotlib warns once per glyph; they are drawn as boxes and the picture
    is still written). The font manager's log stays quiet meanwhile."""
    import logging

    import matplotlib

    font_log = logging.getLogger("matplotlib.font_manager")
    level = font_log.level
    font_log.setLevel(logging.ERROR)
    try:
        with (
            matplotlib.rc_context(_RC),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            yield
    finally:
        font_log.setLevel(level)
    missing_glyphs.update(
        chr(int(match.group(1)))
        for caught_warning in caught
        if (match := _MISSING_GLYPH.search(str(caught_warning.message)))
    )


def warn_missing(missing: set[str]) -> None:
    """One line naming the characters no installed font has (drawn as boxes)."""
    shown = "".join(sorted(missing)[:20]) + ("…" if len(missing) > 20 else "")
    warn(
        f"no installed font has {len(missing)} of the characters ({shown}); they are drawn "
        "as boxes. Install a font that covers them, such as Noto Sans CJK or Noto Color Emoji."
    )


def saved(
    figure: Any,
    picture: Output,
    laid_out: bool = False,
    then: Callable[[Any], None] | None = None,
) -> bytes:
    """A figure written in ``picture``'s format, its texts in the font stack (each
    character none of its fonts has escaped), laid out first unless ``laid_out`` (its
    room set by hand), and ``then`` given its renderer (to fit labels to the room the
    layout left them): a glyph still missing (a face of the stack that lacks it), met in
    any of it, said in one warning, not as matplotlib's warning per glyph."""
    missing: set[str] = set()
    out = io.BytesIO()
    Fonts.installed().dress(figure)
    with drawing(missing):
        if not laid_out:
            figure.tight_layout()
        if then is not None:
            then(figure.canvas.get_renderer())
        figure.savefig(out, format=picture.value, metadata=metadata(picture))
    if missing:
        warn_missing(missing)
    return out.getvalue()


def fit_text(text: Any, renderer: Any, room: float, largest: float, cut: bool = True) -> bool:
    """Shrink ``text`` until it is at most ``room`` pixels wide, down to the smallest
    size labels take; past that, cut it in the middle with an ellipsis (if ``cut``).
    Whether it fitted whole."""
    size = largest
    text.set_fontsize(size)
    while text.get_window_extent(renderer).width > room and size > MIN_LABEL_POINTS:
        size -= 0.5
        text.set_fontsize(size)
    if text.get_window_extent(renderer).width <= room:
        return True
    whole = text.get_text()
    keep = len(whole)
    while text.get_window_extent(renderer).width > room and keep > 8:
        keep -= 2
        head = keep // 2
        text.set_text(whole[:head] + "…" + whole[len(whole) - (keep - head) :])
    return False


def metadata(picture: Output) -> dict[str, Any]:
    # Dates make two runs on the same input differ: leave them out.
    return {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}[
        picture
    ]


# Agg addresses a figure's pixels, and the copies of them a canvas keeps, with 32-bit
# byte offsets: a larger figure fails to allocate, or corrupts memory and aborts.
MAX_PIXELS = (2**31 - 1) // 4


def check_drawable(width: float, height: float, dpi: int) -> None:
    """Refuse, before anything is drawn, a figure of more pixels than Agg can address."""
    columns, rows = round(width * dpi), round(height * dpi)
    if columns * rows > MAX_PIXELS:
        raise UsageError(
            f"a figure of {columns:,} × {rows:,} pixels ({width:.3g} × {height:.3g} inches at "
            f"{dpi} dpi) is too large to draw (at most {MAX_PIXELS / 1e6:.0f} million pixels): "
            "lower --dpi or --figsize, or pool the maps (--pool)"
        )
