"""Every edge's score estimated from gradients (:mod:`attnviz.circuits.edges`' graph):
edge attribution patching (EAP, Syed et al. 2023), its integrated gradients (EAP-IG,
Hanna et al. 2024) and relevance patching (RelP, Rezaei Jafari et al. 2025: EAP's passes,
the backward by relevance propagation's rules), from forward and backward passes that
copy no downstream input.

Shape letters: R rows of a pass (its points), T tokens, S the positions from the first
where the twins differ on (before it every difference is 0), U upstream nodes, N downstream
nodes, n the nodes of one group, D the model's width, Dh a head's size.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import CircuitMethod, Site
from attnviz.circuits.ablated import interpolated
from attnviz.circuits.differences import matrix_of
from attnviz.circuits.edges import QKV, Runs, Wiring
from attnviz.circuits.graph import LOGITS, READS
from attnviz.circuits.spans import Spans
from attnviz.memory import block_size
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.backward_pass import (
    backward_to,
    recomputed_when_long,
    recomputes,
    weights_without_gradients,
)
from attnviz.pretrained.effects import last_logits
from attnviz.pretrained.frozen_norms import NormForm, form_of
from attnviz.pretrained.relevance import RELP, Rule, relevance_rules
from attnviz.pretrained.sites import SITES, hidden_of, hooked, output_of, units_of
from attnviz.pretrained.windowed import windowed
from attnviz.progress import FirstPart, advance

if TYPE_CHECKING:
    import torch

_TOKENS_PER_GRADIENT_PASS = 512  # rows × tokens of one of EAP-IG's passes: its points


# The propagation rules each method's backward follows (the others: autograd's own)
_RULES = {CircuitMethod.RELP: RELP}


def rules_of(method: CircuitMethod) -> frozenset[Rule]:
    """The relevance rules ``method``'s gradient passes follow: none but RelP's."""
    return _RULES.get(method, frozenset())


# A row of a gradient pass: None, the clean run; a share s, the input embeddings s of the
# way from the corrupted ones to the clean ones; (group, s), that group of nodes' outputs
# s of the way from their ablated values to their clean ones (ablated.interpolated).
Point = float | tuple[int, float] | None


def estimated_scores(
    runs: Runs,
    steps: int | None = None,
    told: FirstPart | None = None,
    rules: frozenset[Rule] = frozenset(),
    spans: Spans | None = None,
) -> np.ndarray:
    """Every edge's estimated score, (U, N) (0 where there is no edge): (out_u(corrupt) −
    out_u(clean)) · ∂metric/∂in_d summed over positions, the gradient at the clean run
    (``steps`` None) or averaged over ``steps`` runs from the corrupted input embeddings
    to the clean ones (EAP-IG); where the nodes are ablated (no corrupted text), over
    ``steps`` runs for each group of nodes in turn (the input, each layer's heads, its
    MLP), its outputs moved from their ablated values to their clean ones (EAP-IG's
    activations: (1 + 2 × layers) × ``steps`` runs). With ``rules``, the gradient is
    relevance propagation's, rule by rule (:mod:`attnviz.pretrained.relevance`: RelP).
    With ``spans``, each span's share, (K, U, N): the sum over its positions alone. As
    many runs a pass's rows as fit (``told`` hears how long the first pass took)."""
    import torch

    points: list[Point] = [None]
    shares = [] if steps is None else [(k + 1) / steps for k in range(steps)]
    if steps is not None and runs.ablated is None:
        points = list(shares)
    elif steps is not None:
        groups = 1 + 2 * runs.wiring.graph.layers
        points = [(group, share) for group in range(groups) for share in shares]
    tokens = runs.clean_embedded.shape[1]
    rows = max(1, _TOKENS_PER_GRADIENT_PASS // tokens)
    graph = runs.wiring.graph
    whole = spans is None
    spans = spans or Spans(("every position",), (0,) * tokens)
    total = torch.zeros(  # (K, U, N)
        (len(spans.names), *graph.edges.shape), device=runs.clean_embedded.device
    )
    started = time.monotonic()
    for first in range(0, len(points), rows):
        _gradient_pass(runs, points[first : first + rows], total, rules, spans)
        advance("gradient pass", min(first + rows, len(points)), len(points))
        if first == 0 and told is not None:
            told(time.monotonic() - started, min(rows, len(points)), len(points))
    scores = np.where(graph.edges, (total / len(points)).cpu().numpy().astype(np.float64), 0.0)
    return scores[0] if whole else scores


def _gradient_pass(
    runs: Runs, points: list[Point], total: torch.Tensor, rules: frozenset[Rule], spans: Spans
) -> None:
    """One forward and one backward pass, a row per point (:data:`Point`), adding to
    ``total`` (K, U, N) every edge's difference · ∂metric/∂in_d summed over the rows, each
    span's positions into its own.

    No downstream input is copied: at every point each one equals the residual its group
    reads, so ∂metric/∂in_d is the group's norm's backward (at that residual) of what the
    group's read gives back: a head's rows of its projection times the gradient of its
    columns, or the gradient of the norm's output (MLPs, logits). The groups reading one
    residual (a layer's queries, keys and values) are scored together as soon as their
    gradients have arrived in the backward pass, which keeps no (T, N, D)."""
    import torch

    body = runs.wiring.body
    arguments = {name: value.expand(len(points), -1) for name, value in runs.arguments.items()}
    readings = _readings(runs.wiring, runs.clean_embedded)
    scores = _PointScores(runs, readings, total, Rule.NORM in rules, spans)
    read: set[int] = set()  # the groups whose gradient is awaited
    leaf: list[torch.Tensor] = []

    # Where layers are computed again in the backward pass, a layer's residuals are taken
    # then, just before its gradients arrive, not kept from the forward (L × (T, D)).
    again = recomputes(runs.model, arguments)
    backward: list[bool] = []

    final = readings[-1].point  # the final norm's, whose input is never computed again

    def keep_residual(point: int) -> Callable:
        def keep(_module: Any, args: tuple, kwargs: dict) -> None:
            inside_layer = point < final
            if again and inside_layer and not backward:
                return
            if backward or point not in scores.residuals:  # else a forward's own, read again
                # whole: a slice would be an operation more than a recomputed layer's count
                scores.residuals[point] = hidden_of(args, kwargs).detach()

        return keep

    def awaiting(group: int, reading: _Reading) -> Callable:
        def keep(_module: Any, _args: tuple, output: Any) -> None:
            value = output_of(output)
            if group in read or not value.requires_grad:
                return
            read.add(group)
            scores.awaited[reading.point] += 1
            value.register_hook(lambda gradient: scores.arrive(group, gradient))

        return keep

    with torch.enable_grad(), contextlib.ExitStack() as hooks:
        hooks.enter_context(weights_without_gradients(runs.model))
        # first: the hooks below read what the rules' hooks give
        hooks.enter_context(relevance_rules(runs.model, body, rules))
        hooks.enter_context(recomputed_when_long(runs.model, body, arguments))
        hooks.enter_context(windowed(runs.model, arguments))
        embeddings = runs.model.get_input_embeddings()
        hooks.enter_context(hooked(embeddings.register_forward_hook(_start(runs, points, leaf))))
        moved = [point for point in points if isinstance(point, tuple)]
        if moved:  # before the hooks that keep what the readings read
            assert runs.ablated is not None  # only ablated runs move a group's outputs
            hooks.enter_context(interpolated(body, runs.ablated, moved))
        for group, reading in enumerate(readings):
            keep = keep_residual(reading.point)  # a point read by several groups: kept once
            hooks.enter_context(
                hooked(reading.norm.register_forward_pre_hook(keep, with_kwargs=True))
            )
            watch = awaiting(group, reading)
            hooks.enter_context(hooked(reading.module.register_forward_hook(watch)))
        logits = last_logits(runs.model, arguments)
        value = runs.metric.of(logits).sum()  # each row's gradient through its own run
        backward.append(True)
        backward_to(value, leaf)
        scores.finish()


class _PointScores:
    """Each read point's scores, taken once the gradients of the groups reading it have
    arrived: one norm backward and one contraction for the point's nodes together."""

    def __init__(
        self,
        runs: Runs,
        readings: list[_Reading],
        total: torch.Tensor,
        divisor_held: bool,
        spans: Spans,
    ) -> None:
        self.body, self.graph = runs.wiring.body, runs.wiring.graph
        self.divisor_held = divisor_held  # RelP's LN-rule: the norms' divisors constant
        self.spans = spans
        self.start, self.stop = runs.start, runs.stop  # the positions scored
        self.differences, self.total = runs.differences, total
        self.readings = readings
        self.members = collections.defaultdict(list)  # each point's groups, in order
        for group, reading in enumerate(readings):
            self.members[reading.point].append(group)
        self.residuals: dict[int, torch.Tensor] = {}  # each read point's input, (R, T, D)
        self.awaited: collections.Counter[int] = collections.Counter()  # groups per point
        self.arrived: dict[int, dict[int, torch.Tensor]] = collections.defaultdict(dict)

    def arrive(self, group: int, gradient: torch.Tensor) -> None:
        """A group's gradient, (R, T, W): its point scored if it was the last awaited."""
        point = self.readings[group].point
        self.arrived[point][group] = gradient
        if len(self.arrived[point]) == self.awaited[point]:
            self._score(point)

    def finish(self) -> None:
        """Score the points some of whose groups got no gradient (0 for those)."""
        for point in list(self.arrived):
            self._score(point)

    def _score(self, point: int) -> None:
        import torch

        arrived = self.arrived.pop(point)
        members = self.members[point]
        first = self.readings[members[0]].first  # the point's nodes: contiguous downstream
        size = sum(self.readings[group].size for group in members)
        before = self.graph.readable(first)  # the upstream nodes before them
        into = self.total[:, :before, first : first + size]  # (K, u, n)
        residual = self.residuals.pop(point)[:, self.start : self.stop]  # (R, S, D)
        form = self.readings[members[0]].form
        rows, tokens, width = residual.shape
        widened = before if self.differences.compact else 0  # the rows widened at once
        at_once = block_size(_ELEMENTS_AT_ONCE, residual.device)
        step = max(1, at_once // (max(rows * size, widened) * width))
        for at in range(0, tokens, step):  # positions a block at a time: no copy of every
            piece = residual[:, at : at + step]  # position's (R, S, n, D)
            block = slice(self.start + at, self.start + at + piece.shape[1])
            given = [  # (R, s, n, D) each: what the norm's output gets back
                self.readings[group].given(self.body, arrived[group][:, block])
                if group in arrived
                else piece.new_zeros(rows, piece.shape[1], self.readings[group].size, width)
                for group in members
            ]
            gradients = torch.cat(given, 2)
            inputs = form.backward(piece, gradients, self.divisor_held).sum(0)  # (s, n, D)
            difference = self.differences.rows(before, slice(at, at + step))
            for span, begin, end in self.spans.stretches(block.start, block.stop):
                part = slice(begin - block.start, end - block.start)  # of the block's
                into[span] += _contracted(difference[:, part], inputs[part])


def _start(runs: Runs, points: list[Point], leaf: list[Any]) -> Callable:
    """A hook on the input embeddings giving the pass's start, kept in ``leaf``: the
    clean run's embeddings (points None, or a group's outputs moved), or each row's
    between the corrupted and the clean ones, (R, T, D); every activation above depends
    on it, whether or not the weights ask for gradients."""
    import torch

    def start(_module: Any, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        if not isinstance(points[0], float):
            leaf.append(output.detach().requires_grad_(True))
        else:
            corrupt, clean = runs.corrupt_embedded, runs.clean_embedded  # (1, T, D)
            share = torch.tensor(points, dtype=clean.dtype, device=clean.device)[:, None, None]
            leaf.append((corrupt + share * (clean - corrupt)).requires_grad_(True))
        return leaf[-1]

    return start


@dataclass(frozen=True)
class _Reading:
    """How a group of downstream nodes reads the residual stream: through ``norm`` (its
    input the residual at ``point``: a layer's heads 2l, its MLP 2l + 1, the logits 2L),
    then ``module``, whose output's gradient the group's is computed from; the group's
    ``size`` nodes are downstream nodes ``first``…; ``site`` Q, K or V for heads."""

    norm: Any
    form: NormForm
    module: Any
    point: int
    first: int
    size: int
    layer: int
    site: Site | None

    def given(self, body: Anatomy, gradient: torch.Tensor) -> torch.Tensor:
        """What the norm's output gets back from ``gradient``, the gradient of
        ``module``'s output, for each node of the group: (R, T, n, D)."""
        import torch

        if self.site is None:  # the norm's own output, read whole
            return gradient.unsqueeze(2)
        units = units_of(body, self.site, self.layer, gradient.shape[-1])
        matrix = matrix_of(self.module, gradient.dtype)[:, units.columns]  # (D, n × Dh)
        rows_of = matrix.view(matrix.shape[0], units.count, units.size)  # (D, n, Dh)
        per_unit = gradient[..., units.columns].unflatten(-1, (units.count, units.size))
        return torch.einsum("rtnh,dnh->rtnd", per_unit, rows_of)


def _readings(wiring: Wiring, like: torch.Tensor) -> list[_Reading]:
    """Every group's reading, in the order of the graph's groups; each norm's form read from a probe
    (as wide as ``like``, on its device and in its dtype) once for each class of norm."""
    import torch

    body, found = wiring.body, []
    kinds: dict[type, NormForm] = {}
    forms: dict[Any, NormForm] = {}  # each norm's: a layer's queries, keys, values share one

    def form(norm: Any) -> NormForm:
        if type(norm) not in kinds:
            probe = torch.linspace(-1.0, 2.0, like.shape[-1], device=like.device, dtype=like.dtype)
            with torch.no_grad():
                kinds[type(norm)] = form_of(norm, probe, norm.forward(probe))
        if norm not in forms:
            forms[norm] = kinds[type(norm)].like(norm)
        return forms[norm]

    for layer, letter, first, size, point in wiring.graph.groups():
        if letter in READS:
            site = QKV[letter]
            norm, module = wiring.attention_norms[layer], SITES[site].module(body, layer)
            reading = _Reading(norm, form(norm), module, point, first, size, layer, site)
        else:
            norm = body.norm if letter == LOGITS else wiring.mlp_norms[layer]
            reading = _Reading(norm, form(norm), norm, point, first, size, layer, None)
        found.append(reading)
    return found


_ELEMENTS_AT_ONCE = 2**22  # of a group's (R, T, n, D) gradients, a block of positions,
# and of the upstream nodes' differences widened to float32 at a time


def _contracted(difference: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """Σ over positions and width of ``difference`` (U, S, D), a block of positions of the
    whole, times ``gradient`` (S, n, D): (U, n) float32, one matrix product (nodes a part
    of _ELEMENTS_AT_ONCE at a time where the model's dtype is narrower: no float32 copy
    of the whole)."""
    import torch

    flat = gradient.float().transpose(0, 1).flatten(1)  # (n, S × D)
    if difference.dtype == torch.float32:
        return difference.flatten(1) @ flat.T
    nodes = max(1, block_size(_ELEMENTS_AT_ONCE, flat.device) // max(1, flat.shape[1]))
    parts = [part.flatten(1).float() @ flat.T for part in difference.split(nodes)]
    return torch.cat(parts)
