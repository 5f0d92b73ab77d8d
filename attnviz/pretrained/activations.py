"""Activations of a model's stack read and edited by name in one pass (the names:
:mod:`attnviz.activations`; the stack is the mode's,
:func:`~attnviz.pretrained.anatomy.stack_anatomy`). Each edit is installed where its
site is computed, then each read, so that what is read is the edited run's; only the
positions asked are kept, so that a long text's pass holds no more than the model's own.
A layer whose pattern is read or edited runs its eager attention besides its own (the
weights exist nowhere else); where they are edited, its heads' output is those weights
times its values. Every other output is the model's own.

Shape letters: T tokens, P positions kept, W a module tensor's width, U a site's units in
a layer (heads, or 1), Dh a unit's size, H query heads, S keys, V the vocabulary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attnviz.activations import Activations, Named, parsed
from attnviz.asked import positions_asked
from attnviz.choices import Ablation, Mode, Site
from attnviz.errors import UsageError
from attnviz.pretrained.anatomy import Anatomy, stack_anatomy
from attnviz.pretrained.answered import CORRUPTED, answered
from attnviz.pretrained.encoding import forward, on_device
from attnviz.pretrained.fused import eager_attention, own_attention
from attnviz.pretrained.implementations import running
from attnviz.pretrained.labels import piece_labels
from attnviz.pretrained.sites import (
    MLP_WRITTEN,
    SITES,
    SitePoint,
    editing,
    given_back_each_layer,
    hooked,
    reading,
    units_of,
)
from attnviz.selection import resolve

if TYPE_CHECKING:
    import torch

    from attnviz.inputs import Input
    from attnviz.pretrained.reader import ModelReader
    from attnviz.request import Request

_ACTIVATIONS = "attnviz_activations"  # the attention implementation's name during a pass
Change = Callable[["torch.Tensor"], "torch.Tensor"]  # a site's value (T, …) -> its edit


def read_activations(extractor: ModelReader, given: Input, request: Request) -> Activations:
    """What ``request.activations`` names, read of one text in one pass with
    ``request.edits`` installed; the answer's metric in that run where the text has one."""
    loaded = extractor.loaded
    assert request.activations is not None  # asked of a request that reads them
    cross = False
    if given.answer is not None:
        asked = answered(extractor, given, request)
        body, layers, side, metric = asked.body, asked.layers, asked.side, asked.metric
        arguments, twin = asked.arguments, asked.corrupt_arguments
    else:
        mode, modules, layers, inputs = extractor.prepared([given], request)
        body = stack_anatomy(loaded, [module for module, _ in modules])
        cross = mode is Mode.CROSS
        side, metric = inputs.queries[0], None
        arguments = on_device(loaded, inputs.arguments)
        twin = None if given.corrupt is None else _twin(extractor, request, given, inputs)
    sites = _Sites(body, layers, side.length, cross)
    reads = [each for name in request.activations for each in sites.resolved(name)]
    if body.unembedding is None and any(at.site is None for at in reads):
        raise UsageError(
            f"{extractor.name} reads no next token: the logits are a causal language model's "
            "(its last layer's resid_post is what this stack gives)"
        )
    edits = [
        (at, edit) for name, edit in (request.edits or {}).items() for at in sites.resolved(name)
    ]
    rows, _ = positions_asked(
        request, side.length, side.length, side.finder("--rows"), side.finder("--span")
    )
    positions = list(range(side.length)) if rows is None else rows
    sites.check_patterns([at for at, _ in edits] + reads, loaded.memory, loaded.model.dtype)
    patched: dict[str, Any] = {}
    patches = [at for at, edit in edits if edit is Ablation.PATCH]
    if patches:
        if twin is None:
            raise UsageError(
                "a patch puts the run on another text's value at the site: give patch_from "
                "(--corrupt), a text of as many tokens"
            )
        with forward(loaded):
            patched, _ = _run(loaded.model, sites, twin, patches, [], list(range(side.length)))
    changes = [(at, _change(at, edit, patched)) for at, edit in edits]
    with forward(loaded):
        values, last = _run(loaded.model, sites, arguments, reads, changes, positions)
    measured = None
    if metric is not None:
        measured = float(metric.of(last[None].float())[0])
    return Activations(
        extractor.name,
        tuple(piece_labels(loaded, side, request.raw_pieces).text),
        tuple(positions),
        values,
        last,
        measured,
        tuple(request.edits or ()),
    )


