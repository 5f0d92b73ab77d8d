"""`attnviz circuit`: every edge between a model's heads and MLPs scored on an answer, from
one text and its corrupted twin or a dataset of pairs, and the faithfulness of the circuit
of the top edges."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.atomic_files import check_writable
from attnviz.choices import FOREIGN_OUTPUTS, INTERVENTIONS, Output
from attnviz.circuits.pairs import own_spans_asked
from attnviz.circuits.spans import pair_spans
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import Effects
from attnviz.cli.bundles import bundle
from attnviz.cli.circuit_choices import CircuitChoices, circuit_choices
from attnviz.cli.engine import JobsOption, engine_settings
from attnviz.cli.environment import Environment, passes_shown
from attnviz.cli.option_kinds import picture_option
from attnviz.cli.pictures import figure_settings
from attnviz.cli.settings import Reading, request, trace_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError
from attnviz.inputs import Input, read_texts
from attnviz.outputs import formats_named
from attnviz.request import asked_for

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit
    from attnviz.circuits.options import CircuitOptions
    from attnviz.render.style import Style

CircuitFormat = d.some_of("CircuitFormat", *d.TABLES, *FOREIGN_OUTPUTS)
FormatOption = d.format_option(
    CircuitFormat,
    ", or ".join(
        [formats_named(d.TABLES)]
        + [f"{output.value}: {foreign.help}" for output, foreign in FOREIGN_OUTPUTS.items()]
    )
    + ".",
)
# A circuit's edges carry a corrupted run's values, measured on an answer; its own
# --method says how edges are scored.
circuit_options = bundle(
    "effects", Effects, leave_out=("ablate", "knockout", "window", "normalize", "method")
)
NO_CHOICES = CircuitChoices()  # in place of the choices' options (circuit_choices)
TextOption = Annotated[
    str | None,
    typer.Argument(metavar="TEXT", show_default=False, help=f"{d.TEXT_HELP} (or give --pairs)."),
]
PairsOption = Annotated[
    str | None,
    typer.Option(
        "--pairs",
        metavar="FILE.jsonl",
        help='A dataset: one {"text", "answer", "versus", "corrupt"} per line ("versus" in '
        "every line or in none; each text and its corrupted twin of as many tokens; no "
        '"corrupt" needed with --ablation zero or mean): every score is the mean over the '
        'pairs. A pair\'s "spans", {"name": [start, end)} in tokens or {"name": "text"}, '
        "names where its roles lie, so that pairs of different lengths split their scores "
        "alike (every pair the same names; all of them unless --spans names some).",
    ),
]
RowsOption = Annotated[int, typer.Option("--rows", min=1, help="How many edges the table shows.")]
PictureOption = picture_option(
    "Draw the circuit as a graph, with its faithfulness curve, for a paper (.png, .svg or .pdf).",
    "-o",
)


@sharing(circuit_options, trace_settings, figure_settings, engine_settings)
@circuit_choices
def circuit(
    text: TextOption = None,
    model: d.ModelOption = d.BUILTIN,
    pairs: PairsOption = None,
    choices: CircuitChoices = NO_CHOICES,
    output_format: FormatOption = Output.TABLE,
    output: PictureOption = None,
    rows: RowsOption = 20,
    width: d.WidthOption = None,
    jobs: JobsOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Circuits: which paths between heads carry the answer. Every edge from what writes to
    the residual stream (the input, each head, each MLP) to what reads it above (each
    head's query, key and value, each MLP, the logits) gets a score: the change in the
    metric when that edge alone carries the corrupted run's value into the clean run.
    The circuit of the top --edges is measured exactly for its faithfulness.

    The metric is the answer's log-probability, or with --versus logit(answer) -
    logit(versus). TEXT and --corrupt have as many tokens; --pairs FILE.jsonl gives many.
    """
    shared.run_on.check(jobs)
    drawn = out.picture_or_data(output, output_format, shared.picture.given())
    style = shared.picture.style()
    options = choices.options()
    inputs, names = _inputs(text, pairs, options, shared.effects)
    options = own_spans_asked(options, inputs)  # refused before the model loads, as --spans
    first = inputs[0] if inputs else None
    effects = (
        shared.effects
        if first is None
        else replace(
            shared.effects, answer=first.answer, versus=first.versus, corrupt=first.corrupt
        )
    )
    asked = request(
        Reading(model),
        settings=shared.settings,
        effects=effects,
        text=text if first is None else first.text,
        circuit=options,
    )
    if model == d.BUILTIN:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.asked import no_next_token

        raise no_next_token(d.BUILTIN, "a circuit")
    if output is not None:
        check_writable(output)  # before the model loads
    if inputs is None:
        assert text is not None  # refused above without --pairs
        line = out.only_one(read_texts(text), "give many pairs with --pairs FILE.jsonl")
        inputs = [asked.input(line)]
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.engines import Work

    engine = shared.run_on.open(jobs or 2, shared.environment)
    with engine.session(), passes_shown(shared.environment) as listener:
        (result,) = engine.run(Work(asked.spec, inputs, asked.request, names, listener))
    found = asked_for(result.circuit)
    _write(found, drawn, output, output_format, style, width, rows, shared.environment)


