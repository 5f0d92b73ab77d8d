"""The picture options export, render and batch share, and the choice of heads worth
looking at first that show, export and batch share; each bundled into one argument."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.cli import declarations as d
from attnviz.errors import UsageError
from attnviz.statistics import Detector, HeadColumn, RankBy

if TYPE_CHECKING:  # imported where used: `attnviz --help` imports this module
    from attnviz.analysis.heads import TopHeads
    from attnviz.render.style import Style


@dataclass(frozen=True)
class PictureSettings:
    """How pictures look, as the command line gives it: each field declares its option."""

    cmap: d.CmapOption = "viridis"
    dpi: d.DpiOption = 100
    values: d.PictureValuesOption = False
    vmax: d.VmaxOption = 1.0
    figsize: d.FigsizeOption = None
    font_size: d.FontSizeOption = None
    title: d.TitleOption = None
    no_title: d.NoTitleOption = False

    def style(self) -> Style:
        """The checked style: a known colormap, a size of two positive numbers."""
        from attnviz.render.style import Style, check_colormap

        check_colormap(self.cmap)
        if self.title is not None and self.no_title:
            raise UsageError("--title and --no-title contradict each other: pick one")
        return Style(
            cmap=self.cmap,
            dpi=self.dpi,
            values=self.values,
            vmax=self.vmax,
            figsize=None if self.figsize is None else parse_figsize(self.figsize),
            font_size=self.font_size,
            title="" if self.no_title else self.title,
        )

    def given(self) -> list[str]:
        """The options given (not at their defaults), as flags: what applies only where a
        picture is drawn (attnviz.outputs.APPLIES_TO says where)."""
        return d.given_flags(self)


def parse_figsize(text: str) -> tuple[float, float]:
    """``3.5,3`` -> (3.5, 3.0): two positive sizes in inches, at most 100."""
    parts = text.replace("x", ",").split(",")
    try:
        width, height = (float(part) for part in parts)
    except ValueError:
        raise UsageError(f"--figsize {text!r}: give width and height in inches, as 3.5,3") from None
    if not (0 < width <= 100 and 0 < height <= 100):
        raise UsageError(f"--figsize {text!r}: width and height are inches between 0 and 100")
    return width, height


# Gives a command the picture options as one ``picture: PictureSettings`` argument.
picture_settings = d.bundle("picture", PictureSettings)
DEFAULT_PICTURE = PictureSettings()


@dataclass(frozen=True)
class HeadChoice:
    """--top-heads N --by STAT [--lowest], as the command line gives it."""

    top_heads: int | None = None
    by: RankBy | None = None  # not given: entropy, or the score of --detect
    lowest: bool = False

    def top(self, detect: Detector | None = None) -> TopHeads | None:
        if self.top_heads is None:
            return None
        from attnviz.analysis.heads import TopHeads

        by = self.by or (
            RankBy(HeadColumn.ENTROPY.value) if detect is None else RankBy(detect.value)
        )
        return TopHeads(self.top_heads, by, self.lowest)

    def given(self) -> list[str]:
        """--top-heads, if given: it applies only where heads are drawn."""
        return [] if self.top_heads is None else ["--top-heads"]


_CHOICE_OPTIONS = {
    "top_heads": (d.TopHeadsOption, None),
    "by": (d.ByOption, None),
    "lowest": (d.LowestOption, False),
}
# Gives a command --top-heads, --by and --lowest as one ``choice: HeadChoice`` argument.
head_choice = d.bundle_options("choice", _CHOICE_OPTIONS, HeadChoice)
ALL_HEADS = HeadChoice()
