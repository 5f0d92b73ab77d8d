"""Each upstream node's corrupted output less its clean one, from the twins' first
differing token on: the record that edges are scored from (:mod:`attnviz.circuits.edges`).

Held as one (U, S, D) block where that is small. Where it is not (a long text whose twins
differ early), a head's difference is kept as its slice of the output projection's input,
(S, Dh) (divided by the run's own scale where a post norm follows: Gemma's), and widened
through its slice of the projection (with that norm's gain) a block of positions at a
time: on SmolLM2 the heads' part is 9× smaller, on Gemma 3 2.5×.

Shape letters: S the positions from the start on, U upstream nodes, L layers, H heads, Dh
a head's size, E = H × Dh, D the model's width.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from attnviz.circuits.graph import Graph, heads_slot, mlp_slot, slot_parts
from attnviz.errors import UsageError
from attnviz.pretrained.value_norms import input_matrix

if TYPE_CHECKING:
    import torch

    from attnviz.pretrained.anatomy import Anatomy

_FULL_AT_MOST = 2**29  # bytes: a record this small is one (U, S, D) block
_PART_AT_MOST = 2**29  # bytes: an estimate reads a larger record a part of it at a time


def matrix_of(projection: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A projection's weight as (inputs, outputs), in ``dtype`` (float32 unless given:
    :func:`input_matrix`)."""
    matrix = input_matrix(projection, dtype)
    if matrix is None:
        raise UsageError(
            f"attnviz cannot read {type(projection).__name__} as a linear projection: circuits "
            "read Linear and GPT-2's Conv1D projections"
        )
    return matrix


def head_mixing(
    body: Anatomy, layer: int, gain: torch.Tensor | None = None, centred: bool = False
) -> torch.Tensor:
    """(H, Dh, D) float32: what each head's slice of the output projection's input adds
    through its slice of the projection, then (where a post norm follows, the input
    divided by the run's scale) the norm's centring and gain."""
    matrix = matrix_of(body.projections[layer])  # (E, D)
    if centred:
        matrix = matrix - matrix.mean(-1, keepdim=True)
    if gain is not None:
        matrix = matrix * gain
    return matrix.view(body.heads, body.head_size, -1)


def _held_whole(graph: Graph, positions: int, width: int, element_size: int) -> bool:
    """Whether a record of ``positions`` is held as one (U, S, D) block (not compact)."""
    return len(graph.upstream) * positions * width * element_size <= _FULL_AT_MOST


