"""A pretrained transformers model behind the Extractor interface."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.effects import HeadEffects
from attnviz.analysis.heads import HeadTable, statistics_product, statistics_rows
from attnviz.analysis.products import keeps_everything, of_whole, product_for, product_labels
from attnviz.asked import positions_asked
from attnviz.choices import Attention, Mode
from attnviz.circuits.driver import circuit_of
from attnviz.circuits.pairs import as_passes_read
from attnviz.circuits.passes import Here
from attnviz.errors import AttnvizError, UsageError, warn
from attnviz.extractor import PROBE_LENGTH, Extractor, Progress
from attnviz.generated import Sampling
from attnviz.inputs import Explaining, Input
from attnviz.maps import AttentionMaps
from attnviz.pretrained.activations import read_activations
from attnviz.pretrained.anatomy import anatomy_of
from attnviz.pretrained.answered import answered, effects_of, knocked_out, lensed, traced
from attnviz.pretrained.attention_modules import Family, layer_kinds, resolve_mode, stream_for
from attnviz.pretrained.encoding import (
    ModelInputs,
    Prepared,
    Side,
    attention_of,
    check_weights,
    check_whole_maps_fit,
    forward,
    model_inputs,
    on_device,
    row_tolerance,
    weights_not_finite,
)
from attnviz.pretrained.explain import explain_query
from attnviz.pretrained.fused import Layout, ProductRecorder, Unrecordable, fused_attention
from attnviz.pretrained.generation import generate
from attnviz.pretrained.labels import piece_labels, readable
from attnviz.pretrained.loading import PretrainedModel
from attnviz.pretrained.needle import run_sweep
from attnviz.pretrained.probe import probe_text
from attnviz.request import Request
from attnviz.results import Result
from attnviz.selection import resolve

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit
    from attnviz.extractor import Spec
    from attnviz.generated import Generation
    from attnviz.needle import NeedleResults, Sweep
    from attnviz.pretrained.explain import QueryExplanation


class PretrainedExtractor(Extractor):
    def __init__(self, loaded: PretrainedModel, spec: Spec) -> None:
        self.loaded = loaded
        self.spec = spec
        self.name = loaded.name

    def modules(self, mode: Mode) -> list:
        """The attention modules that give ``mode`` attention, in layer order."""
        modules = self.loaded.streams.get(stream_for(self.loaded.family, mode))
        if not modules:
            raise AttnvizError(
                f"{self.name} has no attention weights to show: its "
                f"{type(self.loaded.model).__name__} declares no modules that produce {mode} "
                "attention"
            )
        return modules

    def _check(self, request: Request) -> None:
        if request.knockout is not None:  # every input's knockout reads its answer
            anatomy_of(self.loaded)

    def _read(self, chunk: list[Input], request: Request) -> list[Result]:
        """What the request asks of one batch of inputs. Maps and statistics are read of
        the batch in one padded pass; effects and knockouts of each input with an answer,
        alone. The statistics of an input with an answer ride on its effects' clean pass
        where the model allows (:meth:`_statistics_with_effects`)."""
        if request.knockout is not None:
            return [Result(each, knockout=knocked_out(self, each, request)) for each in chunk]
        if request.trace is not None:
            return [Result(each, trace=traced(self, each, request)) for each in chunk]
        if request.lens:
            return [Result(each, lens=lensed(self, each, request)) for each in chunk]
        if request.activations is not None:
            return [
                Result(each, activations=read_activations(self, each, request)) for each in chunk
            ]
        maps: Sequence[AttentionMaps | None] = (
            self._extract_many(chunk, request) if request.maps else [None] * len(chunk)
        )
        joined: dict[int, tuple[HeadTable, HeadEffects]] = {}
        if request.statistics and request.effects:
            for index, each in enumerate(chunk):
                if each.answer is not None:
                    found = self._statistics_with_effects(each, request)
                    if found is not None:
                        joined[index] = found
        rest = [index for index in range(len(chunk)) if index not in joined]
        tables = iter(
            self._tables([chunk[i] for i in rest], request, [maps[i] for i in rest])
            if request.statistics and rest
            else []
        )
        results = []
        for index, (each, maps_of) in enumerate(zip(chunk, maps, strict=True)):
            table, effects = joined.get(index, (None, None))
            if index not in joined:
                table = next(tables) if request.statistics else None
                if request.effects and each.answer is not None:
                    effects = effects_of(self, answered(self, each, request), request)
                    table = None if table is None else table.with_effects(effects)
            results.append(Result(each, maps_of, table, effects))
        return results

    def _extract_many(self, inputs: list[Input], request: Request) -> list[AttentionMaps]:
        """Several inputs in one forward pass, right-padded to the longest.

        Padding is masked, so it gets no attention; each input's maps are then
        trimmed to its own tokens and equal what it gives on its own.
        """
        return self.maps_of(self.prepared(inputs, request), request, inputs)

    def maps_of(
        self, prepared: Prepared, request: Request, given: list[Input]
    ) -> list[AttentionMaps]:
        """The maps of a ``prepared`` batch (one forward pass), each of the ``given``
        (text, target, pair) it was encoded from: whole, or the rows or bins the request
        asks for."""
        mode, modules, layer_indices, inputs = prepared
        loaded = self.loaded
        sides = list(zip(inputs.queries, inputs.keys, strict=True))
        positions = [self._positions(request, q, k) for q, k in sides]  # (rows, span)
        wholes = [
            keeps_everything(rows, request.pool, q.length, k.length)
            for (rows, _), (q, k) in zip(positions, sides, strict=True)
        ]
        layouts = [
            Layout(
                q.length,
                k.length,
                None  # whole maps
                if whole
                else partial(product_for, rows, request.pool, queries=q.length, keys=k.length),
            )
            for whole, (rows, _), (q, k) in zip(wholes, positions, sides, strict=True)
        ]
        if request.whole and loaded.attention is not Attention.EAGER:
            check_whole_maps_fit(
                loaded, layer_indices, request.heads, inputs.arguments, eager=False
            )
        per_input, head_indices = self._computed(modules, layer_indices, inputs, request, layouts)
        tolerance = row_tolerance(loaded.model)
        results = []
        for row, (query, key) in enumerate(sides):
            text, target, pair = given[row].item
            known: dict[str, Any] = {
                "layers": layer_indices,
                "heads": head_indices,
                "mode": mode,
                "model": self.name,
                "text": text,
                "target": target,
                "pair": pair,
                "recorded": request.recorded(),
                "layer_kinds": self._layer_kinds(mode, layer_indices),
            }
            rows, known["span"] = positions[row]
            weights = per_input[row]  # (L, H, T, S), or the product asked for
            if not wholes[row]:
                results.append(self._product_maps(weights, query, key, rows, request, known))
                continue
            check_weights(
                weights,
                causal=mode is Mode.MASKED,
                name=self.name,
                tolerance=tolerance,
                distributions=request.weigh is None,
            )
            results.append(self._whole_maps(weights, query, key, request, known))
        return results

    def _whole_maps(
        self,
        weights: np.ndarray,
        query: Side,
        key: Side,
        request: Request,
        known: dict[str, Any],
    ) -> AttentionMaps:
        """One input's whole maps, its tokens labelled as the request asks (``known``: the
        fields the maps take as they are)."""
        weights, query_labels, key_labels = readable(self.loaded, weights, query, key, request)
        return AttentionMaps(
            query_tokens=query_labels.text,
            key_tokens=key_labels.text,
            weights=weights,
            query_special=query_labels.special,
            key_special=key_labels.special,
            pair_start=key_labels.pair_start(),
            **known,
        )

    def _computed(
        self,
        modules: list,
        layers: list[int],
        inputs: ModelInputs,
        request: Request,
        layouts: list[Layout],
    ) -> tuple[list[np.ndarray], list[int]]:
        """Each input's product of each layer's chosen heads, (L, ...), and the head indices:
        made block by block while the model runs its fused attention, or, where it runs
        eager attention, from the whole maps it returns."""
        fused = self._fused(modules, layers, inputs, request, layouts)
        if fused is not None:
            return fused
        stacked, heads = attention_of(
            self.loaded, modules, layers, inputs.arguments, request.heads
        )  # (L, B, H, T, S)
        batch = stacked.numpy()
        per_input = []
        for row, layout in enumerate(layouts):
            whole = batch[:, row, :, : layout.queries, : layout.keys]  # padding trimmed
            if layout.product is not None:
                whole = np.stack([of_whole(layout.made(len(heads)), grid) for grid in whole])
            per_input.append(whole)
        return per_input, heads

    def _layer_kinds(self, mode: Mode, layers: list[int]) -> list[str] | None:
        """Each of ``layers``' attention kind read in ``mode`` (None: every one global)."""
        kinds = layer_kinds(self.loaded.model.config, stream_for(self.loaded.family, mode))
        return None if kinds is None else [kinds[i] for i in layers]

    def prepared(self, inputs: list[Input], request: Request, what: str = "text") -> Prepared:
        """The mode the items are read in, its attention modules, the layers asked for and
        the forward pass's inputs (``what`` the texts are, for messages)."""
        loaded = self.loaded
        items = [each.item for each in inputs]
        modes = {
            resolve_mode(loaded.family, self.name, request.mode, target is not None)
            for _, target, _ in items
        }
        if len(modes) != 1:
            raise UsageError("a batch mixes inputs with and without a target: give every input one")
        (mode,) = modes
        if any(pair is not None for _, _, pair in items) and loaded.family is not Family.ENCODER:
            raise UsageError(
                f"{self.name} is a {loaded.family.value} model: sentence pairs (--pair) are "
                "read by encoders such as BERT; give a decoder both sentences as one text"
            )
        modules = self.modules(mode)
        layer_indices = resolve(request.layers, len(modules), "layer")
        encoded = model_inputs(loaded, items, mode, request, what)
        return Prepared(mode, modules, layer_indices, encoded)

    def _positions(
        self, request: Request, query: Side, key: Side
    ) -> tuple[list[int] | None, list[int] | None]:
        return positions_asked(
            request, query.length, key.length, query.finder("--rows"), key.finder("--span")
        )

    def _product_maps(
        self,
        weights: np.ndarray,
        query: Side,
        key: Side,
        rows: list[int] | None,
        request: Request,
        known: dict,
    ) -> AttentionMaps:
        """Maps of the rows or bins that were computed block by block, labelled."""
        query_labels = piece_labels(self.loaded, query, request.raw_pieces)
        key_labels = piece_labels(self.loaded, key, request.raw_pieces)
        labels = product_labels(
            rows,
            request.pool,
            query_labels.text,
            key_labels.text,
            query_labels.special,
            key_labels.special,
        )
        check_weights(
            weights,
            causal=known["mode"] is Mode.MASKED,
            name=self.name,
            tolerance=row_tolerance(self.loaded.model),
            positions=labels.get("query_positions"),
            distributions=request.weigh is None,
        )
        return AttentionMaps(weights=weights, **labels, **known)

    def _fused(
        self, modules: list, layers: list[int], inputs: ModelInputs, request: Request, layouts: list
    ) -> tuple[list[np.ndarray], list[int]] | None:
        """Each input's product of each layer, computed block by block while the model runs its
        fused attention, and the head indices; None where it runs eager attention instead.
        Value-weighted maps are always computed block by block, from the values the model's
        attention is given (its eager attention's, with --attention eager)."""
        loaded = self.loaded
        eager = loaded.attention is Attention.EAGER
        if eager and request.weigh is None:
            return None
        arguments = on_device(loaded, inputs.arguments)
        try:
            with forward(loaded):
                per_input, chosen = fused_attention(
                    loaded.model,
                    modules,
                    layers,
                    arguments,
                    request.heads,
                    layouts,
                    loaded.memory,
                    weigh=request.weigh is not None,
                    eager=eager,
                )
        except Unrecordable as error:
            if request.weigh is not None:
                refused = f"--weigh {request.weigh} cannot read {self.name}: {error}"
                raise UsageError(refused) from None
            if loaded.attention is Attention.FUSED:
                raise UsageError(
                    f"--attention fused cannot read {self.name}: {error}; use --attention eager"
                ) from None
            warn(
                f"{self.name}: {error}, which attnviz cannot compute block by block: reading "
                "it with eager attention"
            )
            return None
        # One layer's maps become (1, …) as a view: a long input's are not copied.
        stacked = [_stacked(layers_of) for layers_of in per_input]
        return stacked, chosen

    def _tables(
        self, inputs: list[Input], request: Request, maps: Sequence[AttentionMaps | None]
    ) -> list[HeadTable]:
        """The statistics of a batch: of its maps where they were read, of maps reshaped
        first (--words, --no-special), or summed block by block in one pass."""
        if request.maps:
            return [HeadTable.of(each) for each in maps if each is not None]
        if request.words or not request.special:
            return list(map(HeadTable.of, self._extract_many(inputs, request)))
        mode, modules, layers, encoded = self.prepared(inputs, request)
        tables = _Tables(self, mode, layers, encoded, request)
        per_input, heads = self._computed(modules, layers, encoded, request, tables.layouts)
        return tables.made(per_input, heads)

    def _statistics_with_effects(
        self, given: Input, request: Request
    ) -> tuple[HeadTable, HeadEffects] | None:
        """The heads' statistics of ``text`` and their effects on ``answer``, from one
        encoding of the text and one clean pass, which records the statistics block by
        block as the effects' passes begin from it. None where the statistics are not
        recorded so (eager attention; maps reshaped into words or without special tokens;
        attention computed outside transformers' functions): two passes then."""
        if self.loaded.attention is Attention.EAGER or request.words or not request.special:
            return None
        asked = answered(self, given, request)
        tables = _Tables(self, asked.mode, asked.layers, asked.inputs, request)
        recorder = ProductRecorder(
            self.loaded.model,
            asked.modules,
            asked.layers,
            request.heads,
            tables.layouts,
            self.loaded.memory,
        )
        effects = effects_of(self, asked, request, recorder.recording(asked.arguments))
        try:
            per_input, heads = recorder.results()
        except Unrecordable:
            return None
        stacked = [_stacked(layers_of) for layers_of in per_input]
        (table,) = tables.made(stacked, heads)
        return table.with_effects(effects), effects

    def detection_probe(self, length: int = PROBE_LENGTH, seed: int = 0) -> str:
        """Random whole-word tokens of the model's vocabulary, each read back as one token
        (TransformerLens draws from the whole vocabulary; a text needs words)."""
        return probe_text(self.loaded, length, seed)

    def _generate(self, prompt: str, sampling: Sampling, request: Request) -> Generation:
        return generate(self, prompt, sampling, request)

    def _read_circuit(
        self, pairs: list[Input], request: Request, names: list[str] | None
    ) -> Circuit:
        assert request.circuit is not None  # run's
        read = as_passes_read(pairs, request.circuit)
        return circuit_of(Here(self, request, read, names), request.circuit, pairs)

    def _needle(self, sweep: Sweep, haystack: str | None, progress: Progress) -> NeedleResults:
        return run_sweep(self.loaded, sweep, haystack, progress)

    def _explain(self, asked: Explaining) -> QueryExplanation:
        family = self.loaded.family
        chosen = resolve_mode(family, self.name, asked.mode, asked.target is not None)
        return explain_query(
            self,
            asked.text,
            mode=chosen,
            target=asked.target,
            layer=asked.layer,
            head=asked.head,
            query=asked.query or 0,
            raw_pieces=asked.raw_pieces,
        )