@dataclass(frozen=True)
class _Sites:
    """The model's sites by name: each name's layers resolved among ``layers`` asked."""

    body: Anatomy
    layers: list[int]
    tokens: int
    cross: bool = False  # the keys and values are the source's tokens, not the queries'

    def kept(self, at: Named, positions: list[int]) -> list[int] | None:
        """The positions of ``at``'s value kept (None: all): the queries asked, or every
        key of a cross-attention's keys and values."""
        return None if self.cross and at.site in (Site.K, Site.V) else positions

    def resolved(self, name: str) -> list[Named]:
        """The sites ``name`` stands for, each at one layer (a bare site at every layer
        asked); a layer or a head the model has not, a usage error naming its range."""
        named = parsed(name)
        if named.site is None:
            return [named]
        if named.layer is None:
            return [named.at(layer) for layer in self.layers]
        (layer,) = resolve(named.layer, len(self.body.blocks), "layer")
        if named.head is not None:
            resolve(named.head, self.body.heads, "head")
        return [replace(named, layer=layer)]

    def check_patterns(self, sites: list[Named], memory: int, dtype: Any) -> None:
        """Refuse a pattern at a length where one head's whole weights outgrow ``memory``
        (the block budget of a long text's reading)."""
        if not any(at.site is Site.PATTERN for at in sites):
            return
        needed = self.tokens * self.tokens * dtype.itemsize
        if needed > memory:
            raise UsageError(
                f"a pattern of {self.tokens:,} tokens takes {needed / 2**20:,.0f} MiB a head, "
                f"past the {memory / 2**20:,.0f} MiB a block may take: read its rows with "
                "extract(rows=...) (attnviz show --rows), which runs block by block, or raise "
                "--memory"
            )


def _twin(extractor: ModelReader, request: Request, given: Input, inputs: Any) -> dict[str, Any]:
    """The forward pass's arguments of the text's corrupted twin (its target and pair kept),
    refused unless every side has as many tokens as the text's."""
    assert given.corrupt is not None  # a twin is asked
    twin = replace(given, text=given.corrupt, corrupt=None)
    *_, twin_inputs = extractor.prepared([twin], request, CORRUPTED)
    for mine, its in zip(
        inputs.queries + inputs.keys, twin_inputs.queries + twin_inputs.keys, strict=True
    ):
        if mine.length != its.length:
            raise UsageError(
                f"the {CORRUPTED} is {its.given_length} tokens and the text "
                f"{mine.given_length}: a patch puts each position's value into the same "
                "position, so the two must have as many tokens"
            )
    return on_device(extractor.loaded, twin_inputs.arguments)


def _change(at: Named, edit: Any, patched: dict[str, Any]) -> Change:
    """The function putting ``edit`` at the site: a word's, a tensor's or the caller's."""
    import torch

    along = 1 if at.site is Site.PATTERN else 0  # the positions' axis of the site's value

    def change(value: torch.Tensor) -> torch.Tensor:
        if edit is Ablation.ZERO:
            return torch.zeros_like(value)
        if edit is Ablation.MEAN:
            return value.mean(along, keepdim=True).expand_as(value)
        if edit is Ablation.PATCH:
            return patched[at.name]
        found = edit(value) if callable(edit) else edit
        return _checked(at.name, found, value, "gave" if callable(edit) else "is")

    return change


def _checked(name: str, found: Any, value: torch.Tensor, verb: str) -> torch.Tensor:
    """An edit's value as the site holds it (broadcast, in its dtype, on its device), or a
    usage error naming the site: not a float tensor, another shape, or not finite."""
    import numpy as np
    import torch

    if isinstance(found, np.ndarray):
        found = torch.from_numpy(found)
    if not isinstance(found, torch.Tensor) or not found.is_floating_point():
        kind = found.dtype if isinstance(found, torch.Tensor) else type(found).__name__
        raise UsageError(f"the edit of {name} {verb} {kind}: it must be a float tensor")
    try:
        broadcast = torch.broadcast_shapes(found.shape, value.shape)
    except RuntimeError:
        broadcast = None
    if broadcast != value.shape:
        raise UsageError(
            f"the edit of {name} {verb} {tuple(found.shape)}: the site holds "
            f"{tuple(value.shape)} here (or a shape that broadcasts to it)"
        )
    if not bool(torch.isfinite(found).all()):
        raise UsageError(f"the edit of {name} {verb} NaN or infinity: a run cannot go on from it")
    return found.to(value.device, value.dtype).expand(value.shape)


def _run(
    model: Any,
    sites: _Sites,
    arguments: dict[str, Any],
    reads: list[Named],
    changes: list[tuple[Named, Change]],
    positions: list[int],
) -> tuple[dict[str, Any], Any]:
    """One pass with ``changes`` installed: each read's value at ``positions``, and the last
    position's logits, (V,) (None for a stack that reads no next token)."""
    import torch

    kept: dict[str, Any] = {}
    body = sites.body
    with contextlib.ExitStack() as hooks, torch.no_grad():
        for at, change in changes:
            if at.site is not Site.PATTERN:
                hooks.enter_context(_editing(body, at, change))
        for at in reads:
            if at.site is not None and at.site is not Site.PATTERN:
                assert at.layer is not None  # resolved
                keeper = _keeper(body, at, sites.kept(at, positions), kept)
                for handle in reading(body, _point(at), at.layer, keeper):
                    hooks.enter_context(hooked(handle))
        patterns = [at for at in reads if at.site is Site.PATTERN]
        edited = _pattern_changes(changes)
        if patterns or edited:
            attention = _attention(body, patterns, edited, positions, kept)
            hooks.enter_context(_running(model, attention))
        hooks.enter_context(given_back_each_layer(model, body, sites.tokens))
        if body.unembedding is None:  # a stack with no next token to read: its own pass
            model(**arguments)
            return {at.name: kept[at.name] for at in reads}, None
        logits = _logits(model, arguments, positions, any(at.site is None for at in reads))
    for at in reads:
        if at.site is None:
            kept[at.name] = logits[: len(positions)]
    return {at.name: kept[at.name] for at in reads}, logits[-1]