def parts(
    graph: Graph, positions: slice, width: int, heads_width: int, element_size: int
) -> list[slice]:
    """``positions`` in as few equal parts as keep each part's record within _PART_AT_MOST
    bytes, the part reaching the last position first (``heads_width``: E, the output
    projection's input). Each part costs a read of both runs and a gradient pass: for a
    long text whose twins differ early, a record of gigabytes held a part at a time."""
    count = positions.stop - positions.start
    per_position = len(graph.upstream) * width * element_size  # one block's
    if not _held_whole(graph, count, width, element_size):  # the input's, MLPs', heads'
        per_position = ((1 + graph.layers) * width + graph.layers * heads_width) * element_size
    pieces = min(count, max(1, -(-per_position * count // _PART_AT_MOST)))  # a position at least
    bounds = [positions.start + count * piece // pieces for piece in range(pieces + 1)]
    return [slice(first, last) for first, last in itertools.pairwise(bounds)][::-1]


class Recorder:
    """Where the scoring record is written as the runs go: the clean run's outputs from the
    start on (and every node's at the last position, apart), then the corrupted run's less
    them, in place: one slot at a time beside the record, never two records. The input
    and the MLPs are given as outputs, (1, S, 1, D); the heads as (1, S, E) inputs of the
    output projection with their mixing (:func:`head_mixing`)."""

    def __init__(self, graph: Graph, positions: int) -> None:
        self.graph, self.positions = graph, positions
        self.wide: Any = None  # (1 + L, S, D): the input's and each MLP's
        self.heads: Any = None  # (L, S, E)
        self.mixing: list[Any] = [None] * graph.layers  # (L) of (H, Dh, D)
        self.last: Any = None  # (U, D)

    def clean_output(self, slot: int, value: torch.Tensor) -> None:
        if self.wide is None:  # sized and typed by the first output: the input's
            width = value.shape[-1]
            self.wide = value.new_empty((1 + self.graph.layers, self.positions, width))
            self.last = value.new_empty((len(self.graph.upstream), width))
        self.wide[self._wide_row(slot)] = value[0, :, 0]
        self.last[self.graph.columns(slot)] = value[0, -1]

    def corrupt_output(self, slot: int, value: torch.Tensor) -> None:
        self.wide[self._wide_row(slot)].neg_().add_(value[0, :, 0])

    def _wide_row(self, slot: int) -> int:
        """The row of ``wide`` that holds a slot's output: the input's, then each MLP's."""
        return slot_parts(slot)[0] + 1

    def both_outputs(self, slot: int, value: torch.Tensor) -> None:
        """Both runs' outputs in one pass: rows the clean run's, the corrupted one's."""
        self.clean_output(slot, value[:1])
        self.corrupt_output(slot, value[1:])

    def both_heads(self, layer: int, value: torch.Tensor, mixing: torch.Tensor) -> None:
        self.clean_heads(layer, value[:1], mixing)
        self.corrupt_heads(layer, value[1:], mixing)

    def clean_heads(self, layer: int, value: torch.Tensor, mixing: torch.Tensor) -> None:
        import torch

        if self.heads is None:  # sized by the first layer's
            self.heads = value.new_empty((self.graph.layers, self.positions, value.shape[-1]))
        self.heads[layer] = value[0]
        self.mixing[layer] = mixing
        last = value[0, -1].float().view(mixing.shape[0], mixing.shape[1])  # (H, Dh)
        shares = torch.einsum("he,hed->hd", last, mixing)
        self.last[self.graph.columns(heads_slot(layer))] = shares.to(self.last.dtype)

    def corrupt_heads(self, layer: int, value: torch.Tensor, _mixing: torch.Tensor) -> None:
        self.heads[layer].neg_().add_(value[0])

    def differences(self) -> Differences:
        return Differences(self.graph, self.wide, self.heads, self.mixing)


class Differences:
    """Every upstream node's corrupted output less its clean one, (U, S, D), read a node
    or a block of positions at a time; one block where it is small."""

    def __init__(
        self, graph: Graph, wide: torch.Tensor, heads: torch.Tensor, mixing: list[torch.Tensor]
    ) -> None:
        self.graph = graph
        self.wide: Any = wide  # (1 + L, S, D) the input's and the MLPs', until widened
        self.heads: Any = heads  # (L, S, E)
        self.mixing = mixing  # (L) of (H, Dh, D)
        self.positions, self.width = wide.shape[1:]
        self.block: Any = None  # (U, S, D) where small
        if _held_whole(graph, self.positions, self.width, wide.element_size()):
            self.block = self._assembled(len(graph.upstream), slice(None))
            self.wide = self.heads = None

    @property
    def compact(self) -> bool:
        """Whether each read widens the heads' record (no (U, S, D) block is kept)."""
        return self.block is None

    def rows(self, before: int, positions: slice) -> torch.Tensor:
        """(before, s, D): the first ``before`` upstream nodes (whole layers) at
        ``positions``."""
        if self.block is not None:
            return self.block[:before, positions]
        return self._assembled(before, positions)

    def of(self, upstream: int) -> torch.Tensor:
        """(S, D): one node's difference."""
        if self.block is not None:
            return self.block[upstream]
        slot = self.graph.slot_of(upstream)
        layer, heads = slot_parts(slot)
        if not heads:  # the input's or an MLP's
            return self.wide[layer + 1]
        head = upstream - self.graph.columns(slot).start
        inputs = self.heads[layer].unflatten(-1, (self.graph.heads, -1))[:, head]  # (S, Dh)
        return (inputs.float() @ self.mixing[layer][head]).to(self.wide.dtype)

    def _assembled(self, before: int, positions: slice) -> torch.Tensor:
        import torch

        graph = self.graph
        # the last node read: an MLP (its layer's heads and MLP read whole) or a layer's
        # heads (an MLP's read: its own layer's heads, not its MLP)
        last, heads = slot_parts(graph.slot_of(before - 1))
        wide = self.wide[: last + (1 if heads else 2), positions]  # (w, s, D)
        out = wide.new_empty((before, wide.shape[1], self.width))
        for index, rows in enumerate(wide):  # the input's, then each MLP's
            out[graph.columns(0 if index == 0 else mlp_slot(index - 1))] = rows
        for layer in range(last + 1):
            inputs = self.heads[layer, positions].float().unflatten(-1, (graph.heads, -1))
            shares = torch.einsum("she,hed->hsd", inputs, self.mixing[layer])  # (H, s, D)
            out[graph.columns(heads_slot(layer))] = shares.to(out.dtype)
        return out
