"""`attnviz top`: for each query token, the key tokens it attends to most."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.settings import model_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.cli.sources import NOTHING_READ, TextOrSaved, text_or_saved
from attnviz.safe_text import spaces_shown
from attnviz.schema import envelope

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps

FormatOption = d.format_option(
    d.ReportFormat,
    "table (lines) or json.",
)


@sharing(model_settings)
@text_or_saved
def top(
    source: TextOrSaved = NOTHING_READ,
    aggregate: d.AggregateOption = None,
    k: Annotated[
        int, typer.Option("-k", metavar="N", min=1, help="Key tokens per query token.")
    ] = 3,
    output_format: FormatOption = Output.TABLE,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """For each query token, its k most attended key tokens: one line per token.

    `is → attention 0.60, is 0.40`. A block per selected map, headed by its
    title; pick one head with --layer and --head, or combine with --aggregate.
    Keys a query gives no weight (masked: later tokens) are not listed.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.analysis.top import top_keys
    from attnviz.data_formats import dump_json

    asked = source.request(shared)

    def extract(line: str) -> AttentionMaps:
        return asked.maps(asked.open(shared.environment), line)

    maps = source.read(shared, extract)
    if aggregate is not None:
        maps = combine(maps, aggregate)
    blocks = top_keys(maps, k)
    if output_format is Output.JSON:
        out.write_stdout(dump_json(envelope({"maps": blocks})))
        return
    lines = []
    for block in blocks:
        lines.append(f"# {block['title']}")
        for row in block["queries"]:
            picks = ", ".join(
                f"{spaces_shown(pick['token'])} {pick['weight']:.2f}" for pick in row["top"]
            )
            lines.append(f"{spaces_shown(row['token'])} → {picks}")
    out.write_stdout("\n".join(lines) + "\n")
