"""The picture options export, render and batch share, and the choice of heads worth
looking at first that show, export and batch share; each bundled into one argument."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from attnviz.cli import declarations as d
from attnviz.cli.bundles import bundle, given_flags
from attnviz.cli.option_kinds import top_heads_option
from attnviz.errors import UsageError
from attnviz.head_columns import EFFECTS, SUMMED, Detector, HeadColumn, Needs, RankBy, listed
from attnviz.render.style import FIGURE_OPTIONS, Style, check_colormap

if TYPE_CHECKING:  # imported where used: `attnviz --help` imports this module
    from attnviz.analysis.heads import TopHeads
    from attnviz.render.style import Style


# The picture options, declared where their bundle is (each is a field below).
CmapOption = Annotated[
    str,
    d.in_pictures(
        "--cmap",
        metavar="NAME",
        help="Any matplotlib colormap name.",
    ),
]

DpiOption = Annotated[
    int,
    d.in_pictures(
        "--dpi",
        metavar="DPI",
        min=20,
        max=1200,
        help="Pixels per inch.",
    ),
]

VmaxOption = Annotated[
    float,
    d.in_pictures(
        "--vmax",
        parser=d.number(1e-6, 1.0),
        metavar="WEIGHT",
        help="The weight at the top of the colour scale, above 0 and at most 1 (default 1, the "
        "same in every picture). Lower it for long inputs, whose weights are all small.",
    ),
]

PictureValuesOption = d.values_option(
    d.PICTURE_PANEL,
    "Print the weights in the cells of one map (--view head; in the terminal, "
    "panels), up to 16 × 16.",
)

FigsizeOption = Annotated[
    str | None,
    d.in_pictures(
        "--figsize",
        metavar="W,H",
        help="Figure size in inches, e.g. 3.5,3 for a paper's column (default: sized by the map).",
    ),
]

FontSizeOption = Annotated[
    float | None,
    d.in_pictures(
        "--font-size",
        parser=d.number(4.0, 72.0),
        metavar="POINTS",
        help="Size of labels and titles, 4 to 72. Token labels never go below 6 points: where "
        "the cells are too small for them, every n-th label is shown and the picture says so.",
    ),
]

TitleOption = Annotated[
    str | None,
    d.in_pictures(
        "--title",
        metavar="TEXT",
        help="The figure's title (default: the model and the mode).",
    ),
]

NoTitleOption = Annotated[
    bool,
    d.in_pictures(
        "--no-title",
        help="No figure title (the layer and head of each panel of a grid stay).",
    ),
]

TopHeadsOption = top_heads_option(
    "Only the N heads `attnviz heads --sort STAT` lists first (of those selected), in "
    "that order: the heads worth looking at first.",
    rich_help_panel=d.SELECTION_PANEL,
)

ByOption = Annotated[
    RankBy | None,
    d.in_selection(
        "--by",
        metavar="STAT",
        case_sensitive=False,
        help="The statistic --top-heads ranks by: "
        + listed([c for c in SUMMED if c.needs is not Needs.SPAN])
        + ", span with --span, or "
        + listed(EFFECTS)
        + " with --answer (see attnviz heads). In the order heads --sort lists them. "
        "[default: entropy, the --detect score, or ablation with --answer]",
        show_default=False,
    ),
]

LowestOption = Annotated[
    bool,
    d.in_selection(
        "--lowest",
        help="--top-heads takes the smallest values instead (--by entropy --lowest: the most "
        "focused heads), as heads --sort STAT --reverse lists them.",
    ),
]


@dataclass(frozen=True)
class PictureSettings:
    """How pictures look, as the command line gives it: each field declares its option."""

    cmap: CmapOption = "viridis"
    dpi: DpiOption = 100
    values: PictureValuesOption = False
    vmax: VmaxOption = 1.0
    figsize: FigsizeOption = None
    font_size: FontSizeOption = None
    title: TitleOption = None
    no_title: NoTitleOption = False

    def style(self) -> Style:
        """The checked style: a known colormap, a size of two positive numbers."""
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
        return given_flags(self)

    def figure(self) -> dict[str, object]:
        """The options of a figure of effects (``HeadEffects.picture``'s keywords), checked."""
        style = self.style()
        return {name: getattr(style, name) for name in FIGURE_OPTIONS}


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
picture_settings = bundle("picture", PictureSettings)
DEFAULT_PICTURE = PictureSettings()
# The same for a figure of effects (heads --picture, trace): its colours are a diverging
# scale centred on 0, so no colour map, no printed weights, no top of the scale.
figure_settings = bundle("picture", PictureSettings, leave_out=("cmap", "values", "vmax"))


@dataclass(frozen=True)
class HeadChoice:
    """--top-heads N --by STAT [--lowest], as the command line gives it."""

    top_heads: TopHeadsOption = None
    by: ByOption = None  # not given: entropy, or the score of --detect
    lowest: LowestOption = False

    def top(self, detect: Detector | None = None, answered: bool = False) -> TopHeads | None:
        """The heads to draw; ranked by an effect on an answer only where one is given."""
        if self.top_heads is None:
            return None
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.analysis.heads import TopHeads

        default = HeadColumn.ABLATION if answered else HeadColumn.ENTROPY
        by = self.by or RankBy(default.value if detect is None else detect.value)
        if HeadColumn(by).needs is Needs.ANSWER and not answered:
            raise UsageError(f"--by {by} ranks heads by their effect on an answer: give --answer")
        return TopHeads(self.top_heads, by, self.lowest)

    def given(self) -> list[str]:
        """--top-heads, if given: it applies only where heads are drawn."""
        return [] if self.top_heads is None else ["--top-heads"]


# Gives a command --top-heads, --by and --lowest as one ``choice: HeadChoice`` argument.
head_choice = bundle("choice", HeadChoice)
ALL_HEADS = HeadChoice()