def _logits(model: Any, arguments: dict[str, Any], positions: list[int], all_asked: bool) -> Any:
    """The logits at ``positions`` (where they are asked) and at the last position, (P + 1,
    V) or (1, V): only those are computed where the model can leave the others out."""
    import inspect

    import torch

    tokens = int(arguments["input_ids"].shape[1])
    wanted = [*positions, tokens - 1] if all_asked else [tokens - 1]
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        keep = torch.tensor(wanted, device=arguments["input_ids"].device)
        return model(**arguments, use_cache=False, logits_to_keep=keep).logits[0]
    return model(**arguments, use_cache=False).logits[0, wanted]


def _keeper(
    body: Anatomy, at: Named, positions: list[int] | None, kept: dict[str, Any]
) -> Callable:
    """A reading's callback keeping the site's value at ``positions`` (None: all), shaped."""
    assert at.site is not None and at.layer is not None

    def keep(value: torch.Tensor, _graph: torch.Tensor) -> None:
        shaped = _shaped(body, at, value[0])
        kept[at.name] = (shaped if positions is None else shaped[positions]).detach().clone()

    return keep


def _shaped(body: Anatomy, at: Named, tensor: torch.Tensor) -> torch.Tensor:
    """A module's (T, W) tensor as the site holds it: (T, D), (T, U, Dh) or a head's (T, Dh)."""
    assert at.site is not None and at.layer is not None
    units = units_of(body, at.site, at.layer, tensor.shape[-1])
    value = tensor[:, units.of(at.head)]
    if at.head is None and SITES[at.site].per_head:
        return value.reshape(value.shape[0], units.count, units.size)
    return value


def _editing(body: Anatomy, at: Named, change: Change) -> contextlib.ExitStack:
    """Hooks putting ``change`` of the site's value (shaped as it is read) in its place."""
    site, layer = at.site, at.layer
    assert site is not None and layer is not None  # resolved, and no logits

    def edit(tensor: torch.Tensor) -> torch.Tensor:  # (1, T, W), a copy of the module's
        columns = units_of(body, site, layer, tensor.shape[-1]).of(at.head)
        new = change(_shaped(body, at, tensor[0]))
        tensor[0, :, columns] = new.reshape(new.shape[0], -1).to(tensor.dtype)
        return tensor

    return editing(body, _point(at), layer, edit)


def _point(at: Named) -> Site | SitePoint:
    """Where ``at`` is read and edited: its site, or the circuit graph's MLP node."""
    assert at.site is not None  # no logits
    return MLP_WRITTEN if at.written else at.site


def _pattern_changes(changes: list[tuple[Named, Change]]) -> dict[int, Change]:
    """Each layer's pattern edits, one after the other as they were given."""
    by_layer: dict[int, Change] = {}
    for at, change in changes:
        if at.site is Site.PATTERN:
            assert at.layer is not None  # resolved
            before = by_layer.get(at.layer)
            by_layer[at.layer] = change if before is None else _after(before, change)
    return by_layer


def _after(first: Change, then: Change) -> Change:
    return lambda value: then(first(value))


def _attention(
    body: Anatomy,
    patterns: list[Named],
    edited: dict[int, Change],
    positions: list[int],
    kept: dict[str, Any],
) -> Callable[..., Any]:
    """An attention function running the model's own attention; at a layer whose pattern
    is read or edited, its eager attention's weights (1, H, T, S) besides, and where they
    are edited, the heads' output those weights times the values."""
    layer_of = {id(module): layer for layer, module in enumerate(body.attentions)}
    read = {at.layer for at in patterns}

    def attention(module, query, key, value, mask, *args, **kwargs):
        layer = layer_of.get(id(module))
        if layer not in read and layer not in edited:
            return own_attention(module, query, key, value, mask, *args, **kwargs)
        weights = eager_attention(module, query, key, value, mask, *args, **kwargs)[1]
        # the model's own output where the weights are only read: the run is the model's
        output = own_attention(module, query, key, value, mask, *args, **kwargs)[0]
        if layer in edited:
            weights = edited[layer](weights[0])[None].to(value.dtype)  # (1, H, T, S)
            grouped = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
            output = (weights @ grouped).transpose(1, 2).contiguous()  # (1, T, H, Dh)
        for at in patterns:
            if at.layer == layer:
                kept[at.name] = weights[0][:, positions].detach().clone()  # (H, P, S)
        return output, weights

    return attention


@contextlib.contextmanager
def _running(model: Any, attention: Callable[..., Any]) -> Iterator[None]:
    """``attention`` in place of the model's own for one pass, with the masks the fused
    kernel takes."""
    from transformers.masking_utils import sdpa_mask

    with running(model, _ACTIVATIONS, attention, sdpa_mask):
        yield
