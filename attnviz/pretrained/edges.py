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
with one edge changed, its clean output: u comes before d). Scored:

- **exact**: the metric with that edge alone changed, less the clean metric (a batched
  forward pass per edge, each starting at its downstream layer);
- **gradient** (edge attribution patching, Syed et al. 2023): (out_u(corrupt) −
  out_u(clean)) · ∂metric/∂in_d at the clean run, summed over positions, from one
  forward and one backward pass;
- **ig** (EAP-IG, Hanna et al. 2024): the same with ∂metric/∂in_d averaged over the runs
  whose input embeddings lie k/N of the way from the corrupted to the clean ones, k = 1…N
  (N = 1 is the gradient estimate).

A circuit's faithfulness: the metric of the clean run with every edge outside the circuit
carrying the corrupted value (all edges kept: the clean run; none: the corrupted one).

Shape letters: B rows of a pass, T tokens, U upstream nodes, N downstream nodes, n the
nodes of one group (a layer's heads, or one), D the model's width, Dh a head's size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.graph import LOGITS, READS, Graph
from attnviz.choices import Site
from attnviz.errors import UsageError
from attnviz.pretrained.effects import (
    Anatomy,
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
from attnviz.pretrained.patching import backward_to, weights_without_gradients
from attnviz.pretrained.sites import (
    SITES,
    hidden_of,
    norms_found,
    output_of,
    units_of,
    with_hidden,
    with_output,
)
from attnviz.pretrained.value_norms import input_matrix
from attnviz.pretrained.windowed import windowed
from attnviz.progress import advance

if TYPE_CHECKING:
    import torch

_QKV = {"q": Site.Q, "k": Site.K, "v": Site.V}
_TOKENS_PER_GRADIENT_PASS = 512  # rows × tokens of one of EAP-IG's passes: its points

# What a pass adds to a group of downstream inputs, given the residual stream they read
# there, (B, T, D), when the pass reaches them: (the batch rows, (R, T, n, D), or
# (R, T, 1, D): the same for every node of the group), or None where it adds nothing.
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
    """A text and its corrupted twin, read once each: what every edge's run starts from."""

    wiring: Wiring
    model: Any
    arguments: dict
    corrupt_arguments: dict
    metric: Metric
    clean: Clean  # the clean run's record (its layers' outputs, where exact passes start)
    corrupt_metric: float
    clean_written: torch.Tensor  # (1, T, U, D) every upstream node's output
    corrupt_written: torch.Tensor  # (1, T, U, D)
    clean_embedded: torch.Tensor  # (1, T, D) the input embeddings' output
    corrupt_embedded: torch.Tensor
    # (2L + 1) of (1, T, D): the residual stream where each layer's heads, then its MLP,
    # then the logits read it, in the corrupted run
    corrupt_read: list[torch.Tensor]

    @property
    def difference(self) -> torch.Tensor:
        """(T, U, D) each upstream node's corrupted output less its clean one."""
        return (self.corrupt_written - self.clean_written)[0]


def read_twins(
    model: Any,
    body: Anatomy,
    arguments: dict,
    corrupt_arguments: dict,
    metric: Metric,
    starts: bool = True,
) -> Runs:
    """The clean and the corrupted run, each recording every upstream node's output and
    the input embeddings (the clean one finds the norms, and with ``starts`` records where
    exact passes start: each layer's output)."""
    import torch

    graph = graph_of(body)
    with torch.inference_mode():
        with (
            norms_found(body) as norms,
            clean_recording(body, starts) as finish,
            _written(body) as written,
            _embedded(model) as embedded,
        ):
            logits = last_logits(model, arguments)
        clean = finish(logits, metric)
        check_metric(clean.metric, model, arguments, "clean run")
        clean_written = torch.cat(written, dim=2)
        wiring = Wiring(body, graph, *norms)
        with (
            _written(body) as written,
            _embedded(model) as corrupt_embedded,
            _read_residuals(wiring) as corrupt_read,
        ):
            corrupt_logits = last_logits(model, corrupt_arguments)
        corrupt_metric = float(metric.of(corrupt_logits)[0])
        check_metric(corrupt_metric, model, corrupt_arguments, CORRUPTED_RUN)
    return Runs(
        wiring,
        model,
        arguments,
        corrupt_arguments,
        metric,
        clean,
        corrupt_metric,
        clean_written,
        torch.cat(written, dim=2),
        embedded[0],
        corrupt_embedded[0],
        corrupt_read,
    )


@contextlib.contextmanager
def _read_residuals(wiring: Wiring) -> Iterator[list[Any]]:
    """While open, a pass keeps the residual stream where each downstream group reads it:
    each layer's attention norm's input, its MLP norm's, and the final norm's."""
    body = wiring.body
    norms = [
        norm
        for layer in range(len(body.blocks))
        for norm in (wiring.attention_norms[layer], wiring.mlp_norms[layer])
    ]
    norms.append(body.norm)
    kept: list[Any] = [None] * len(norms)

    def keeper(point: int) -> Callable:
        def keep(_module: Any, args: tuple, kwargs: dict) -> None:
            kept[point] = hidden_of(args, kwargs)

        return keep

    with contextlib.ExitStack() as hooks:
        for point, norm in enumerate(norms):
            hooks.enter_context(
                hooked(norm.register_forward_pre_hook(keeper(point), with_kwargs=True))
            )
        yield kept


def graph_of(body: Anatomy) -> Graph:
    """The graph of ``body``'s layers, query heads and key/value heads."""
    width = _matrix(SITES[Site.K].module(body, 0)).shape[1]
    kv_heads = units_of(body, Site.K, 0, width).count
    return Graph(len(body.blocks), body.heads, kv_heads)


def _mlp(body: Anatomy, layer: int) -> Any:
    return SITES[Site.MLP].module(body, layer)


def _mlp_written(body: Anatomy, layer: int) -> Any:
    """What adds the MLP's output to the residual stream: its post norm where the layer has
    one (Gemma 2 and 3), else the MLP."""
    block = body.blocks[layer]
    return getattr(block, "post_feedforward_layernorm", None) or _mlp(body, layer)


def _slot_of_heads(layer: int) -> int:
    """Where ``layer``'s heads' outputs are kept in :func:`_written`'s list: after the input
    and two slots (heads, MLP) per layer below."""
    return 1 + 2 * layer


@contextlib.contextmanager
def _written(body: Anatomy) -> Iterator[list[Any]]:
    """While open, a pass keeps every upstream node's output as it is computed, (B, T, n, D)
    per slot: the input, then each layer's heads and its MLP (the graph's upstream order)."""
    kept: list[Any] = [None] * (1 + 2 * len(body.blocks))
    heads_in: list[Any] = [None] * len(body.blocks)

    def keep_input(_module: Any, args: tuple, kwargs: dict) -> None:
        kept[0] = hidden_of(args, kwargs).unsqueeze(2)

    def keep_heads(layer: int) -> Callable:
        def keep(_module: Any, args: tuple) -> None:
            shares = _head_shares(body, layer, args[0])  # (B, T, H, D)
            if body.post_norms[layer] is None:
                kept[_slot_of_heads(layer)] = shares
            else:
                heads_in[layer] = shares

        return keep

    def keep_post_normed(layer: int) -> Callable:
        def keep(module: Any, args: tuple, output: Any) -> None:
            gain, scale, centred = norm_form(module, args[0], output_of(output))
            shares = heads_in[layer].float()
            if centred:
                shares = shares - shares.mean(-1, keepdim=True)
            normed = gain * shares / scale.unsqueeze(2)  # the run's own scale and gain
            kept[_slot_of_heads(layer)] = normed.to(heads_in[layer].dtype)

        return keep

    def keep_mlp(layer: int) -> Callable:
        def keep(_module: Any, _args: tuple, output: Any) -> None:
            kept[_slot_of_heads(layer) + 1] = output_of(output).unsqueeze(2)

        return keep

    with contextlib.ExitStack() as hooks:
        first = body.blocks[0].register_forward_pre_hook(keep_input, with_kwargs=True)
        hooks.enter_context(hooked(first))
        for layer in range(len(body.blocks)):
            handles = [
                body.projections[layer].register_forward_pre_hook(keep_heads(layer)),
                _mlp_written(body, layer).register_forward_hook(keep_mlp(layer)),
            ]
            post_norm = body.post_norms[layer]
            if post_norm is not None:
                if getattr(body.projections[layer], "bias", None) is not None:
                    raise UsageError(
                        f"layer {layer}'s attention output has a bias and a post norm: its "
                        "heads' shares of what the layer adds cannot be told apart"
                    )
                handles.append(post_norm.register_forward_hook(keep_post_normed(layer)))
            for handle in handles:
                hooks.enter_context(hooked(handle))
        yield kept


def _matrix(projection: Any) -> torch.Tensor:
    """A projection's weight as (inputs, outputs), float32 (:func:`input_matrix`)."""
    matrix = input_matrix(projection)
    if matrix is None:
        raise UsageError(
            f"attnviz cannot read {type(projection).__name__} as a linear projection: circuits "
            "read Linear and GPT-2's Conv1D projections"
        )
    return matrix


def _head_shares(body: Anatomy, layer: int, z: torch.Tensor) -> torch.Tensor:
    """(B, T, E) an output projection's input -> (B, T, H, D) what each head's slice adds
    through its slice of the projection (the bias left out: no head's)."""
    import torch

    matrix = _matrix(body.projections[layer])  # (E, D)
    per_head = matrix.to(z.dtype).view(body.heads, body.head_size, -1)  # (H, Dh, D)
    return torch.einsum("bthe,hed->bthd", z.unflatten(-1, (body.heads, body.head_size)), per_head)


@contextlib.contextmanager
def _embedded(model: Any) -> Iterator[list[Any]]:
    """While open, a pass keeps its input embeddings' output, (B, T, D)."""
    kept: list[Any] = [None]

    def keep(_module: Any, _args: tuple, output: Any) -> None:
        kept[0] = output

    with hooked(model.get_input_embeddings().register_forward_hook(keep)):
        yield kept


def _changed_inputs(
    wiring: Wiring, layer: int, letter: str, added: Added
) -> contextlib.AbstractContextManager:
    """Hooks adding what ``added`` gives to the inputs of one group of downstream nodes:
    ``layer``'s query, key or value inputs (``letter``), its MLP's (``m``), or the logits'
    (layer L). A head's input is recomputed from its own copy of the residual: the
    attention norm of (the layer's input + what is added), through its rows of the
    projection."""
    import torch

    body = wiring.body
    stack = contextlib.ExitStack()
    if letter not in READS:
        norm = body.norm if letter == LOGITS else wiring.mlp_norms[layer]

        def add_to_input(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
            found = added(hidden_of(args, kwargs))
            if found is None:
                return None
            rows, delta = found
            hidden = hidden_of(args, kwargs).clone()  # (B, T, D)
            hidden[rows] = hidden[rows] + delta[:, :, 0].to(hidden.dtype)
            return with_hidden(args, kwargs, hidden)

        stack.enter_context(hooked(norm.register_forward_pre_hook(add_to_input, with_kwargs=True)))
        return stack
    norm, residual = wiring.attention_norms[layer], [torch.empty(0)]
    site = _QKV[letter]
    module = SITES[site].module(body, layer)

    def keep(_module: Any, args: tuple, kwargs: dict) -> None:
        residual[0] = hidden_of(args, kwargs)

    def recompute(_module: Any, _args: tuple, output: Any) -> Any:
        found = added(residual[0])
        if found is None:
            return None
        rows, delta = found
        projected = output_of(output).clone()  # (B, T, W)
        units = units_of(body, site, layer, projected.shape[-1])
        copies = residual[0][rows].unsqueeze(2) + delta.to(projected.dtype)  # (R, T, n, D)
        matrix = _matrix(module)[:, units.columns].to(projected.dtype)  # (D, n × Dh)
        # forward: not the hooks, which read the layer's own call of the norm
        normed = norm.forward(copies)
        if delta.shape[2] == 1:  # one input for every unit: projected at once
            value = normed[:, :, 0] @ matrix  # (R, T, n × Dh)
        else:
            rows_of = matrix.view(matrix.shape[0], units.count, units.size)  # (D, n, Dh)
            value = torch.einsum("rtnd,dnh->rtnh", normed, rows_of).flatten(2)
        bias = getattr(module, "bias", None)
        if bias is not None:
            value = value + bias[units.columns]
        projected[rows, :, units.columns] = value
        return with_output(output, projected)

    stack.enter_context(hooked(norm.register_forward_pre_hook(keep, with_kwargs=True)))
    stack.enter_context(hooked(module.register_forward_hook(recompute)))
    return stack


def _groups(graph: Graph) -> Iterator[tuple[int, str, int, int]]:
    """Each group of downstream nodes: (layer, letter, its first index, how many)."""
    for layer in range(graph.layers):
        first = graph.reads(layer)
        sizes = (graph.heads, graph.kv_heads, graph.kv_heads, 1)
        for letter, size in zip((*READS, "m"), sizes, strict=True):
            yield layer, letter, first, size
            first += size
    yield graph.layers, LOGITS, len(graph.downstream) - 1, 1


def _readable(graph: Graph, first: int) -> int:
    """How many upstream nodes come before the downstream node ``first``."""
    return int(graph.edges[:, first].sum())


def exact_scores(runs: Runs, edges: Sequence[tuple[int, int]], say_long: bool = True) -> np.ndarray:
    """Each edge's exact score: the metric of the clean run with that edge alone carrying
    the corrupted value, less the clean metric; batched passes, each starting at the
    lowest downstream layer among its rows (a long sweep said first, if ``say_long``)."""
    import torch

    graph = runs.wiring.graph
    difference = runs.difference  # (T, U, D)
    where = {
        first + unit: (layer, letter, unit, size)
        for layer, letter, first, size in _groups(graph)
        for unit in range(size)
    }

    def carried(upstream: int, downstream: int) -> Change:
        layer, letter, unit, size = where[downstream]

        def install(patches: contextlib.ExitStack, rows: list[int], _batch: int) -> None:
            delta = difference.new_zeros(len(rows), difference.shape[0], size, difference.shape[2])
            delta[:, :, unit] = difference[:, upstream]
            patches.enter_context(
                _changed_inputs(runs.wiring, layer, letter, lambda _residual: (rows, delta))
            )

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
            say_long,
        )
    return np.array(found, dtype=np.float64)


def estimated_scores(runs: Runs, steps: int | None = None) -> np.ndarray:
    """Every edge's estimated score, (U, N) (0 where there is no edge): (out_u(corrupt) −
    out_u(clean)) · ∂metric/∂in_d summed over positions, the gradient at the clean run
    (``steps`` None) or averaged over ``steps`` runs from the corrupted input embeddings
    to the clean ones (EAP-IG), as many of them a pass's rows as fit."""
    import torch

    points: list[float | None] = [None]
    if steps is not None:
        points = [(k + 1) / steps for k in range(steps)]
    tokens = runs.clean_embedded.shape[1]
    rows = max(1, _TOKENS_PER_GRADIENT_PASS // tokens)
    total = None
    for first in range(0, len(points), rows):
        gradient = _input_gradients(runs, points[first : first + rows])
        total = gradient if total is None else total + gradient
        advance("gradient pass", min(first + rows, len(points)), len(points))
    assert total is not None
    with torch.inference_mode():
        scores = torch.einsum("tud,tnd->un", runs.difference.float(), total / len(points))
    graph = runs.wiring.graph
    return np.where(graph.edges, scores.cpu().numpy().astype(np.float64), 0.0)


def _input_gradients(runs: Runs, points: list[float | None]) -> torch.Tensor:
    """∂metric/∂in_d for every downstream node, (T, N, D) float32, summed over one pass's
    rows: a forward and a backward pass, a row per point (None: the clean run; k/N: the
    input embeddings that far from the corrupted ones to the clean ones)."""
    import torch

    wiring = runs.wiring
    leaves: list[torch.Tensor] = []
    rows = len(points)
    arguments = {
        name: value.expand(rows, *value.shape[1:]) for name, value in runs.arguments.items()
    }

    def leaf(size: int) -> Added:
        def add(_residual: torch.Tensor) -> tuple[Any, torch.Tensor]:
            # the forward's own: a layer computed again for the backward pass adds none
            shape = (rows, runs.clean_embedded.shape[1], size, runs.clean_embedded.shape[-1])
            made = torch.zeros(
                shape, dtype=runs.clean_embedded.dtype, device=runs.clean_embedded.device
            )
            leaves.append(made.requires_grad_(True))
            return slice(None), made

        return add

    def between(_module: Any, _args: tuple, _output: Any) -> torch.Tensor:
        corrupt, clean = runs.corrupt_embedded, runs.clean_embedded  # (1, T, D)
        share = torch.tensor(points, dtype=clean.dtype, device=clean.device)[:, None, None]
        return corrupt + share * (clean - corrupt)  # (R, T, D)

    with torch.enable_grad(), contextlib.ExitStack() as hooks:
        hooks.enter_context(weights_without_gradients(runs.model))
        hooks.enter_context(windowed(runs.model, arguments))
        if points != [None]:
            embeddings = runs.model.get_input_embeddings()
            hooks.enter_context(hooked(embeddings.register_forward_hook(between)))
        for layer, letter, _first, size in _groups(wiring.graph):
            hooks.enter_context(_changed_inputs(wiring, layer, letter, leaf(size)))
        logits = last_logits(runs.model, arguments)
        value = runs.metric.of(logits).sum()  # each row's gradient in its own leaves
        found = backward_to(value, leaves)
    gradients = [
        torch.zeros_like(made) if gradient is None else gradient
        for made, gradient in zip(leaves, found, strict=True)
    ]
    return torch.cat(gradients, dim=2).sum(0).float()  # (T, N, D)


def circuit_metrics(runs: Runs, kept: np.ndarray) -> list[float]:
    """The metric of the clean run with every edge outside each circuit carrying the
    corrupted value: ``kept`` (C, U, N) bool, whether each edge is in each circuit. A
    pass of one row per circuit, as the clean run was: every edge kept changes nothing,
    and gives the clean metric itself."""
    import torch

    found: list[float] = []
    for done, circuit in enumerate(kept):
        with torch.inference_mode():
            found.append(_circuit_pass(runs, circuit))
        advance("circuit", done + 1, len(kept))
    return found


def _circuit_pass(runs: Runs, kept: np.ndarray) -> float:
    """The metric with every edge outside ``kept`` (U, N) carrying the corrupted value.
    Each downstream input gets what every edge into it would carry, the corrupted
    residual less the current one (their difference is the sum of every upstream node's,
    biases cancelling), less what the kept edges carry back: out_u(corrupt) − out_u(now)
    of each kept u. A group whose every edge is kept is left as the pass computes it."""
    import torch

    wiring, graph = runs.wiring, runs.wiring.graph
    inside = graph.edges & kept
    corrupt = runs.corrupt_written  # (1, T, U, D)
    with contextlib.ExitStack() as hooks:
        written = hooks.enter_context(_written(wiring.body))

        def corrupted(point: int, first: int, size: int) -> Added:
            keep = inside[:, first : first + size]  # (U, n)
            if (keep == graph.edges[:, first : first + size]).all():
                return lambda _residual: None
            users = np.nonzero(keep.any(1))[0]
            weights = torch.as_tensor(keep[users], dtype=corrupt.dtype, device=corrupt.device)

            def add(residual: torch.Tensor) -> tuple[Any, torch.Tensor]:
                away = runs.corrupt_read[point] - residual  # (1, T, D)
                if not len(users):  # every node of the group reads the corrupted residual
                    return slice(None), away.unsqueeze(2)
                now = torch.stack([_current(graph, written, int(u)) for u in users], dim=2)
                carried = corrupt[:, :, users] - now  # (1, T, k, D)
                kept_back = torch.einsum("btkd,kn->btnd", carried, weights)  # (1, T, n, D)
                return slice(None), away.unsqueeze(2) - kept_back

            return add

        for layer, letter, first, size in _groups(graph):
            point = 2 * layer + (letter == "m")  # the logits' is 2L
            hooks.enter_context(
                _changed_inputs(wiring, layer, letter, corrupted(point, first, size))
            )
        logits = last_logits(runs.model, runs.arguments)
    return float(runs.metric.of(logits)[0])


def _current(graph: Graph, written: list[Any], upstream: int) -> torch.Tensor:
    """An upstream node's output in the pass so far, (1, T, D), from :func:`_written`'s
    slots: the input, then each layer's heads and its MLP."""
    if upstream == 0:
        return written[0][:, :, 0]
    layer, within = divmod(upstream - 1, graph.heads + 1)
    if within < graph.heads:
        return written[_slot_of_heads(layer)][:, :, within]
    return written[_slot_of_heads(layer) + 1][:, :, 0]
