"""`attnviz explain`: the attention computation of one head, step by step."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.cli.heads import TableFormat
from attnviz.core import BUILTIN, Mode


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
    special: options.SpecialOption = True,
    download: options.DownloadOption = False,
    trust_remote_code: options.TrustRemoteCodeOption = False,
    allow_pickle: options.AllowPickleOption = False,
    verbose: options.VerboseOption = False,
    layers: options.LayersOption = None,
    heads: options.HeadsOption = None,
    d_model: options.DModelOption = None,
    seed: options.SeedOption = None,
    positions: options.PositionsOption = None,
    projections: options.ProjectionsOption = None,
    keep_case: options.KeepCaseOption = False,
    width: options.WidthOption = None,
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
    if model != BUILTIN:
        _explain_pretrained(
            text,
            model,
            mode,
            target,
            layer,
            head,
            query,
            download,
            trust_remote_code,
            allow_pickle,
            verbose,
            output_format,
        )
        return
    if query is not None:
        raise UsageError("--query goes with --model; the built-in walk-through shows every row")
    settings = options.extraction(
        model="builtin",
        mode=mode,
        layer=layer,
        head=head,
        special=special,
        words=False,
        download=download,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        verbose=verbose,
        layers=layers,
        heads=heads,
        d_model=d_model,
        seed=seed,
        positions=positions,
        projections=projections,
        keep_case=keep_case,
    )
    explanation = explain_builtin(
        options.single_text(read_texts(text)),
        mode=(mode or Mode.SELF).value,
        target=target,
        layer=layer,
        head=head,
        config=settings.config,
        lowercase=settings.lowercase,
    )
    if output_format is TableFormat.JSON:
        options.write_stdout(dump_json(explanation.to_dict()))
        return
    from attnviz.render.explain import render

    console = options.stdout_console(options.ColourChoice.AUTO, width)
    console.print(render(explanation, console.width))


def _explain_pretrained(
    text: str,
    model: str,
    mode: Mode | None,
    target: str | None,
    layer: str,
    head: str,
    query: int | None,
    download: bool,
    trust_remote_code: bool,
    allow_pickle: bool,
    verbose: bool,
    output_format: TableFormat,
) -> None:
    from attnviz.explain import explain_pretrained
    from attnviz.io import dump_json, read_texts
    from attnviz.pretrained import load

    extraction = options.extraction(
        model=model,
        mode=mode,
        layer=layer,
        head=head,
        special=True,
        words=False,
        download=download,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        verbose=verbose,
        layers=None,
        heads=None,
        d_model=None,
        seed=None,
        positions=None,
        projections=None,
        keep_case=False,
    )
    extraction.prepare()
    explanation = explain_pretrained(
        load(model, extraction.load_options),
        options.single_text(read_texts(text)),
        mode=None if mode is None else mode.value,
        target=target,
        layer=layer,
        head=head,
        query=query or 0,
    )
    if output_format is TableFormat.JSON:
        options.write_stdout(dump_json(explanation.to_dict()))
        return
    from attnviz.render.explain import render_query

    options.stdout_console(options.ColourChoice.AUTO, None).print(render_query(explanation))
