"""`attnviz pairs`: a dataset of pairs (a text, its answer, a versus answer and a
corrupted twin, a JSON object a line) checked against a model before ``circuit`` is run on
it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnviz.atomic_files import check_writable, write_text
from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.environment import stdout_console
from attnviz.cli.generate import LanguageModelOption
from attnviz.cli.settings import Reading, model_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import AttnvizError, UsageError, warn
from attnviz.inputs import read_whole
from attnviz.outputs import formats_named
from attnviz.safe_text import display_label

if TYPE_CHECKING:
    from attnviz.circuits.pair_checks import PairsChecked

pairs = typer.Typer(
    name="pairs",
    help="Make, check and split a dataset of pairs for circuits.",
    invoke_without_command=True,  # bare `attnviz pairs` prints the help (see group)
    rich_markup_mode=None,
)


@pairs.callback()
def group(ctx: typer.Context) -> None:
    """Make, check and split a dataset of pairs for circuits."""
    if ctx.invoked_subcommand is None:  # bare `attnviz pairs`: the help, and success
        typer.echo(ctx.get_help())
        raise typer.Exit()


PairsArgument = Annotated[
    str,
    typer.Argument(
        metavar="FILE",
        help="The pairs: a JSON object a line, each with text, answer and corrupt (and "
        "versus); - for stdin.",
    ),
]
FormatOption = d.format_option(d.TableFormat, f"{formats_named(d.TABLES)}.")


class PairsRefused(AttnvizError):
    """Some pairs would be refused by ``circuit``: each is listed, the command exits 1."""


@pairs.command("make")
@sharing(model_settings)
def make(
    template: Annotated[
        str,
        typer.Argument(
            metavar="TEMPLATE",
            help="A JSON file: text, answer, corrupt (and versus) with {SLOT}s, and the "
            "rows they are filled from.",
        ),
    ],
    model: LanguageModelOption,
    count: Annotated[int, typer.Option("--count", "-n", help="Pairs to make at most.")] = 60,
    draw_seed: Annotated[
        int, typer.Option("--draw-seed", help="The seed of the order rows are drawn in.")
    ] = 0,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="Write the pairs here (default: stdout)."
        ),
    ] = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Fill a template's slots with distinct rows, drawn in an order shuffled by --draw-seed,
    into pairs that circuit reads as made: each text and its twin of as many tokens under
    the model's tokenizer, its answer (and versus answer) one token after the text; the
    others left out and counted on stderr. JSONL on stdout, or into --output.
    """
    try:
        document = json.loads(read_whole(template))
    except json.JSONDecodeError as error:
        raise UsageError(f"{template} is not JSON: {error.msg} (line {error.lineno})") from None
    # numpy and the pretrained passes: after the template is read (a bad one loads none)
    from attnviz.circuits.pair_templates import checked_template, made_pairs
    from attnviz.data_formats import strict_json

    checked_template(document)  # before the model loads
    if output is not None:
        check_writable(output)  # before the model loads
    extractor = shared.request(Reading(model)).open(shared.environment)
    made = made_pairs(extractor, document, count, draw_seed)
    write_text("".join(f"{strict_json(pair)}\n" for pair in made.pairs), output or d.STDIO)
    print(
        f"attnviz: {len(made.pairs)} pairs made; left out: {made.other_lengths} whose text "
        f"and twin differ in tokens (or circuit refuses), {made.long_answers} with an answer "
        f"of more than one token, {made.repeats} repeats",
        file=sys.stderr,
    )


