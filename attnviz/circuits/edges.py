"""Edges between a decoder's heads and MLPs (:class:`~attnviz.circuits.graph.Graph`),
scored on a text and its corrupted twin, and a circuit's faithfulness.

An upstream node's output in a run is what it adds to the residual stream there: the
input's embeddings (the first layer's input), a head's slice of the output projection's
input times its slice of the output projection (in a layer with a post-attention norm,
Gemma's, its share of that norm's output: the same scale and gain as the run's whole
attention output, so that the heads' shares add up to what the layer adds), an MLP's
output (through its post norm where the layer has one). A downstream node's input is the
residual stream as it reads it: each head's query, key or value input is a copy of the
residual of its own, put through the layer's attention norm and that head's rows of the
projection; an MLP's input is its norm's input; the logits' the final norm's input.

An edge u → d carrying the corrupted run's value: d's input gets out_u(corrupt) −
out_u(run) added, where out_u(run) is u's output in the run being made (in the clean run
with one edge changed, its clean output: u comes before d). Before the first token where
the twins differ, every run is the same (a decoder's position reads none after it): the
records hold, and the runs change, only the positions from that token on. Scored:

- **exact**: the metric with that edge alone changed, less the clean metric (a batched
  forward pass per edge, each starting at its downstream layer);
- **gradient** (edge attribution patching, Syed et al. 2023): (out_u(corrupt) −
  out_u(clean)) · ∂metric/∂in_d at the clean run, summed over positions, from one
  forward and one backward pass;
- **ig** (EAP-IG, Hanna et al. 2024): the same with ∂metric/∂in_d averaged over the runs
  whose input embeddings lie k/N of the way from the corrupted to the clean ones, k = 1…N
  (N = 1 is the gradient estimate); where the nodes are ablated (no corrupted text), over
  the runs in which one group of nodes (the input; a layer's heads; its MLP) has its
  outputs k/N of the way from their ablated values to their clean ones, each group in
  turn (EAP-IG's interpolation of activations).

A circuit's faithfulness: the metric of the clean run with every edge outside the circuit
carrying the corrupted value (all edges kept: the clean run; none: the corrupted one),
run by :mod:`attnviz.circuits.faithfulness`.

Shape letters: B rows of a pass, T tokens, S the positions from the first where the twins
differ on (:attr:`Runs.start`), U upstream nodes, N downstream nodes, n the
nodes of one group (a layer's heads, or one), D the model's width, Dh a head's size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Site
from attnviz.circuits.ablated import Ablated, changed_from, forced
from attnviz.circuits.differences import (
    Differences,
    Recorder,
    matrix_of,
)
from attnviz.circuits.graph import LOGITS, Graph
from attnviz.circuits.node_outputs import (
    embeddings_kept,
    outputs_written,
    stacked,
)
from attnviz.circuits.norms import norms_found
from attnviz.circuits.spans import Spans
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.effects import (
    Change,
    Clean,
    changed_metrics,
    clean_recording,
    last_logits,
)
from attnviz.pretrained.finite import CORRUPTED_RUN, check_metric
from attnviz.pretrained.metrics import Metric
from attnviz.pretrained.sites import (
    SITES,
    Units,
    given_back_each_layer,
    hidden_of,
    hooked,
    output_of,
    units_of,
    with_hidden,
)

if TYPE_CHECKING:
    import torch

    from attnviz.progress import FirstPart

QKV = {"q": Site.Q, "k": Site.K, "v": Site.V}

# What a pass adds to a group of downstream inputs from its runs' start on, given the
# residual stream they read there, (B, S, D), when the pass reaches them: (the batch rows,
# (R, S, n, D), or (R, S, 1, D): the same for every node of the group), or None where it
# adds nothing.
Added = Callable[["torch.Tensor"], "tuple[Any, torch.Tensor] | None"]


@dataclass(frozen=True)
class Wiring:
    """Where each layer's heads and MLP read the residual stream: the norm the attention's
    input comes out of (its input the layer's input) and the norm the MLP's comes out of."""

    body: Anatomy
    graph: Graph
    attention_norms: list[Any]  # (L)
    mlp_norms: list[Any]  # (L)


@dataclass
class Runs:
    """A text and its corrupted twin, read once each to score edges: what every edge's run
    starts from, and every upstream node's corrupted output less its clean one."""

    wiring: Wiring
    model: Any
    arguments: dict
    corrupt_arguments: dict
    metric: Metric
    start: int  # the first position where the runs differ (:func:`changed_from`)
    stop: int  # the record holds positions start…stop − 1: all from start on, or a part
    clean: Clean  # the clean run's record (its layers' outputs, where exact passes start)
    corrupt_metric: float
    clean_last: torch.Tensor  # (U, D) every upstream node's clean output at the record's last
    clean_embedded: torch.Tensor  # (1, T, D) the input embeddings' output
    corrupt_embedded: torch.Tensor
    differences: Differences  # each upstream node's corrupted output less its clean one
    ablated: Ablated | None = None  # where no corrupted text is read: what replaces outputs


def read_twins(
    model: Any,
    body: Anatomy,
    arguments: dict,
    corrupt_arguments: dict,
    metric: Metric,
    starts: bool = True,
    part: slice | None = None,
    ablated: Ablated | None = None,
) -> Runs:
    """The clean and the corrupted run, each recording the upstream nodes' outputs and the
    input embeddings (the clean one finds the norms, and with ``starts`` records where
    exact passes start: each layer's output; with ``ablated`` the corrupted run is the
    clean text's, its nodes' outputs replaced: :mod:`attnviz.circuits.ablated`): at the
    positions from the first where the runs differ on, or at ``part`` of them
    (:func:`~attnviz.circuits.differences.parts`; the last position's outputs then the
    part's last's). Short twins read without
    ``starts`` run as two rows of one pass: on a GPU a pass's launches, not its
    arithmetic, are its time there; long ones run apart, each keeping its own activations."""
    import torch

    graph = graph_of(body)
    start = changed_from(arguments, corrupt_arguments, ablated)
    tokens = int(arguments["input_ids"].shape[1])
    positions = slice(start, tokens) if part is None else part
    count = positions.stop - positions.start
    width = model.get_input_embeddings().weight.shape[1]
    together = not starts and tokens * width < _TWINS_TOGETHER_BELOW
    with torch.inference_mode(), given_back_each_layer(model, body, count):
        record = Recorder(graph, count)
        store, heads = record.clean_output, record.clean_heads
        if together:  # rows: the clean run, the corrupted one
            store, heads = record.both_outputs, record.both_heads
        with (
            # first: every hook after it sees the replaced values (the norms are found by
            # the layer's input itself)
            forced(body, ablated, slice(1, 2)),  # the corrupted row, where together
            norms_found(body) as norms,
            clean_recording(body, starts, head_inputs=False) as finish,
            outputs_written(body, store, positions, heads=heads),
            embeddings_kept(model) as embedded,
        ):
            read = stacked(arguments, corrupt_arguments) if together else arguments
            logits = last_logits(model, read)
        clean = finish(logits, metric)  # row 0's
        check_metric(clean.metric, model, arguments, "clean run")
        clean_embedded, corrupt_embedded = embedded[0][:1], embedded[0][1:]
        if not together:
            with (
                embeddings_kept(model) as corrupt_read,
                forced(body, ablated, slice(None)),
                outputs_written(body, record.corrupt_output, positions, heads=record.corrupt_heads),
            ):
                logits = last_logits(model, corrupt_arguments)
            corrupt_embedded = corrupt_read[0]
        corrupt_metric = float(metric.of(logits)[-1])
        check_metric(corrupt_metric, model, corrupt_arguments, CORRUPTED_RUN)
    wiring = Wiring(body, graph, *norms)
    run_on = (model, arguments, corrupt_arguments, metric, positions.start, positions.stop)
    recorded = (corrupt_metric, record.last, clean_embedded, corrupt_embedded)
    return Runs(wiring, *run_on, clean, *recorded, record.differences(), ablated)


_TWINS_TOGETHER_BELOW = 2**20  # numbers in a run's (T, D): twins read as one pass's rows


def graph_of(body: Anatomy) -> Graph:
    """The graph of ``body``'s layers, query heads and key/value heads."""
    width = matrix_of(SITES[Site.K].module(body, 0)).shape[1]
    kv_heads = units_of(body, Site.K, 0, width).count
    post_norms = any(norm is not None for norm in body.post_norms)
    return Graph(len(body.blocks), body.heads, kv_heads, post_norms)


def changed_inputs(
    wiring: Wiring, layer: int, letters: str, added: Added, start: int
) -> contextlib.AbstractContextManager:
    """Hooks adding what ``added`` gives to the inputs of one group of downstream nodes, from
    position ``start`` on: ``layer``'s query, key or value inputs (``letters``: any of
    "qkv", changed together, ``added``'s nodes the query heads', then the key heads',
    then the value heads'), its MLP's (``m``), or the logits' (layer L). A head's input is
    recomputed from its own copy of the residual there: the attention norm of (the layer's
    input + what is added), through its rows of the projection."""
    body = wiring.body
    stack = contextlib.ExitStack()
    if letters in ("m", LOGITS):
        norm = body.norm if letters == LOGITS else wiring.mlp_norms[layer]

        def add_to_input(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
            found = added(hidden_of(args, kwargs)[:, start:])
            if found is None:
                return None
            rows, delta = _as_slice(found[0]), found[1]
            hidden = hidden_of(args, kwargs).clone()  # (B, T, D)
            hidden[rows, start:] = hidden[rows, start:] + delta[:, :, 0].to(hidden.dtype)
            return with_hidden(args, kwargs, hidden)

        stack.enter_context(hooked(norm.register_forward_pre_hook(add_to_input, with_kwargs=True)))
        return stack
    sites = [QKV[letter] for letter in letters]
    modules = [SITES[site].module(body, layer) for site in sites]
    state: dict[str, Any] = {}  # the layer's call: its residual, then what is recomputed

    def keep(_module: Any, args: tuple, kwargs: dict) -> None:
        state.clear()
        state["residual"] = hidden_of(args, kwargs)[:, start:]  # (B, S, D)

    def recomputed(dtype: torch.dtype) -> tuple[Any, torch.Tensor, list[Units]] | None:
        """The rows changed, each letter's units and their new values, (R, S, N × Dh):
        computed by the first of the letters' projections to run, in its output's dtype."""
        if "found" not in state:
            state["found"] = _recomputed(
                wiring, layer, sites, modules, added(state["residual"]), state["residual"], dtype
            )
        return state["found"]

    def write(owner: Any) -> Callable:
        def recompute(_module: Any, _args: tuple, output: Any) -> Any:
            projected = output_of(output)  # (B, T, W)
            found = recomputed(projected.dtype)
            if found is None:
                return None
            rows, value, units_each = found
            offset = 0
            for module, units in zip(modules, units_each, strict=True):
                width = units.count * units.size
                if module is owner:  # GPT-2 computes all three in one
                    piece = value[..., offset : offset + width]
                    bias = getattr(module, "bias", None)
                    if bias is not None:
                        piece = piece + bias[units.columns]
                    # in place: the passes run in inference mode, and the projection's
                    # output is its own until the hook returns (a copy is a launch more)
                    projected[rows, start:, units.columns] = piece
                offset += width
            return None

        return recompute

    norm = wiring.attention_norms[layer]
    stack.enter_context(hooked(norm.register_forward_pre_hook(keep, with_kwargs=True)))
    for owner in dict.fromkeys(modules):
        stack.enter_context(hooked(owner.register_forward_hook(write(owner))))
    return stack


def _recomputed(
    wiring: Wiring,
    layer: int,
    sites: list[Site],
    modules: list[Any],
    found: tuple[Any, torch.Tensor] | None,
    residual: torch.Tensor,
    dtype: torch.dtype,
) -> tuple[Any, torch.Tensor, list[Units]] | None:
    """:func:`changed_inputs`' new values of a layer's head inputs, (R, S, N × Dh), the
    rows changed and each site's units, given what is added (``found``) to their copies
    of the ``residual``: one norm and one product for every site (without the bias)."""
    import torch

    if found is None:
        return None
    rows, delta = _as_slice(found[0]), found[1]  # delta (R, S, N, D) or (R, S, 1, D)
    units_each, matrices = [], []
    for site, module in zip(sites, modules, strict=True):
        matrix = matrix_of(module, dtype)  # (D, W)
        units = units_of(wiring.body, site, layer, matrix.shape[1])
        units_each.append(units)
        matrices.append(matrix[:, units.columns])
    matrix = matrices[0] if len(matrices) == 1 else torch.cat(matrices, 1)  # (D, N × Dh)
    copies = residual[rows].unsqueeze(2) + delta.to(dtype)  # (R, S, N or 1, D)
    # forward: not the hooks, which read the layer's own call of the norm
    normed = wiring.attention_norms[layer].forward(copies)
    if delta.shape[2] == 1:  # one input for every unit: projected at once
        return rows, normed[:, :, 0] @ matrix, units_each
    rows_of = matrix.view(matrix.shape[0], delta.shape[2], -1)  # (D, N, Dh)
    value = torch.einsum("rtnd,dnh->rtnh", normed, rows_of).flatten(2)
    return rows, value, units_each


def _as_slice(rows: Any) -> Any:
    """Consecutive batch rows as a slice: indexing with it is a view, where a list is an index
    tensor copied to the device (on a GPU, a wait for every queued operation)."""
    if isinstance(rows, list) and rows and rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return rows


def exact_scores(
    runs: Runs,
    edges: Sequence[tuple[int, int]],
    told: FirstPart | None = None,
    spans: Spans | None = None,
) -> np.ndarray:
    """Each edge's exact score, (E,): the metric of the clean run with that edge alone
    carrying the corrupted value, less the clean metric; with ``spans``, (E, K): carrying
    it at one span's positions alone (a span none of whose positions differ: 0, no pass).
    Batched passes, each starting at the lowest downstream layer among its rows (``told``
    hears how long the first took)."""
    import torch

    graph = runs.wiring.graph
    differences = runs.differences
    where = {
        first + unit: (layer, letter, unit, size)
        for layer, letter, first, size, _ in graph.groups()
        for unit in range(size)
    }

    def carried(upstream: int, downstream: int, at: slice | list[int] = slice(None)) -> Change:
        layer, letter, unit, size = where[downstream]

        def install(patches: contextlib.ExitStack, rows: list[int], _batch: int) -> None:
            difference = differences.of(upstream)  # (S, D)
            delta = difference.new_zeros(len(rows), difference.shape[0], size, difference.shape[1])
            delta[:, at, unit] = difference[at]  # the positions it carries the value at
            adding = changed_inputs(
                runs.wiring, layer, letter, lambda _residual: (rows, delta), runs.start
            )
            patches.enter_context(adding)

        return Change(layer, install)

    # each span's positions among those recorded (from runs.start): a span's edge carries
    # its value there alone
    at = [slice(None)] if spans is None else _span_positions(spans, runs.start, runs.stop)
    asked = [(edge, k) for edge in edges for k, positions in enumerate(at) if positions != []]
    changes = [carried(*edge, at[k]) for edge, k in asked]
    with torch.inference_mode():
        found = changed_metrics(
            runs.model,
            runs.wiring.body,
            runs.arguments,
            runs.metric,
            runs.clean,
            changes,
            "edge",
            told,
        )
    scores = np.zeros((len(edges), len(at)))
    places = {edge: place for place, edge in enumerate(edges)}
    for (edge, k), value in zip(asked, found, strict=True):
        scores[places[edge], k] = value
    return scores[:, 0] if spans is None else scores


def _span_positions(spans: Spans, start: int, stop: int) -> list[list[int]]:
    """Each span's positions among those recorded, counted from ``start``."""
    positions: list[list[int]] = [[] for _ in spans.names]
    for position in range(start, stop):
        positions[spans.of[position]].append(position - start)
    return positions
