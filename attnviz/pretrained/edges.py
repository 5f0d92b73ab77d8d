"""Edges between a decoder's heads and MLPs (:class:`~attnviz.analysis.graph.Graph`),
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
  (N = 1 is the gradient estimate).

A circuit's faithfulness: the metric of the clean run with every edge outside the circuit
carrying the corrupted value (all edges kept: the clean run; none: the corrupted one),
run by :mod:`attnviz.pretrained.faithfulness`.

Shape letters: B rows of a pass, T tokens, S the positions from the first where the twins
differ on (:attr:`Runs.start`), U upstream nodes, N downstream nodes, n the
nodes of one group (a layer's heads, or one), D the model's width, Dh a head's size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.graph import LOGITS, Graph
from attnviz.choices import Site
from attnviz.errors import UsageError
from attnviz.memory import give_back_freed
from attnviz.pretrained.ablated import Ablated, changed_from, forced
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.differences import (
    Differences,
    Recorder,
    head_mixing,
    matrix_of,
)
from attnviz.pretrained.effects import (
    Change,
    Clean,
    changed_metrics,
    clean_recording,
    hooked,
    last_logits,
)
from attnviz.pretrained.finite import CORRUPTED_RUN, check_metric
from attnviz.pretrained.frozen_norms import norm_form
from attnviz.pretrained.metrics import Metric
from attnviz.pretrained.sites import (
    SITES,
    Units,
    hidden_of,
    mlp_written,
    norms_found,
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
    clean text's, its nodes' outputs replaced: :mod:`attnviz.pretrained.ablated`): at the
    positions from the first where the runs differ on, or at ``part`` of them
    (:func:`~attnviz.pretrained.differences.parts`; the last position's outputs then the
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
            _written(body, store, positions, heads=heads),
            _embedded(model) as embedded,
        ):
            read = stacked(arguments, corrupt_arguments) if together else arguments
            logits = last_logits(model, read)
        clean = finish(logits, metric)  # row 0's
        check_metric(clean.metric, model, arguments, "clean run")
        clean_embedded, corrupt_embedded = embedded[0][:1], embedded[0][1:]
        if not together:
            with (
                _embedded(model) as corrupt_read,
                forced(body, ablated, slice(None)),
                _written(body, record.corrupt_output, positions, heads=record.corrupt_heads),
            ):
                logits = last_logits(model, corrupt_arguments)
            corrupt_embedded = corrupt_read[0]
        corrupt_metric = float(metric.of(logits)[-1])
        check_metric(corrupt_metric, model, corrupt_arguments, CORRUPTED_RUN)
    return Runs(
        Wiring(body, graph, *norms),
        model,
        arguments,
        corrupt_arguments,
        metric,
        positions.start,
        positions.stop,
        clean,
        corrupt_metric,
        record.last,
        clean_embedded,
        corrupt_embedded,
        record.differences(),
    )


_GIVEN_BACK_FROM = 2**20  # numbers in one node's record, (S, D)
_TWINS_TOGETHER_BELOW = 2**20  # numbers in a run's (T, D): twins read as one pass's rows


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


@contextlib.contextmanager
def given_back_each_layer(model: Any, body: Anatomy, positions: int) -> Iterator[None]:
    """While open, where a node's record of ``positions`` is large, each layer's pass starts
    by handing back the pages freed since (:func:`give_back_freed`): glibc keeps blocks up
    to 32 MiB in its heap, and the records kept between the layers' freed activations
    would pin those pages (at 8,192 tokens, a gigabyte more)."""
    width = model.get_input_embeddings().weight.shape[1]
    if positions * width < _GIVEN_BACK_FROM:
        yield
        return

    def give_back(_module: Any, _args: tuple) -> None:
        give_back_freed()

    with contextlib.ExitStack() as hooks:
        for block in body.blocks:
            hooks.enter_context(hooked(block.register_forward_pre_hook(give_back)))
        yield


def users_carried(
    body: Anatomy, graph: Graph, users: set[int], kept: dict[int, Carried], start: int
) -> contextlib.AbstractContextManager:
    """:func:`_written` of the slots holding ``users``, keeping in ``kept`` what each user
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

        where = graph.columns(graph.heads_slot(layer))
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
    return _written(body, keep, slice(start, None), slots, heads=keep_heads)


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


