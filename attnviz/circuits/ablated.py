"""The run a circuit's edges take their values from where no corrupted text gives them
(``--ablation zero`` and ``mean``): the clean text's run with every upstream node's
output replaced — the input's embeddings (the first layer's input), each head's slice of
its output projection's input (so that its output is 0, or its mean output: the
projection is linear), each MLP's output — by zero, as EAP-IG's code's zero ablation
replaces it, or by its mean over the dataset (:class:`Means`: every position of every
clean text, each text's mean weighed alike, as EAP-IG's ``compute_mean_activations``
means to weigh them; its mask keeps each text's last position only, which is not
copied). Every position is ablated: no twin shares a first stretch with it.

Shape letters: L layers, D the model's width, E the heads' width (heads × head size).

The forced rows of a pass are its corrupted ones: :func:`forced` puts the replacement
there before any hook that reads an upstream node's output records it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Site
from attnviz.pretrained.effects import last_logits
from attnviz.pretrained.sites import (
    MLP_WRITTEN,
    Edit,
    editing,
    hidden_of,
    hooked,
    mlp_written,
    output_of,
    with_hidden,
    with_output,
)

if TYPE_CHECKING:
    import torch

    from attnviz.pretrained.anatomy import Anatomy


@dataclass(frozen=True)
class Means:
    """Each upstream node's output, each text's mean over its positions, summed over
    ``texts`` texts (:meth:`mean` divides): the input's (D,), each layer's heads' output
    projection input (L, E), each layer's MLP output (L, D)."""

    input: np.ndarray
    heads: np.ndarray
    mlps: np.ndarray
    texts: int = 1

    def merged(self, other: Means) -> Means:
        """The sums of both (from two workers)."""
        return Means(
            self.input + other.input,
            self.heads + other.heads,
            self.mlps + other.mlps,
            self.texts + other.texts,
        )

    def mean(self) -> Means:
        """The means over the texts (one text's sums)."""
        count = self.texts
        return Means(self.input / count, self.heads / count, self.mlps / count)


@dataclass(frozen=True)
class Ablated:
    """Every upstream node's output replaced by its mean (``means``, :meth:`Means.mean`'s)
    or, where there are none, by zero."""

    means: Means | None = None


def text_means(model: Any, body: Anatomy, arguments: dict) -> Means:
    """One text's nodes' outputs, each its mean over the text's positions."""
    import torch

    layers = len(body.blocks)
    found: dict[str, list[Any]] = {"input": [None], "heads": [None] * layers}
    found["mlps"] = [None] * layers

    def keep(where: str, layer: int) -> Any:
        def kept(value: torch.Tensor) -> None:
            found[where][layer] = value[0].float().mean(0).cpu().numpy()  # over positions

        return kept

    def input_kept(_module: Any, args: tuple, kwargs: dict) -> None:
        keep("input", 0)(hidden_of(args, kwargs))

    def heads_kept(layer: int) -> Any:
        return lambda _module, args: keep("heads", layer)(args[0])

    def mlp_kept(layer: int) -> Any:
        return lambda _module, _args, output: keep("mlps", layer)(output_of(output))

    with _at_every_node(body, input_kept, heads_kept, mlp_kept), torch.inference_mode():
        last_logits(model, arguments)
    return Means(found["input"][0], np.stack(found["heads"]), np.stack(found["mlps"]))


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

    means = ablated.means

    def value(found: torch.Tensor, mean: np.ndarray | None) -> Any:
        """What ``found``'s rows are replaced by: 0, or the mean, in its dtype."""
        import torch

        if mean is None:
            return 0
        return torch.as_tensor(mean, dtype=found.dtype, device=found.device)

    def replaced(mean: np.ndarray | None) -> Edit:
        def replace(found: torch.Tensor) -> torch.Tensor:  # (B, T, W), a copy
            found[rows] = value(found, mean)
            return found

        return replace

    with contextlib.ExitStack() as edits:
        edits.enter_context(
            editing(body, Site.RESID, 0, replaced(None if means is None else means.input))
        )
        for layer in range(len(body.blocks)):
            heads = None if means is None else means.heads[layer]
            mlp = None if means is None else means.mlps[layer]
            edits.enter_context(editing(body, Site.Z, layer, replaced(heads)))
            edits.enter_context(editing(body, MLP_WRITTEN, layer, replaced(mlp)))
        yield


