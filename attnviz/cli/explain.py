"""`attnviz explain`: the attention computation of one head, step by step."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.cli.heads import TableFormat
from attnviz.core import BUILTIN, Mode


@options.model_settings
def explain(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    layer: Annotated[str, typer.Option("--layer", "-l", help="The layer to walk through.")] = "0",
    head: Annotated[str, typer.Option("--head", help="The head to walk through.")] = "0",
    output_format: Annotated[
        TableFormat,
        typer.Option(
            "--format",
            "-f",
            case_sensitive=False,
            help="table: the walk-through. json: every intermediate matrix by name.",
        ),
    ] = TableFormat.TABLE,
    model: options.ModelOption = BUILTIN,
    query: Annotated[
        int | None,
        typer.Option(
            "--query",
            "-q",
            help="With --model: the index of the query token whose row is explained "
            "(0 for the first token; negative counts from the end).",
        ),
    ] = None,
    width: options.WidthOption = None,
    settings: options.ModelSettings = options.DEFAULT_SETTINGS,
) -> None:
    """Walk through one head's attention on your sentence, with the real numbers.

    X, W_Q, W_K, W_V; Q, K, V; the scores Q·Kᵀ, scaled by √d_k; the mask; the
    softmax row by row; each output row as a weighted sum of V's rows; the
    heads concatenated and projected by W_O. Use a small --d-model (say 8) to
    see every matrix whole.
    """
    from attnviz.errors import UsageError
    from attnviz.explain import explain_builtin
    from attnviz.io import dump_json, read_texts

    if output_format is TableFormat.CSV:
        raise UsageError("explain writes table or json")
    if settings.words or not settings.special:
        raise UsageError(
            "explain works on the tokens as the model sees them: no --words or --no-special"
        )
    extract = options.extraction(model=model, mode=mode, layer=layer, head=head, settings=settings)
    text = options.only_one(read_texts(text))
    if model != BUILTIN:
        _explain_pretrained(extract, text, target, query, output_format)
        return
    if query is not None:
        raise UsageError("--query goes with --model; the built-in walk-through shows every row")
    explanation = explain_builtin(
        text,
        mode=(mode or Mode.SELF).value,
        target=target,
        layer=layer,
        head=head,
        config=extract.config,
        lowercase=extract.lowercase,
    )
    if output_format is TableFormat.JSON:
        options.write_stdout(dump_json(explanation.to_dict()))
        return
    from attnviz.render.explain import render

    console = options.stdout_console(options.ColourChoice.AUTO, width)
    console.print(render(explanation, console.width))


def _explain_pretrained(
    extract: options.Extraction,
    text: str,
    target: str | None,
    query: int | None,
    output_format: TableFormat,
) -> None:
    from attnviz.explain import explain_pretrained
    from attnviz.io import dump_json
    from attnviz.pretrained import load

    extract.prepare()
    explanation = explain_pretrained(
        load(extract.model, extract.load_options),
        text,
        mode=None if extract.mode is None else extract.mode.value,
        target=target,
        layer=extract.layer,
        head=extract.head,
        query=query or 0,
    )
    if output_format is TableFormat.JSON:
        options.write_stdout(dump_json(explanation.to_dict()))
        return
    from attnviz.render.explain import render_query

    options.stdout_console(options.ColourChoice.AUTO, None).print(render_query(explanation))