@pairs.command("check")
@sharing(model_settings)
def check(
    source: PairsArgument,
    model: LanguageModelOption,
    output_format: FormatOption = Output.TABLE,
    width: d.WidthOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Each pair as circuit reads it: the tokens of its text, its corrupted twin and its
    answers, the answer's rank after the text (1: the model's likeliest next token), the
    metric after the text and after its twin, and the earlier line it repeats. Exits 1,
    each refused line named on stderr, where circuit would refuse a pair.
    """
    lines, given = _read_pairs(source)
    extractor = shared.request(Reading(model)).open(shared.environment)
    # numpy and the pretrained passes: after the file is read (a bad one loads no model)
    from attnviz.circuits.pair_checks import checked_pairs

    names = [f"{source}, line {line}" for line in lines]
    found = checked_pairs(extractor, given, lines, names)
    if output_format is Output.TABLE:
        from attnviz.render.pair_checks import pairs_table  # rich's drawing

        console = stdout_console(d.ColourChoice.AUTO, width, shared.environment)
        console.print(pairs_table(found))
    else:
        out.write_data(found, output_format)
    _say_refused(found)


@pairs.command("split")
def split(
    source: PairsArgument,
    held_out: Annotated[
        float,
        typer.Option(
            "--held-out", metavar="SHARE", help="The share of the distinct pairs held out."
        ),
    ] = 0.5,
    seed: Annotated[int, typer.Option("--seed", help="The shuffle's seed.")] = 0,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="STEM",
            help="Write STEM.train.jsonl and STEM.held-out.jsonl (default: FILE's own stem, "
            "beside it, where no such file is there already).",
        ),
    ] = None,
) -> None:
    """Split pairs into those a circuit is found on and those held out to measure it (as
    MIB keeps a test split): distinct pairs only, so that no pair is on both sides, shuffled
    by --seed, each side in the file's order.
    """
    if output is None and source == d.STDIO:
        raise UsageError("pairs from stdin are split into files named by --output STEM")
    stem = output if output is not None else str(Path(source).with_suffix(""))
    paths = (f"{stem}.train.jsonl", f"{stem}.held-out.jsonl")
    for path in paths:
        if output is None and Path(path).exists():  # a name the user did not give
            raise UsageError(f"{path} exists already: give --output STEM to write elsewhere")
        check_writable(path)
    _, given = _read_pairs(source)
    # numpy: the draw and the JSON writer, after the file is read
    from attnviz.circuits.pair_checks import split_pairs
    from attnviz.data_formats import strict_json

    fitted, held, repeats = split_pairs(given, held_out, seed)
    for path, side in zip(paths, (fitted, held), strict=True):
        lines = [strict_json({k: v for k, v in pair.items() if v is not None}) for pair in side]
        write_text("".join(f"{line}\n" for line in lines), path)
    left_out = f" ({repeats} repeated pair{'s' * (repeats != 1)} left out)" if repeats else ""
    print(
        f"attnviz: {len(fitted) + len(held)} distinct pairs{left_out}: {len(fitted)} to "
        f"{display_label(paths[0])}, {len(held)} held out to {display_label(paths[1])}",
        file=sys.stderr,
    )


def _say_refused(found: PairsChecked) -> None:
    """Each refused pair's line on stderr, then the count: exit 1."""
    refused = found.refused
    if not refused:
        return
    for each in refused:
        assert each.refused is not None
        warn(each.refused)
    raise PairsRefused(f"{len(refused)} of {len(found.pairs)} pairs would be refused by circuit")


def _read_pairs(source: str) -> tuple[list[int], list[dict[str, Any]]]:
    """The pairs of a JSONL file as mappings, with the line each is on; a file that is no
    JSONL, or a line that is no JSON object, refused in one line."""
    # the batch package's reader of JSONL lines
    from attnviz.batch.inputs import iter_inputs

    lines: list[int] = []
    given: list[dict[str, Any]] = []
    for item in iter_inputs(source):
        if item.blank:
            continue
        if item.error is not None:
            raise UsageError(f"{source}: {item.error}")
        fields = {"answer": item.answer, "versus": item.versus, "corrupt": item.corrupt}
        if not lines and _plain_text(source, fields):
            raise UsageError(
                f"{source} is not JSONL pairs: one JSON object per line, with text, answer "
                "and corrupt"
            )
        lines.append(item.line)
        given.append({"text": item.text, **fields})
    if not given:
        raise UsageError(f"{source} holds no pairs: one JSON object per line")
    return lines, given


def _plain_text(source: str, fields: dict[str, str | None]) -> bool:
    """Whether the file's first line was read as a plain text (no .jsonl suffix, and no
    field of a pair's beside its text), not as a JSON object."""
    suffix = Path(source).suffix.lower()
    return suffix not in (".jsonl", ".ndjson") and all(part is None for part in fields.values())