def graph_of(body: Anatomy) -> Graph:
    """The graph of ``body``'s layers, query heads and key/value heads."""
    width = matrix_of(SITES[Site.K].module(body, 0)).shape[1]
    kv_heads = units_of(body, Site.K, 0, width).count
    post_norms = any(norm is not None for norm in body.post_norms)
    return Graph(len(body.blocks), body.heads, kv_heads, post_norms)


Store = Callable[[int, "torch.Tensor"], None]  # a slot's outputs, (B, S, n, D), as computed
# a layer's heads as their output projection's inputs, (B, S, E), and their mixing
HeadStore = Callable[[int, "torch.Tensor", "torch.Tensor"], None]


@contextlib.contextmanager
def _written(
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
        store(Graph.heads_slot(layer), shares.to(inputs.dtype))

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
            store(Graph.mlp_slot(layer), output_of(output)[:, positions].unsqueeze(2))

        return keep

    with contextlib.ExitStack() as hooks:
        if wanted(0):
            first = body.blocks[0].register_forward_pre_hook(keep_input, with_kwargs=True)
            hooks.enter_context(hooked(first))
        for layer in range(len(body.blocks)):
            handles = []
            if wanted(Graph.mlp_slot(layer)):
                handles.append(mlp_written(body, layer).register_forward_hook(keep_mlp(layer)))
            if wanted(Graph.heads_slot(layer)):
                handles.append(body.projections[layer].register_forward_pre_hook(keep_heads(layer)))
                post_norm = body.post_norms[layer]
                if post_norm is not None:
                    if getattr(body.projections[layer], "bias", None) is not None:
                        raise UsageError(
                            f"layer {layer}'s attention output has a bias and a post norm: "
                            "its heads' shares of what the layer adds cannot be told apart"
                        )
                    handles.append(post_norm.register_forward_hook(keep_post_normed(layer)))
            for handle in handles:
                hooks.enter_context(hooked(handle))
        yield


@contextlib.contextmanager
def _embedded(model: Any) -> Iterator[list[Any]]:
    """While open, a pass keeps its input embeddings' output, (B, T, D)."""
    kept: list[Any] = [None]

    def keep(_module: Any, _args: tuple, output: Any) -> None:
        kept[0] = output

    with hooked(model.get_input_embeddings().register_forward_hook(keep)):
        yield kept


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
    runs: Runs, edges: Sequence[tuple[int, int]], told: FirstPart | None = None
) -> np.ndarray:
    """Each edge's exact score: the metric of the clean run with that edge alone carrying
    the corrupted value, less the clean metric; batched passes, each starting at the
    lowest downstream layer among its rows (``told`` hears how long the first took)."""
    import torch

    graph = runs.wiring.graph
    differences = runs.differences
    where = {
        first + unit: (layer, letter, unit, size)
        for layer, letter, first, size, _ in graph.groups()
        for unit in range(size)
    }

    def carried(upstream: int, downstream: int) -> Change:
        layer, letter, unit, size = where[downstream]

        def install(patches: contextlib.ExitStack, rows: list[int], _batch: int) -> None:
            difference = differences.of(upstream)  # (S, D)
            delta = difference.new_zeros(len(rows), difference.shape[0], size, difference.shape[1])
            delta[:, :, unit] = difference
            adding = changed_inputs(
                runs.wiring, layer, letter, lambda _residual: (rows, delta), runs.start
            )
            patches.enter_context(adding)

        return Change(layer, install)

    changes = [carried(upstream, downstream) for upstream, downstream in edges]
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
    return np.array(found, dtype=np.float64)
