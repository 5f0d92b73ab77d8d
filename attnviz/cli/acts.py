"""`attnviz acts`: a model's activations at the sites named, from one run of one text,
as data for shells and notebooks (:mod:`attnviz.activations` names them)."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.activations import site_names
from attnviz.atomic_files import STDIO, check_writable, write_text
from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import Effects
from attnviz.cli.bundles import bundle
from attnviz.cli.declarations import ColourChoice
from attnviz.cli.environment import stdout_console
from attnviz.cli.option_kinds import output_option
from attnviz.cli.settings import (
    DEFAULT_READING,
    MapProducts,
    Reading,
    trace_settings,
)
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError
from attnviz.outputs import formats_named
from attnviz.request import asked_for

ActsFormat = d.some_of("ActsFormat", Output.TABLE, Output.JSON, Output.NPZ)
FormatOption = d.format_option(
    ActsFormat,
    f"{formats_named((Output.TABLE, Output.JSON, Output.NPZ))}: a row per name with its "
    "shape and spread, or the numbers.",
)
SiteOption = Annotated[
    list[str],
    typer.Option(
        "--site",
        metavar="NAME",
        help=f"A site to read, again for more: {', '.join(site_names())} (L a layer, H a "
        "head: resid_post@12, a3.h1, m0; a bare site at every --layer).",
    ),
]
EditOption = Annotated[
    list[str],
    typer.Option(
        "--edit",
        metavar="NAME=EDIT",
        help="Run with the site replaced, again for more: zero, mean (over the positions) or "
        "patch (its value in the run on --corrupt), as z@3=zero or a2.h1=patch.",
    ),
]
OutputOption = output_option("Write the data to PATH instead of stdout.")
# acts measures an answer, and patches from --corrupt: no head is ablated or knocked out.
acts_options = bundle(
    "effects", Effects, leave_out=("ablate", "knockout", "window", "normalize", "method")
)
# acts keeps the positions asked (--rows): a long text's pass holds no more.
positions_kept = bundle("products", MapProducts, leave_out=("pool", "span", "weigh"))
# acts reads whole layers: --mode says which stack (an encoder-decoder's encoder, its
# decoder's self- or cross-attention), and no --head is chosen.
stack_reading = bundle("reading", Reading, leave_out=("head",))


@sharing(acts_options, positions_kept, trace_settings)
@stack_reading
def acts(
    text: d.TextArgument,
    reading: Reading = DEFAULT_READING,
    target: d.TargetOption = None,
    pair: d.PairOption = None,
    site: SiteOption = [],  # noqa: B006 (typer's list option: never changed)
    edit: EditOption = [],  # noqa: B006 (typer's list option: never changed)
    output_format: FormatOption = Output.TABLE,
    output: OutputOption = STDIO,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Read a model's activations by name in one run of TEXT (with --target, of an
    encoder-decoder's decoder reading it): the residual stream, attention and MLP
    outputs, queries, keys, values, each head's output and its attention weights, as
    --site names them; with --edit, in a run with those sites replaced; with --answer,
    the answer's metric in that run. The table sums each name up; -f json and -f npz (a
    file of arrays, tokens and positions) hold the numbers.
    """
    if not site and shared.effects.answer is None:
        raise UsageError(f"name a site to read with --site ({', '.join(site_names())})")
    edits = dict(_edit(each) for each in edit)
    asked = shared.request(
        reading,
        text=text,
        target=target,
        pair=pair,
        activations=tuple(site),
        edits=edits or None,
    )
    if reading.model == d.BUILTIN:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.asked import no_sites

        raise no_sites(d.BUILTIN)
    if output != STDIO and output_format is Output.TABLE:
        raise UsageError("the table is for a person at the terminal: -o takes -f json or npz")
    if output != STDIO:
        check_writable(output)  # before the model loads
    extractor = asked.open(shared.environment)
    line = out.only_one(out.inputs(text, extractor), "acts reads one text")
    found = asked_for(asked.run(extractor, line, shared.environment).activations)
    if output_format is Output.NPZ:
        found.save(output)
    elif output_format is Output.JSON:
        # numpy: the data formats read it
        from attnviz.data_formats import dump_json
        from attnviz.schema import envelope

        write_text(dump_json(envelope(found.document())), output)
    else:
        from attnviz.render.activations import activations_table  # numpy and rich

        console = stdout_console(ColourChoice.AUTO, None, shared.environment)
        console.print(activations_table(found))


def _edit(given: str) -> tuple[str, str]:
    """NAME=EDIT, split; anything else a usage error."""
    name, sign, edit = given.partition("=")
    if not sign or not name or not edit:
        raise UsageError(f"--edit {given!r}: give NAME=EDIT, as z@3=zero or a2.h1=patch")
    return name, edit
