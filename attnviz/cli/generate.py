"""`attnviz generate`: let a language model write, and see what it looked at."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated

import typer

from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.bundles import Bundle
from attnviz.cli.completion import complete_language_model
from attnviz.cli.option_kinds import max_new_tokens_option
from attnviz.cli.pictures import head_choice
from attnviz.cli.settings import Reading, generation_settings, map_products
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.cli.show import AS_GIVEN, Presentation, Presenting, presenting_options
from attnviz.generated import Sampling
from attnviz.inputs import read_texts
from attnviz.safe_text import display_label

GENERATION_PANEL = "Generation"
in_generation = d.panel(GENERATION_PANEL)


GenerationModeOption = Annotated[
    d.Mode | None,
    typer.Option(
        "--mode",
        "-m",
        metavar="MODE",
        case_sensitive=False,
        show_default="the model's own: masked for a decoder, cross for an encoder-decoder",
        help="A decoder's attention is masked (causal). An encoder-decoder's: cross (each "
        "written token over the prompt), masked (the decoder's over what it wrote) or self "
        "(the encoder's over the prompt).",
    ),
]


PromptArgument = Annotated[
    str,
    typer.Argument(
        metavar="PROMPT",
        help="What the model reads first; @FILE reads a whole file (@- all of stdin), - a "
        "line of stdin.",
    ),
]
LanguageModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        metavar="NAME",
        autocompletion=complete_language_model,
        help="A language model: a decoder (GPT-2, Llama, Qwen) or an encoder-decoder "
        "(BART, T5, Marian), as --model of show takes it.",
    ),
]
MaxNewTokensOption = max_new_tokens_option(
    100_000, "Tokens to write at most.", rich_help_panel=GENERATION_PANEL
)
SampleOption = Annotated[
    bool,
    in_generation(
        "--sample",
        help="Sample the next token (with --temperature and --top-p) instead of taking the "
        "likeliest; reproducible with --seed.",
    ),
]
TemperatureOption = Annotated[
    float,
    in_generation(
        "--temperature",
        parser=d.number(1e-6),
        metavar="T",
        help="With --sample: below 1 sharper, above 1 flatter (above 0).",
    ),
]
TopPOption = Annotated[
    float,
    in_generation(
        "--top-p",
        parser=d.number(1e-6, 1.0),
        metavar="P",
        help="With --sample: sample among the likeliest tokens whose probabilities sum to P "
        "(above 0, at most 1).",
    ),
]
SeedOption = Annotated[
    int,
    in_generation(
        "--seed",
        metavar="N",
        min=0,
        max=2**63 - 1,
        help="The seed of --sample: the same seed writes the same text.",
    ),
]
StopOption = Annotated[
    bool,
    in_generation(
        "--stop/--no-stop",
        help="Stop at the model's end-of-sequence token, or write all --max-new-tokens.",
    ),
]


# The sampling options are Sampling's fields (attnviz.request), where their defaults and
# checks are declared: the command gets a checked Sampling.
_SAMPLING_OPTIONS = {
    "max_new_tokens": MaxNewTokensOption,
    "sample": SampleOption,
    "temperature": TemperatureOption,
    "top_p": TopPOption,
    "seed": SeedOption,
    "stop": StopOption,
}
sampling_options = Bundle(
    "sampling",
    {field.name: (_SAMPLING_OPTIONS[field.name], field.default) for field in fields(Sampling)},
    Sampling,
)
GREEDY = Sampling()


@sharing(head_choice, map_products, generation_settings)
@presenting_options
@sampling_options
def generate(
    prompt: PromptArgument,
    model: LanguageModelOption,
    sampling: Sampling = GREEDY,
    mode: GenerationModeOption = None,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    presenting: Presenting = AS_GIVEN,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Let a language model write after PROMPT, and show what it attended to.

    The written text goes first (to stderr when stdout carries data); then the
    maps of the whole sequence, as show draws or writes them: rows are every
    token read and written, generated rows marked ▸, and the data records where
    the prompt ends (prompt_length). An encoder-decoder shows the
    cross-attention of each written token over the prompt: a translation's
    alignment. Greedy unless --sample. Ctrl-C prints what was written so far.
    """
    from dataclasses import asdict

    # numpy: after the options are checked (a usage error loads none)
    from attnviz.pretrained.generation import GenerationInterrupted

    presentation = presenting.checked(shared.choice, shared.environment)
    asked = shared.request(
        Reading(model, mode, layer, head),
        text=prompt,
        products=presentation.products(shared),
        aggregate=presenting.aggregate,
    )
    extractor = asked.open(shared.environment)
    text = out.only_one(read_texts(prompt))
    try:
        generation = extractor.generate(text, asked.request, **asdict(sampling))
    except GenerationInterrupted as interrupted:  # what was written is the user's: keep it
        _show_written(f"{interrupted.prompt}{interrupted.text}", presentation)
        raise
    _show_written(f"{generation.prompt}{generation.text}  [{generation.finished}]", presentation)
    presentation.present([generation.maps], shared.environment)


def _show_written(text: str, presentation: Presentation) -> None:
    """The prompt and what was written after it: on stdout above a picture, on stderr
    when stdout carries data (never mixed into it)."""
    import sys

    if presentation.is_terminal:
        out.write_stdout(display_label(text) + "\n\n")
    else:
        print(display_label(text), file=sys.stderr, flush=True)
