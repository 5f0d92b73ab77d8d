"""The run a circuit's edges take their values from where no corrupted text gives them
(``--ablation zero``): the clean text's run with every upstream node's output replaced by
zero, as EAP-IG's code's zero ablation replaces it — the input's embeddings (the first
layer's input), each head's slice of its output projection's input (so that its output
is 0, and in a layer with a post-attention norm every head's share of it), each MLP's
output. Every position is ablated: no twin shares a first stretch with it.

The forced rows of a pass are its corrupted ones: :func:`forced` puts the replacement
there before any hook that reads an upstream node's output records it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.pretrained.effects import hooked
from attnviz.pretrained.sites import hidden_of, mlp_written, output_of, with_hidden, with_output

if TYPE_CHECKING:
    from attnviz.pretrained.effects import Anatomy


@dataclass(frozen=True)
class Ablated:
    """Every upstream node's output replaced by zero."""


def changed_from(arguments: dict, corrupt_arguments: dict, ablated: Ablated | None) -> int:
    """The first position a pair's runs differ at: its twins' first differing token (the
    last where none does: what the last position's outputs are read from); 0 where the
    nodes are ablated, at every position."""
    if ablated is not None:
        return 0
    ids, corrupt_ids = arguments["input_ids"][0], corrupt_arguments["input_ids"][0]
    differing = (ids != corrupt_ids).nonzero()
    return int(differing[0, 0]) if len(differing) else len(ids) - 1


@contextlib.contextmanager
def forced(body: Anatomy, ablated: Ablated | None, rows: Any) -> Iterator[None]:
    """While open, a pass's ``rows`` (a slice) have every upstream node's output replaced
    as ``ablated`` says (nothing is replaced where it is None). Entered before the hooks
    that record the nodes' outputs: a hook runs in the order it was registered."""
    if ablated is None:
        yield
        return

    def input_zeroed(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = hidden_of(args, kwargs).clone()  # (B, T, D)
        hidden[rows] = 0
        return with_hidden(args, kwargs, hidden)

    def heads_zeroed(_module: Any, args: tuple) -> tuple:
        heads = args[0].clone()  # (B, T, E): every head's slice of the projection's input
        heads[rows] = 0
        return (heads, *args[1:])

    def output_zeroed(_module: Any, _args: tuple, output: Any) -> Any:
        written = output_of(output).clone()  # (B, T, D)
        written[rows] = 0
        return with_output(output, written)

    first = body.blocks[0].register_forward_pre_hook(input_zeroed, with_kwargs=True)
    with contextlib.ExitStack() as hooks:
        hooks.enter_context(hooked(first))
        for layer in range(len(body.blocks)):
            heads = body.projections[layer].register_forward_pre_hook(heads_zeroed)
            hooks.enter_context(hooked(heads))
            mlp = mlp_written(body, layer).register_forward_hook(output_zeroed)
            hooks.enter_context(hooked(mlp))
        yield