@contextlib.contextmanager
def interpolated(
    body: Anatomy, ablated: Ablated, rows: Sequence[tuple[int, float]]
) -> Iterator[None]:
    """While open, row r of a pass, ``rows[r]`` = (group, share), has that group of
    upstream nodes (0 the input; 1 + 2l layer l's heads; 2 + 2l its MLP) output ``share``
    of the way from their ablated values to their values in the run, and held there: no
    gradient goes back through them, as EAP-IG's activations' interpolation replaces a
    node's output by a constant. A layer's heads are moved together where their outputs
    reach the residual stream (after the post-attention norm where there is one: moving
    every head's slice alike would leave a norm's output as it is)."""
    import torch

    means = ablated.means

    def moved(group: int, found: torch.Tensor, target: Any) -> torch.Tensor | None:
        """``found`` (B, T, W) with the rows of ``group`` moved towards ``target``."""
        chosen = [row for row, (each, _) in enumerate(rows) if each == group]
        if not chosen:
            return None
        shares = [rows[row][1] for row in chosen]
        share = torch.tensor(shares, dtype=found.dtype, device=found.device)[:, None, None]
        value = found.clone()
        value[chosen] = share * found[chosen].detach() + (1 - share) * target
        return value

    def target(found: torch.Tensor, mean: np.ndarray | None) -> torch.Tensor:
        """The ablated value, 0 or the mean, in ``found``'s dtype and device."""
        if mean is None:
            return found.new_zeros(found.shape[-1])
        return torch.as_tensor(mean, dtype=found.dtype, device=found.device)

    def input_moved(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        hidden = hidden_of(args, kwargs)  # (B, T, D)
        value = moved(0, hidden, target(hidden, None if means is None else means.input))
        return None if value is None else with_hidden(args, kwargs, value)

    def heads_moved(layer: int) -> Any:
        projection, post = body.projections[layer], body.post_norms[layer]

        def move(_module: Any, _args: tuple, output: Any) -> Any:
            written = output_of(output)  # (B, T, D): every head's output, together
            width = body.heads * body.head_size  # E, the projection's input
            mean = None if means is None else means.heads[layer]
            heads = target(written.new_zeros(width), mean)[None]  # (1, E)
            written_ablated = projection.forward(heads)  # (1, D): its bias kept, as zeroed
            if post is not None:
                written_ablated = post.forward(written_ablated)
            value = moved(1 + 2 * layer, written, written_ablated[0])
            return None if value is None else with_output(output, value)

        return move

    def mlp_moved(layer: int) -> Any:
        def move(_module: Any, _args: tuple, output: Any) -> Any:
            written = output_of(output)  # (B, T, D)
            mean = None if means is None else means.mlps[layer]
            value = moved(2 + 2 * layer, written, target(written, mean))
            return None if value is None else with_output(output, value)

        return move

    with contextlib.ExitStack() as hooks:
        first = body.blocks[0].register_forward_pre_hook(input_moved, with_kwargs=True)
        hooks.enter_context(hooked(first))
        for layer in range(len(body.blocks)):
            writes = body.post_norms[layer] or body.projections[layer]
            hooks.enter_context(hooked(writes.register_forward_hook(heads_moved(layer))))
            mlp = mlp_written(body, layer).register_forward_hook(mlp_moved(layer))
            hooks.enter_context(hooked(mlp))
        yield


@contextlib.contextmanager
def _at_every_node(body: Anatomy, embedded: Any, heads: Any, mlps: Any) -> Iterator[None]:
    """While open, ``embedded`` is a pre-hook (with kwargs) of the first layer (its input
    is the input node's output), ``heads(layer)`` one of each output projection (its input
    every head's), ``mlps(layer)`` a hook of what writes each MLP's output."""
    with contextlib.ExitStack() as hooks:
        first = body.blocks[0].register_forward_pre_hook(embedded, with_kwargs=True)
        hooks.enter_context(hooked(first))
        for layer in range(len(body.blocks)):
            projection = body.projections[layer].register_forward_pre_hook(heads(layer))
            hooks.enter_context(hooked(projection))
            mlp = mlp_written(body, layer).register_forward_hook(mlps(layer))
            hooks.enter_context(hooked(mlp))
        yield
