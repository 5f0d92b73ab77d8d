"""What a run's upstream nodes write, read as the run goes: each slot's outputs handed to
a store as computed (:func:`outputs_written`), the input embeddings kept, what a node carries back
in a circuit's pass (:func:`users_carried`), and freed pages handed back between layers on
long texts.

Shape letters: B rows of a pass, T tokens, S the positions recorded, n the nodes of one
slot, D the model's width, E the output projection's input, Dh a head's size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.circuits.differences import head_mixing
from attnviz.circuits.graph import Graph, heads_slot, mlp_slot
from attnviz.errors import UsageError
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.frozen_norms import norm_form
from attnviz.pretrained.sites import hidden_of, hooked, mlp_written, output_of

if TYPE_CHECKING:
    import torch


def stacked(first: dict, second: dict) -> dict:
    """Two texts' arguments as the rows of one pass (as many tokens each)."""
    import torch

    return {
        name: torch.cat([value, second[name]]) if isinstance(value, torch.Tensor) else value
        for name, value in first.items()
    }


# numbers in a node's (S, D) from which a head carried back in a circuit's pass is held
# as its (S, Dh) input: below it, widening it at each group that reads it costs more time
# (SmolLM2 at 14 tokens: a point 10% slower) than the memory saved is worth
_CARRIED_COMPACT_FROM = 2**20


def users_carried(
    body: Anatomy, graph: Graph, users: set[int], kept: dict[int, Carried], start: int
) -> contextlib.AbstractContextManager:
    """:func:`outputs_written` of the slots holding ``users``, keeping in ``kept`` what each user
    carries back in a circuit's pass (row 0 the corrupted run): its output in row 0 less
    its output in row 1, from ``start`` on, formed as it is computed; on a long text a
    head's as its slice of the output projection's input, (S, Dh), and its mixing (the
    output (S, D) when :meth:`Carried.widened`)."""

    def keep(slot: int, value: Any) -> None:
        where = graph.columns(slot)
        for upstream in users.intersection(range(where.start, where.stop)):
            unit = upstream - where.start
            kept[upstream] = Carried(value[0, :, unit] - value[1, :, unit])

    def keep_heads(layer: int, inputs: Any, mixing: Any) -> None:
        import torch

        where = graph.columns(heads_slot(layer))
        heads = sorted(
            upstream - where.start
            for upstream in users.intersection(range(where.start, where.stop))
        )
        # the span of heads from the first user to the last: a slice is a view, where a
        # list of heads is an index tensor (on a GPU, copied from the host)
        span = slice(heads[0], heads[-1] + 1)
        per_head = inputs.unflatten(-1, (body.heads, body.head_size))[:, :, span]  # (2, S, h, Dh)
        away = per_head[0] - per_head[1]  # (S, h, Dh)
        if away.shape[0] * mixing.shape[-1] < _CARRIED_COMPACT_FROM:  # widened once, at once
            heads_first = away.transpose(0, 1).float()  # (h, S, Dh)
            widened = torch.bmm(heads_first, mixing[span]).to(away.dtype)  # (h, S, D)
            for head in heads:
                kept[where.start + head] = Carried(widened[head - span.start])
            return
        for head in heads:
            kept[where.start + head] = Carried(away[:, head - span.start], mixing[head])

    slots = {graph.slot_of(upstream) for upstream in users}
    return outputs_written(body, keep, slice(start, None), slots, heads=keep_heads)


@dataclass(frozen=True)
class Carried:
    """What an upstream node carries back: its output, (S, D), or a head's slice of its
    output projection's input, (S, Dh), and the (Dh, D) mixing that widens it (on Gemma 3
    2.5× smaller than the output it stands for)."""

    value: Any
    mixing: Any = None

    def widened(self) -> torch.Tensor:
        """(S, D)."""
        if self.mixing is None:
            return self.value
        return (self.value.float() @ self.mixing).to(self.value.dtype)


Store = Callable[[int, "torch.Tensor"], None]  # a slot's outputs, (B, S, n, D), as computed
# a layer's heads as their output projection's inputs, (B, S, E), and their mixing
HeadStore = Callable[[int, "torch.Tensor", "torch.Tensor"], None]


