"""The pretrained-model and built-in-stack options every model command takes, as
:class:`~attnviz.cli.settings.ModelSettings` bundles them.

Only typer and the enums of :mod:`attnviz.choices` are imported here, as in
:mod:`attnviz.cli.declarations`: ``attnviz --help`` imports every command module.
"""

from __future__ import annotations

from typing import Annotated, Any

from attnviz.choices import Attention, Projections
from attnviz.cli.completion import complete_device, complete_device_map
from attnviz.cli.declarations import in_model, in_stack


def stack_size(name: str, metavar: str, most: int, default: int, help: str) -> Any:
    """A built-in stack's size, 1 to ``most``: not given, the stack's ``default``."""
    shown = str(default)
    return in_stack(name, metavar=metavar, min=1, max=most, show_default=shown, help=help)


DownloadOption = Annotated[
    bool,
    in_model(
        "--download",
        help="Fetch a model missing from the local cache (needs network; HF_HUB_OFFLINE=1 wins).",
    ),
]
TrustRemoteCodeOption = Annotated[
    bool,
    in_model(
        "--trust-remote-code",
        help="Run Python code that comes with the model. Off unless you trust its author.",
    ),
]
AllowPickleOption = Annotated[
    bool,
    in_model(
        "--allow-pickle",
        help="Accept pickle (.bin) weights, which can run code when loaded; safetensors only "
        "by default.",
    ),
]
DeviceOption = Annotated[
    str,
    in_model(
        "--device",
        metavar="DEVICE",
        autocompletion=complete_device,
        help="Where the model runs: auto (the first GPU if there is one, else the CPU), cpu, "
        "cuda, cuda:N or mps. Only the selected maps come back to the CPU.",
    ),
]
AttentionOption = Annotated[
    Attention,
    in_model(
        "--attention",
        case_sensitive=False,
        help="How the model computes attention: fused (its own fast kernel; attnviz computes "
        "the weights asked for from the queries and keys, block by block, at any length), "
        "eager (every head's whole maps, as output_attentions), or auto: fused where attnviz "
        "can follow the model's attention, else eager, said on stderr.",
    ),
]
MemoryOption = Annotated[
    str | None,
    in_model(
        "--memory",
        metavar="SIZE",
        help="How much memory a block of one head's weights may take with fused attention: "
        "256M, 1G, or bytes. Larger blocks are faster; the numbers are the same.",
    ),
]
ModelDtypeOption = Annotated[
    str,
    in_model(
        "--model-dtype",
        metavar="DTYPE",
        help="The precision of the weights: auto (the checkpoint's own on a GPU, float32 on "
        "the CPU), float32, bfloat16 or float16. It does not change the precision of what "
        "is written.",
    ),
]
DeviceMapOption = Annotated[
    str | None,
    in_model(
        "--device-map",
        metavar="MAP",
        autocompletion=complete_device_map,
        help="Spread a model too big for one device over several GPUs and the CPU (auto, "
        "balanced, sequential; accelerate's placement). Needs attnviz[big].",
    ),
]
VerboseOption = Annotated[
    bool,
    in_model("--verbose", help="Show transformers' own warnings and progress bars."),
]
NumLayersOption = Annotated[int | None, stack_size("--num-layers", "N", 64, 2, "Number of layers.")]
NumHeadsOption = Annotated[
    int | None, stack_size("--num-heads", "N", 64, 4, "Attention heads per layer.")
]
DModelOption = Annotated[
    int | None,
    stack_size(
        "--d-model",
        "WIDTH",
        4096,
        64,
        "Width of the token vectors; a multiple of --num-heads with learned projections.",
    ),
]
PositionsOption = Annotated[
    bool | None,
    in_stack(
        "--positions/--no-positions",
        show_default="positions",
        help="Add sinusoidal positions. Without them attention ignores word order: "
        "shuffling the words shuffles the maps the same way.",
    ),
]
ProjectionsOption = Annotated[
    Projections | None,
    in_stack(
        "--projections",
        metavar="KIND",
        case_sensitive=False,
        show_default="learned",
        help="learned: W_Q, W_K, W_V per head. identity: Q = K = V = X, the plain attention in "
        "which a word attends most to itself and its repeats.",
    ),
]
KeepCaseOption = Annotated[bool, in_stack("--keep-case", help="Do not case-fold the tokens.")]
