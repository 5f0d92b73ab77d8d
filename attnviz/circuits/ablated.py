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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Site
from attnviz.pretrained.effects import last_logits
from attnviz.pretrained.sites import (
    HEADS_WRITTEN,
    MLP_WRITTEN,
    Edit,
    Found,
    SitePoint,
    editing,
    hooked,
    reading,
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

    def keep(where: str, layer: int) -> Found:
        def kept(value: torch.Tensor, _graph: torch.Tensor) -> None:
            found[where][layer] = value[0].float().mean(0).cpu().numpy()  # over positions

        return kept

    every = range(layers)
    points: list[tuple[Site | SitePoint, str, range]] = [(Site.RESID, "input", range(1))]
    points += [(Site.Z, "heads", every), (MLP_WRITTEN, "mlps", every)]
    with contextlib.ExitStack() as hooks, torch.inference_mode():
        for point, where, at in points:
            for layer in at:
                for handle in reading(body, point, layer, keep(where, layer)):
                    hooks.enter_context(hooked(handle))
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
    reach the residual stream (:data:`~attnviz.pretrained.sites.HEADS_WRITTEN`: moving
    every head's slice alike would leave a post-attention norm's output as it is). Each
    move is an :func:`~attnviz.pretrained.sites.editing` of the group's site, installed
    only where some row moves that group."""
    import torch

    means = ablated.means

    def moving(group: int, target: Callable[[torch.Tensor], torch.Tensor]) -> Edit:
        """An edit moving the rows of ``group`` towards ``target`` of the value found."""
        chosen = [row for row, (each, _) in enumerate(rows) if each == group]
        shares = [rows[row][1] for row in chosen]

        def move(found: torch.Tensor) -> torch.Tensor:  # (B, T, W), a copy
            share = torch.tensor(shares, dtype=found.dtype, device=found.device)[:, None, None]
            found[chosen] = share * found[chosen].detach() + (1 - share) * target(found)
            return found

        return move

    def mean_of(mean: np.ndarray | None) -> Callable[[torch.Tensor], torch.Tensor]:
        """The ablated value, 0 or the mean, in the found value's dtype and device."""
        if mean is None:
            return lambda found: found.new_zeros(found.shape[-1])
        return lambda found: torch.as_tensor(mean, dtype=found.dtype, device=found.device)

    def heads_ablated(layer: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """What every head of ``layer`` writes ablated: the projection of their ablated
        outputs (its bias kept, as zeroed), through the post norm where there is one."""
        projection, post = body.projections[layer], body.post_norms[layer]
        mean = mean_of(None if means is None else means.heads[layer])

        def written(found: torch.Tensor) -> torch.Tensor:
            heads = mean(found.new_zeros(body.heads * body.head_size))[None]  # (1, E)
            value = projection.forward(heads)  # (1, D)
            return (value if post is None else post.forward(value))[0]

        return written

    groups = {group for group, _ in rows}
    with contextlib.ExitStack() as edits:
        if 0 in groups:
            target = mean_of(None if means is None else means.input)
            edits.enter_context(editing(body, Site.RESID, 0, moving(0, target)))
        for layer in range(len(body.blocks)):
            if 1 + 2 * layer in groups:
                moved = moving(1 + 2 * layer, heads_ablated(layer))
                edits.enter_context(editing(body, HEADS_WRITTEN, layer, moved))
            if 2 + 2 * layer in groups:
                target = mean_of(None if means is None else means.mlps[layer])
                edits.enter_context(
                    editing(body, MLP_WRITTEN, layer, moving(2 + 2 * layer, target))
                )
        yield
