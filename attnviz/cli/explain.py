"""`attnviz explain`: the attention computation of one head, step by step."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.environment import stdout_console
from attnviz.cli.settings import Reading, model_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError
from attnviz.inputs import read_texts

FormatOption = d.format_option(
    d.ReportFormat,
    "table: the walk-through. json: every intermediate matrix by name.",
)


@sharing(model_settings)
def explain(
    text: d.TextArgument,
    mode: d.ModeOption = None,
    target: d.TargetOption = None,
    layer: Annotated[
        str, typer.Option("--layer", "-l", metavar="LAYERS", help="The layer to walk through.")
    ] = "0",
    head: Annotated[
        str, typer.Option("--head", metavar="HEADS", help="The head to walk through.")
    ] = "0",
    output_format: FormatOption = Output.TABLE,
    model: d.ModelOption = d.BUILTIN,
    query: Annotated[
        int | None,
        typer.Option(
            "--query",
            "-q",
            metavar="INDEX",
            help="With --model: the index of the query token whose row is explained "
            "(0 for the first token; negative counts from the end).",
        ),
    ] = None,
    width: d.WidthOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Walk through one head's attention on your sentence, with the real numbers.

    X, W_Q, W_K, W_V; Q, K, V; the scores Q·Kᵀ, scaled by √d_k; the mask; the
    softmax row by row; each output row as a weighted sum of V's rows; the
    heads concatenated and projected by W_O. Use a small --d-model (say 8) to
    see every matrix whole. With --model: one query row of a pretrained head.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.loading import BUILTIN

    if shared.settings.words or not shared.settings.special or shared.settings.chat:
        raise UsageError(
            "explain works on the text as given, token by token: no --words, --no-special or --chat"
        )
    asked = shared.request(Reading(model, mode, layer, head), text=text, target=target)
    builtin = asked.spec.model == BUILTIN  # also for --model builtin:seed=1
    if query is not None and builtin:
        raise UsageError("--query goes with --model; the built-in walk-through shows every row")
    extractor = asked.open(shared.environment)
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.data_formats import dump_json

    explanation = extractor.explain(
        out.only_one(read_texts(text)), mode=mode, target=target, layer=layer, head=head,
        query=query, raw_pieces=shared.settings.raw_pieces,
    )  # fmt: skip
    if output_format is Output.JSON:
        out.write_stdout(dump_json(explanation.to_dict()))
        return
    # rich's drawing: after the options are checked (a usage error loads none)
    from attnviz.render.explain import render, render_query

    console = stdout_console(d.ColourChoice.AUTO, width, shared.environment)
    if builtin:
        console.print(render(explanation, console.width))
    else:
        console.print(render_query(explanation))