@contextlib.contextmanager
def outputs_written(
    body: Anatomy,
    store: Store,
    positions: slice,
    slots: set[int] | None = None,
    heads: HeadStore | None = None,
) -> Iterator[None]:
    """While open, a pass hands each slot of upstream nodes' outputs at ``positions`` to
    ``store`` as it is computed, in the graph's slots (:class:`Graph`: the input, then
    each layer's heads and its MLP); only ``slots``, where given. With
    ``heads``, a layer's heads go there instead, as inputs of the output projection
    (divided by the run's scale where a post norm follows) and their mixing
    (:func:`head_mixing`)."""
    heads_in: list[Any] = [None] * len(body.blocks)

    def wanted(slot: int) -> bool:
        return slots is None or slot in slots

    def give(layer: int, inputs: torch.Tensor, mixing: torch.Tensor) -> None:
        import torch  # heavy: imported where a pass runs

        if heads is not None:
            heads(layer, inputs, mixing)
            return
        per_head = inputs.float().unflatten(-1, (body.heads, body.head_size))  # (B, S, H, Dh)
        shares = torch.einsum("bshe,hed->bshd", per_head, mixing)  # (B, S, H, D)
        store(heads_slot(layer), shares.to(inputs.dtype))

    def keep_input(_module: Any, args: tuple, kwargs: dict) -> None:
        store(0, hidden_of(args, kwargs)[:, positions].unsqueeze(2))

    def keep_heads(layer: int) -> Callable:
        def keep(_module: Any, args: tuple) -> None:
            if body.post_norms[layer] is None:
                give(layer, args[0][:, positions], head_mixing(body, layer))
            else:
                heads_in[layer] = args[0][:, positions]  # (B, S, E)

        return keep

    def keep_post_normed(layer: int) -> Callable:
        def keep(module: Any, args: tuple, output: Any) -> None:
            normed = output_of(output)[:, positions]
            gain, scale, centred = norm_form(module, args[0][:, positions], normed)
            inputs = (heads_in[layer].float() / scale).to(normed.dtype)  # the run's own scale
            heads_in[layer] = None
            give(layer, inputs, head_mixing(body, layer, gain, centred))

        return keep

    def keep_mlp(layer: int) -> Callable:
        def keep(_module: Any, _args: tuple, output: Any) -> None:
            store(mlp_slot(layer), output_of(output)[:, positions].unsqueeze(2))

        return keep

    with contextlib.ExitStack() as hooks:
        if wanted(0):
            first = body.blocks[0].register_forward_pre_hook(keep_input, with_kwargs=True)
            hooks.enter_context(hooked(first))
        for layer in range(len(body.blocks)):
            handles = []
            if wanted(mlp_slot(layer)):
                handles.append(mlp_written(body, layer).register_forward_hook(keep_mlp(layer)))
            if wanted(heads_slot(layer)):
                handles.append(body.projections[layer].register_forward_pre_hook(keep_heads(layer)))
                post_norm = _post_norm_of_heads(body, layer)
                if post_norm is not None:
                    handles.append(post_norm.register_forward_hook(keep_post_normed(layer)))
            for handle in handles:
                hooks.enter_context(hooked(handle))
        yield


def _post_norm_of_heads(body: Anatomy, layer: int) -> Any:
    """The norm after ``layer``'s attention output, if any: its heads' shares are read
    through it, which a bias of the output projection would blur (refused)."""
    post_norm = body.post_norms[layer]
    if post_norm is not None and getattr(body.projections[layer], "bias", None) is not None:
        raise UsageError(
            f"layer {layer}'s attention output has a bias and a post norm: "
            "its heads' shares of what the layer adds cannot be told apart"
        )
    return post_norm


@contextlib.contextmanager
def embeddings_kept(model: Any) -> Iterator[list[Any]]:
    """While open, a pass keeps its input embeddings' output, (B, T, D)."""
    kept: list[Any] = [None]

    def keep(_module: Any, _args: tuple, output: Any) -> None:
        kept[0] = output

    with hooked(model.get_input_embeddings().register_forward_hook(keep)):
        yield kept
