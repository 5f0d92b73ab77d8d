"""The pretrained-model and built-in-stack options every model command takes, as
:class:`~attnviz.cli.settings.ModelSettings` bundles them.

Only typer and the enums of :mod:`attnviz.choices` are imported here, as in
:mod:`attnviz.cli.declarations`: ``attnviz --help`` imports every command module.
"""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.choices import Attention, Projections
from attnviz.cli.completion import complete_device, complete_device_map
from attnviz.cli.declarations import MODEL_PANEL, STACK_PANEL

DownloadOption = Annotated[
    bool,
    typer.Option(
        "--download",
        rich_help_panel=MODEL_PANEL,
        help="Fetch a model missing from the local cache (needs network; HF_HUB_OFFLINE=1 wins).",
    ),
]
TrustRemoteCodeOption = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        rich_help_panel=MODEL_PANEL,
        help="Run Python code that comes with the model. Off unless you trust its author.",
    ),
]
AllowPickleOption = Annotated[
    bool,
    typer.Option(
        "--allow-pickle",
        rich_help_panel=MODEL_PANEL,
        help="Accept pickle (.bin) weights, which can run code when loaded; safetensors only "
        "by default.",
    ),
]
DeviceOption = Annotated[
    str,
    typer.Option(
        "--device",
        metavar="DEVICE",
        autocompletion=complete_device,
        rich_help_panel=MODEL_PANEL,
        help="Where the model runs: auto (the first GPU if there is one, else the CPU), cpu, "
        "cuda, cuda:N or mps. Only the selected maps come back to the CPU.",
    ),
]
AttentionOption = Annotated[
    Attention,
    typer.Option(
        "--attention",
        case_sensitive=False,
        rich_help_panel=MODEL_PANEL,
        help="How the model computes attention: fused (its own fast kernel; attnviz computes "
        "the weights asked for from the queries and keys, block by block, at any length), "
        "eager (every head's whole maps, as output_attentions), or auto: fused where attnviz "
        "can follow the model's attention, else eager, said on stderr.",
    ),
]
MemoryOption = Annotated[
    str | None,
    typer.Option(
        "--memory",
        metavar="SIZE",
        rich_help_panel=MODEL_PANEL,
        help="How much memory a block of one head's weights may take with fused attention: "
        "256M, 1G, or bytes. Larger blocks are faster; the numbers are the same.",
    ),
]
ModelDtypeOption = Annotated[
    str,
    typer.Option(
        "--model-dtype",
        metavar="DTYPE",
        rich_help_panel=MODEL_PANEL,
        help="The precision of the weights: auto (the checkpoint's own on a GPU, float32 on "
        "the CPU), float32, bfloat16 or float16. It does not change the precision of what "
        "is written.",
    ),
]
DeviceMapOption = Annotated[
    str | None,
    typer.Option(
        "--device-map",
        metavar="MAP",
        autocompletion=complete_device_map,
        rich_help_panel=MODEL_PANEL,
        help="Spread a model too big for one device over several GPUs and the CPU (auto, "
        "balanced, sequential; accelerate's placement). Needs attnviz[big].",
    ),
]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose",
        rich_help_panel=MODEL_PANEL,
        help="Show transformers' own warnings and progress bars.",
    ),
]
NumLayersOption = Annotated[
    int | None,
    typer.Option(
        "--num-layers",
        metavar="N",
        min=1,
        max=64,
        show_default="2",
        rich_help_panel=STACK_PANEL,
        help="Number of layers.",
    ),
]
NumHeadsOption = Annotated[
    int | None,
    typer.Option(
        "--num-heads",
        metavar="N",
        min=1,
        max=64,
        show_default="4",
        rich_help_panel=STACK_PANEL,
        help="Attention heads per layer.",
    ),
]
DModelOption = Annotated[
    int | None,
    typer.Option(
        "--d-model",
        metavar="WIDTH",
        min=1,
        max=4096,
        show_default="64",
        rich_help_panel=STACK_PANEL,
        help="Width of the token vectors; a multiple of --num-heads with learned projections.",
    ),
]
PositionsOption = Annotated[
    bool | None,
    typer.Option(
        "--positions/--no-positions",
        show_default="positions",
        rich_help_panel=STACK_PANEL,
        help="Add sinusoidal positions. Without them attention ignores word order: "
        "shuffling the words shuffles the maps the same way.",
    ),
]
ProjectionsOption = Annotated[
    Projections | None,
    typer.Option(
        "--projections",
        metavar="KIND",
        case_sensitive=False,
        show_default="learned",
        rich_help_panel=STACK_PANEL,
        help="learned: W_Q, W_K, W_V per head. identity: Q = K = V = X, the plain attention in "
        "which a word attends most to itself and its repeats.",
    ),
]
KeepCaseOption = Annotated[
    bool,
    typer.Option("--keep-case", rich_help_panel=STACK_PANEL, help="Do not case-fold the tokens."),
]
