"""The norms through which a circuit's edges enter each layer: found while a pass runs,
as the child of the layer whose output the attention (the MLP) is given. An edge into a
head or an MLP changes what that norm reads; a post-norm layer (BERT's, BART's), whose
norms read no residual stream before its sublayers, is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from attnviz.choices import Site
from attnviz.errors import UsageError
from attnviz.pretrained.sites import SITES, hidden_of, hooked

if TYPE_CHECKING:
    from attnviz.pretrained.anatomy import Anatomy


@contextlib.contextmanager
def norms_found(body: Anatomy) -> Iterator[tuple[list[Any], list[Any]]]:
    """While open, a pass finds each layer's attention norm and MLP norm: the child of the
    layer whose output the attention (the MLP) is given. The attention norm must read the
    layer's input, which a head's copy of the residual then stands in for. Only the layer
    being run has its children's tensors held (a pass over a long text would otherwise
    keep every child's input and output of every layer)."""
    count = len(body.blocks)
    attention_norms: list[Any] = [None] * count
    mlp_norms: list[Any] = [None] * count
    reads_input = [False] * count  # whether the attention norm reads the layer's input
    entering: list[Any] = [None]  # the input of the layer being run
    made: dict[int, tuple[Any, Any, Any]] = {}  # id(output) -> (module, its input, output)

    def enter(_module: Any, args: tuple, kwargs: dict) -> None:
        made.clear()
        entering[0] = hidden_of(args, kwargs)

    def keep_made(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if args or "hidden_states" in kwargs:
            made[id(output)] = (module, hidden_of(args, kwargs), output)

    def finder(into: list[Any], layer: int, attention: bool) -> Callable:
        def find(_module: Any, args: tuple, kwargs: dict) -> None:
            found = made.get(id(hidden_of(args, kwargs)))
            into[layer] = None if found is None else found[0]
            if attention:
                reads_input[layer] = found is not None and found[1] is entering[0]

        return find

    def leave(_module: Any, _args: tuple, _output: Any) -> None:
        made.clear()
        entering[0] = None

    with contextlib.ExitStack() as hooks:
        for layer, block in enumerate(body.blocks):
            hooks.enter_context(hooked(block.register_forward_pre_hook(enter, with_kwargs=True)))
            hooks.enter_context(hooked(block.register_forward_hook(leave)))
            for child in block.children():
                hook = child.register_forward_hook(keep_made, with_kwargs=True)
                hooks.enter_context(hooked(hook))
            for into, module, attention in (
                (attention_norms, body.attentions[layer], True),
                (mlp_norms, SITES[Site.MLP].module(body, layer), False),
            ):
                hook = module.register_forward_pre_hook(
                    finder(into, layer, attention), with_kwargs=True
                )
                hooks.enter_context(hooked(hook))
        yield attention_norms, mlp_norms
    for layer in range(count):
        if not reads_input[layer] or mlp_norms[layer] is None:
            raise UsageError(
                f"attnviz cannot find the norms layer {layer}'s attention and MLP read the "
                "residual stream through: circuits read pre-norm decoders (GPT-2, Llama, Gemma, …)"
            )