def _write(
    found: Circuit,
    drawn: Output | None,
    output: str | None,
    output_format: Output,
    style: Style,
    width: int | None,
    rows: int,
    environment: Environment,
) -> None:
    """The circuit as the options ask: a picture, data on stdout, or the table."""

    def picture() -> bytes:
        from attnviz.render.circuit import circuit_picture  # matplotlib: only for a picture

        assert drawn is not None
        return circuit_picture(found, drawn, style)

    def table(columns: int) -> object:
        from attnviz.render.circuit import circuit_table  # numpy and rich's drawing

        return circuit_table(found, columns, rows)

    if output_format in FOREIGN_OUTPUTS:
        from attnviz.circuits.foreign import WRITERS  # numpy: the writers read the scores

        out.write_stdout(WRITERS[output_format](found))
        return
    out.write_drawn(found, drawn, output, output_format, picture, table, width, environment)


def _inputs(
    text: str | None, pairs: str | None, options: CircuitOptions, effects: Effects
) -> tuple[list[Input] | None, list[str] | None]:
    """The pairs of --pairs, or of the --scores file where neither TEXT nor --pairs is
    given (each with what names it in an error); None for TEXT, read later."""
    if text is not None:
        if pairs is not None:
            raise UsageError(
                "give TEXT (with --answer and --corrupt) or --pairs FILE.jsonl, not both"
            )
        return None, None
    if pairs is None and options.scores is None:
        raise UsageError("give TEXT (with --answer and --corrupt) or --pairs FILE.jsonl")
    named = (
        ("--answer", effects.answer),
        ("--versus", effects.versus),
        ("--corrupt", effects.corrupt),
    )
    given = [flag for flag, value in named if value is not None]
    source = "line of --pairs" if pairs is not None else "pair of --scores' file"
    if given:
        raise UsageError(
            f"each {source} holds its answer, versus and corrupted text: no {given[0]}"
        )
    if pairs is None:
        from attnviz.circuits.pairs import pairs_of_scores  # numpy: the file is read

        return pairs_of_scores(options), None
    return _pairs(pairs, INTERVENTIONS[options.ablation].corrupt)


def _pairs(path: str, twins: bool) -> tuple[list[Input], list[str]]:
    """The pairs of a JSONL file, each checked, and the line each came from (each with
    its corrupted twin where ``twins``: the intervention reads them)."""
    # the batch package (its runner's imports with it): only where --pairs is given
    from attnviz.batch.inputs import iter_inputs

    inputs, names = [], []
    for item in iter_inputs(path):
        if item.blank:
            continue
        where = f"{path}, line {item.line}"
        if item.error is not None:
            raise UsageError(f"{path}: {item.error}")
        needed = ("answer", "corrupt") if twins else ("answer",)
        missing = next((name for name in needed if getattr(item, name) is None), None)
        if missing is not None:
            held = "text, answer and corrupt" if twins else "text and answer"
            raise UsageError(f'{where} has no "{missing}": each pair holds {held}')
        assert item.text is not None
        try:
            spans = None if item.spans is None else pair_spans(item.spans)
            inputs.append(
                Input(
                    item.text,
                    answer=item.answer,
                    versus=item.versus,
                    corrupt=item.corrupt,
                    spans=spans,
                )
            )
        except UsageError as error:
            raise UsageError(f"{where}: {error}") from None
        names.append(where)
    if not inputs:
        raise UsageError(f"{path} holds no pairs: one JSON object per line")
    return inputs, names
