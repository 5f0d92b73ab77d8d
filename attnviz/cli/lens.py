"""`attnviz lens`: the logit lens, each layer's residual stream read through the final norm
and the unembedding at every position: the next token each layer would predict."""

from __future__ import annotations

from attnviz.atomic_files import check_writable
from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import Effects
from attnviz.cli.bundles import bundle
from attnviz.cli.option_kinds import picture_option
from attnviz.cli.pictures import figure_settings
from attnviz.cli.settings import DEFAULT_READING, Reading, layer_reading, trace_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.outputs import formats_named
from attnviz.request import asked_for

FormatOption = d.format_option(d.TableFormat, f"{formats_named(d.TABLES)}.")
# The lens reads an answer's log-probability alone, at every layer and position.
lens_options = bundle(
    "effects",
    Effects,
    leave_out=(
        "ablate",
        "versus",
        "metric",
        "corrupt",
        "normalize",
        "method",
        "knockout",
        "window",
    ),
)
PictureOption = picture_option(
    "Draw the lens as a picture for a paper (.png, .svg or .pdf): layers × "
    "positions in the top token's probability, each cell labelled with its token.",
    "-o",
)


@sharing(lens_options, trace_settings, figure_settings)
@layer_reading
def lens(
    text: d.TextArgument,
    reading: Reading = DEFAULT_READING,
    output_format: FormatOption = Output.TABLE,
    output: PictureOption = None,
    width: d.WidthOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """The logit lens: at every layer and position, the token the residual stream leaving
    that layer predicts next, read through the model's final norm (at that residual's
    own scale) and its unembedding, with its probability; with --answer, the answer's
    first token's log-probability there too. The last layer's is the model's own
    prediction.
    """
    drawn = out.picture_or_data(output, output_format, shared.picture.given())
    style = shared.picture.style()
    asked = shared.request(reading, text=text, lens=True)
    if reading.model == d.BUILTIN:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.asked import no_next_token

        raise no_next_token(d.BUILTIN, "the lens")
    if output is not None:
        check_writable(output)  # before the model loads
    extractor = asked.open(shared.environment)
    line = out.only_one(out.inputs(text, extractor), "lens reads one text")
    found = asked_for(asked.run(extractor, line, shared.environment).lens)

    def picture() -> bytes:
        from attnviz.render.lens import lens_picture  # matplotlib: only for a picture

        assert drawn is not None
        return lens_picture(found, drawn, style)

    def table(columns: int) -> object:
        from attnviz.render.lens import lens_table  # numpy and rich's drawing

        return lens_table(found, columns)

    out.write_drawn(found, drawn, output, output_format, picture, table, width, shared.environment)
