"""`attnviz export`: attention maps as a PNG, SVG or PDF picture."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.atomic_files import check_writable
from attnviz.choices import Output, View
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.pictures import (
    ALL_HEADS,
    DEFAULT_PICTURE,
    HeadChoice,
    PictureSettings,
    head_choice,
    picture_settings,
)
from attnviz.cli.settings import (
    DEFAULT_READING,
    DEFAULT_SETTINGS,
    NO_EFFECTS,
    NO_PRODUCTS,
    Effects,
    MapProducts,
    ModelSettings,
    Reading,
    map_products,
    model_settings,
    page_effect_options,
    reading_options,
    request,
)
from attnviz.outputs import PICTURES, output_of_file, refuse_inapplicable
from attnviz.request import asked_for
from attnviz.writers import Rendering, write


@model_settings
@map_products
@picture_settings
@head_choice
@page_effect_options
@with_environment
@reading_options
def export(
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="The picture file: its suffix, .png, .svg or .pdf, picks the format; .html "
            "writes the interactive page.",
        ),
    ],
    text: d.TextOrProbeArgument = None,
    detect: d.DetectOption = None,
    view: d.ViewOption = View.MODEL,
    reading: Reading = DEFAULT_READING,
    target: d.TargetOption = None,
    aggregate: d.AggregateOption = None,
    label_positions: d.LabelPositionsOption = False,
    pair: d.PairOption = None,
    between: d.BetweenOption = None,
    environment: Environment = NO_TERMINAL,
    effects: Effects = NO_EFFECTS,
    choice: HeadChoice = ALL_HEADS,
    picture: PictureSettings = DEFAULT_PICTURE,
    products: MapProducts = NO_PRODUCTS,
    settings: ModelSettings = DEFAULT_SETTINGS,
) -> None:
    """Save attention maps as a picture: PNG, SVG or PDF, by the suffix of --output;
    or .html: the interactive page.

    Rows are query tokens, columns key tokens, with a colour bar from 0 to 1
    and a title naming the model, the mode, the layer and the head. The same
    input always gives a byte-identical file. The page (one offline file) has the
    same three views, switched in it; --view picks the one it opens on.
    """
    out.check_probe(detect, text, target, pair)
    drawn = output_of_file(output, (*PICTURES, Output.HTML))
    refuse_inapplicable([*picture.given(), *choice.given()], [drawn], view)
    asked = request(
        reading,
        settings=settings,
        text=text,
        target=target,
        pair=pair,
        products=products.drawn(settings, aggregate),
        aggregate=aggregate,
        effects=effects,
    )
    style = picture.style()
    top = out.top_heads_for(choice, aggregate, detect, answered=effects.answer is not None)
    effects.drawing(reading.model, top, page=drawn is Output.HTML)
    products.ranking(top)
    between = out.checked_between(between, pair)
    check_writable(output)  # before the model loads
    extractor = asked.open(environment)
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.aggregate import aggregate as combine

    found = asked.run(extractor, out.only_one(out.inputs(text, extractor)))
    maps, top = asked_for(found.maps), effects.ranked(top, found)
    if between is not None:
        maps = out.between_sentences(maps, between)
    if aggregate is not None:
        maps = combine(maps, aggregate)
    how = Rendering(
        view, style, top, label_positions, title=picture.title or "", effects=found.effects
    )
    write([maps], drawn, output, how)
