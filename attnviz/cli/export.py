"""`attnviz export`: attention maps as a PNG, SVG or PDF picture."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnviz.atomic_files import check_writable
from attnviz.choices import Aggregate, Output, View
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import page_effect_options
from attnviz.cli.environment import passes_shown
from attnviz.cli.option_kinds import output_option
from attnviz.cli.pictures import head_choice, picture_settings
from attnviz.cli.settings import (
    DEFAULT_READING,
    NO_PRODUCTS,
    Reading,
    map_products,
    model_settings,
    reading_options,
)
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.outputs import PICTURES, output_of_file, refuse_inapplicable
from attnviz.request import asked_for
from attnviz.writers import Rendering, write

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit
    from attnviz.extractor import Extractor
    from attnviz.maps import AttentionMaps


@sharing(page_effect_options, head_choice, picture_settings, map_products, model_settings)
@reading_options
def export(
    output: output_option(
        "The picture file: its suffix, .png, .svg or .pdf, picks the format; .html "
        "writes the interactive page.",
        kind=str,
    ),
    text: d.TextOrProbeArgument = None,
    detect: d.DetectOption = None,
    view: d.ViewOption = View.MODEL,
    reading: Reading = DEFAULT_READING,
    target: d.TargetOption = None,
    aggregate: d.AggregateOption = None,
    label_positions: d.LabelPositionsOption = False,
    pair: d.PairOption = None,
    between: d.BetweenOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Save attention maps as a picture: PNG, SVG or PDF, by the suffix of --output;
    or .html: the interactive page.

    Rows are query tokens, columns key tokens, with a colour bar from 0 to 1
    and a title naming the model, the mode, the layer and the head. The same
    input always gives a byte-identical file. The page (one offline file) has the
    same three views, switched in it; --view picks the one it opens on. With --answer
    and --corrupt the page also draws the circuit that carries the answer (as `circuit`
    scores it, by EAP): an edge's score on hover, a head's map on a click.
    """
    out.check_probe(detect, text, target, pair)
    drawn = output_of_file(output, (*PICTURES, Output.HTML))
    refuse_inapplicable([*shared.picture.given(), *shared.choice.given()], [drawn], view)
    asked = shared.request(
        reading,
        text=text,
        target=target,
        pair=pair,
        products=shared.products.drawn(shared.settings, aggregate),
        aggregate=aggregate,
    )
    style = shared.picture.style()
    top = out.top_heads_for(
        shared.choice, aggregate, detect, answered=shared.effects.answer is not None
    )
    shared.effects.drawing(reading.model, top, page=drawn is Output.HTML)
    shared.products.ranking(top)
    between = out.checked_between(between, pair)
    check_writable(output)  # before the model loads
    extractor = asked.open(shared.environment)
    line = out.only_one(out.inputs(text, extractor))
    found = asked.run(extractor, line, shared.environment)
    maps, top = asked_for(found.maps), shared.effects.ranked(top, found)
    circuit = None
    if drawn is Output.HTML and shared.effects.corrupt is not None:
        circuit = _circuit(shared, reading, text, extractor, line)
    maps = _drawn(maps, between, aggregate)
    how = Rendering(
        view,
        style,
        top,
        label_positions,
        title=shared.picture.title or "",
        effects=found.effects,
        circuit=circuit,
    )
    write([maps], drawn, output, how)


def _drawn(maps: AttentionMaps, between: str | None, aggregate: Aggregate | None) -> AttentionMaps:
    """The maps as the picture draws them: one sentence's rows over the other's columns
    (``--between``), then combined (``--aggregate``)."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.aggregate import aggregate as combine

    if between is not None:
        maps = out.between_sentences(maps, between)
    return maps if aggregate is None else combine(maps, aggregate)


def _circuit(
    shared: Shared, reading: Reading, text: str | None, extractor: Extractor, line: str
) -> Circuit:
    """The circuit the page draws beside the maps: every edge scored by EAP on the
    answer and the corrupted twin, the top edges kept (``circuit``'s defaults)."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.circuits.options import CircuitOptions

    job = shared.request(reading, text=text, products=NO_PRODUCTS, circuit=CircuitOptions())
    with passes_shown(shared.environment) as listener:
        (found,) = extractor.run([job.input(line)], job.request, progress=listener)
    return asked_for(found.circuit)
