"""`attnviz export`: attention maps as a PNG, SVG or PDF picture."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.cli.show import AggregateOption
from attnviz.core import BUILTIN
from attnviz.render.image import View

ViewOption = Annotated[
    View,
    typer.Option(
        "--view",
        case_sensitive=False,
        rich_help_panel=options.OUTPUT_PANEL,
        help="head: one map (pick it with --layer and --head). layer: the heads of one layer in a "
        "grid. model: every selected layer × head as small multiples.",
    ),
]
CmapOption = Annotated[
    str,
    typer.Option(
        "--cmap", rich_help_panel=options.OUTPUT_PANEL, help="Any matplotlib colormap name."
    ),
]
DpiOption = Annotated[
    int,
    typer.Option(
        "--dpi", min=20, max=1200, rich_help_panel=options.OUTPUT_PANEL, help="Pixels per inch."
    ),
]
VmaxOption = Annotated[
    float,
    typer.Option(
        "--vmax",
        min=1e-6,
        max=1.0,
        rich_help_panel=options.OUTPUT_PANEL,
        help="The weight at the top of the colour scale (default 1, the same in every picture). "
        "Lower it for long inputs, whose weights are all small.",
    ),
]
PictureValuesOption = Annotated[
    bool,
    typer.Option(
        "--values",
        rich_help_panel=options.OUTPUT_PANEL,
        help="Print the weights in the cells (maps up to 16 × 16).",
    ),
]


@options.model_settings
def export(
    text: options.TextArgument,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="The picture file: its suffix, .png, .svg or .pdf, picks the format.",
        ),
    ],
    view: ViewOption = View.MODEL,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    layer: options.LayerOption = "all",
    head: options.HeadOption = "all",
    aggregate: AggregateOption = None,
    cmap: CmapOption = "viridis",
    dpi: DpiOption = 100,
    values: PictureValuesOption = False,
    vmax: VmaxOption = 1.0,
    settings: options.ModelSettings = options.DEFAULT_SETTINGS,
) -> None:
    """Save attention maps as a picture: PNG, SVG or PDF, by the suffix of --output.

    Rows are query tokens, columns key tokens, with a colour bar from 0 to 1
    and a title naming the model, the mode, the layer and the head. The same
    input always gives a byte-identical file.
    """
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.io import read_texts
    from attnviz.render.image import Style, check_colormap, picture_format

    picture = picture_format(output)
    check_colormap(cmap)
    extract = options.extraction(model=model, mode=mode, layer=layer, head=head, settings=settings)
    extract.prepare()
    maps = extract(options.only_one(read_texts(text)), target)
    if aggregate is not None:
        maps = combine(maps, aggregate)
    options.save_picture(
        maps, view, picture, Style(cmap=cmap, dpi=dpi, values=values, vmax=vmax), output
    )