class _Tables:
    """The head tables of encoded inputs: the layout of each input's statistics, and the
    tables made of the products computed with them."""

    def __init__(
        self,
        extractor: PretrainedExtractor,
        mode: Mode,
        layers: list[int],
        inputs: ModelInputs,
        request: Request,
    ) -> None:
        self.name, self.mode, self.layers = extractor.name, mode, layers
        self.kinds = extractor._layer_kinds(mode, layers)
        sides = list(zip(inputs.queries, inputs.keys, strict=True))
        self.positions = [extractor._positions(request, query, key) for query, key in sides]
        self.labels = [
            piece_labels(extractor.loaded, key, request.raw_pieces) for key in inputs.keys
        ]
        self.keys = inputs.keys
        self.layouts = [
            Layout(
                query.length,
                key.length,
                statistics_product(mode, query.length, labels.text, labels.special, *asked),
            )
            for (query, key), labels, asked in zip(sides, self.labels, self.positions, strict=True)
        ]

    def made(self, per_input: list[np.ndarray], heads: list[int]) -> list[HeadTable]:
        for summed, key in zip(per_input, self.keys, strict=True):
            # (L, H, statistics + keys): the weight each key received is finite in any map
            broken = ~np.isfinite(summed[..., -key.length :]).all(axis=(1, 2))
            if broken.any():
                raise weights_not_finite(self.name, self.layers[int(np.argmax(broken))])
        return [
            HeadTable(
                self.name,
                self.mode,
                key.length,
                statistics_rows(summed, self.layers, heads, labels.text, self.kinds),
                rows,
                span,
            )
            for summed, key, labels, (rows, span) in zip(
                per_input, self.keys, self.labels, self.positions, strict=True
            )
        ]


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0][None] if len(arrays) == 1 else np.stack(arrays)
