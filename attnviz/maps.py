"""AttentionMaps: the data every command produces and every renderer reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.grid import attention_problem, keep, one_sequence
from attnviz.analysis.products import keeps_everything, of_whole, product_for, product_labels
from attnviz.choices import Aggregate, Mode, Weighting
from attnviz.data_formats import fields_of, plain_weights
from attnviz.errors import SchemaError, UsageError
from attnviz.maps_conveniences import MapsConveniences
from attnviz.request import Recorded
from attnviz.schema import envelope
from attnviz.selection import check_pool, index_span

if TYPE_CHECKING:
    from attnviz.selection import Selection

_REPR_TEXT = 40  # characters of the text that repr shows
BETWEEN = ("a-b", "b-a", "a-a", "b-b")  # rows of one sentence of a pair, columns of the other


def numbered(tokens: Sequence[str]) -> list[str]:
    """Each label that occurs more than once, followed by ``·`` and its position."""
    counts = Counter(tokens)
    return [f"{token}·{i}" if counts[token] > 1 else token for i, token in enumerate(tokens)]


@dataclass(eq=False)
class AttentionMaps(MapsConveniences):
    """Attention weights of selected layers and heads for one input.

    ``weights[i, j]`` is the map of layer ``layers[i]``, head ``heads[j]``: rows
    are query tokens, columns key tokens, each row a probability distribution
    (unless ``weighting`` says what the weights were multiplied by).
    When ``aggregate`` is set, the maps of ``heads`` (and of ``layers``, for the
    aggregates that fold layers too) were combined into one, and that axis has
    length 1.
    """

    query_tokens: list[str]
    key_tokens: list[str]
    weights: np.ndarray  # (layers, heads, len(query_tokens), len(key_tokens)), float32 or float16
    layers: list[int]
    heads: list[int]
    mode: Mode
    model: str
    text: str = ""
    target: str | None = None
    aggregate: Aggregate | None = None
    # Which tokens are special ([CLS], <s>, …), where the tokenizer knows; None where not.
    query_special: list[bool] | None = None
    key_special: list[bool] | None = None
    # Generated text: the first prompt_length tokens were given, the rest written by the
    # model (``generate``); a token position, also for chosen rows and pooled bins. None
    # for maps of a given text.
    prompt_length: int | None = None
    # A sentence pair: sentence B, and the token where it begins (rows and columns alike).
    pair: str | None = None
    pair_start: int | None = None
    # Only the rows of one sentence and the columns of the other ("a-b": A's rows over B's
    # columns), each row renormalised to sum to 1 over the columns kept.
    between: str | None = None
    # Long inputs. Chosen rows: the position of each query row among the input's tokens
    # (None: every token in order). Pooled maps: how many neighbouring tokens each bin
    # holds (rows averaged, columns summed), the tokens labelled by each bin's first.
    query_positions: list[int] | None = None
    pooled: int | None = None
    # Key tokens whose weight the heads' span statistic sums (--span), by key position.
    span: list[int] | None = None
    # What the maps keep of the request that made them (a chat, its system prompt, the
    # weighting), written and read as its declaration says.
    recorded: Recorded = field(default_factory=Recorded)
    # Each held layer's attention, where a model's layers differ or any sees only a window
    # of keys: "global" or "sliding N" (the N latest keys, the query's own included), as
    # the model's config declares them. None: every layer global.
    layer_kinds: list[str] | None = None

    def __post_init__(self) -> None:
        self.weights = _as_weights(self.weights)
        try:
            self.mode = Mode(self.mode)
            self.aggregate = None if self.aggregate is None else Aggregate(self.aggregate)
        except ValueError as error:
            raise SchemaError(str(error)) from None
        for what, held in (("layer", self.layers), ("head", self.heads)):
            if not held:
                raise SchemaError(f"these maps hold no {what}s: there is nothing to show")
        for name, tokens in (("query", self.query_tokens), ("key", self.key_tokens)):
            if not tokens:
                raise SchemaError(f"these maps hold no {name} tokens: there is nothing to show")
            flags = getattr(self, f"{name}_special")
            if flags is not None and len(flags) != len(tokens):
                raise SchemaError(f"{name}_special has {len(flags)} flags for {len(tokens)} tokens")
        if self.layer_kinds is not None and len(self.layer_kinds) != len(self.layers):
            raise SchemaError(
                f"layer_kinds has {len(self.layer_kinds)} kinds for {len(self.layers)} layers"
            )
        if self.pair_start is not None and not 0 < self.pair_start < len(self.key_tokens):
            raise SchemaError(f"pair_start {self.pair_start} is not a token inside the maps")
        if self.between is not None and self.between not in BETWEEN:
            raise SchemaError(f"between must be one of {', '.join(BETWEEN)}")
        self._check_positions()
        square = len(self.query_tokens) == len(self.key_tokens)
        if self.one_sequence and self.query_positions is None and not square:
            raise SchemaError(
                f"{self.mode.value} attention maps a text onto itself, but these maps have "
                f"{len(self.query_tokens)} query and {len(self.key_tokens)} key tokens"
            )
        expected = (*self.map_grid, len(self.query_tokens), len(self.key_tokens))
        if self.weights.shape != expected:
            raise SchemaError(
                f"weights have shape {self.weights.shape}, expected {expected} "
                "(layers, heads, query tokens, key tokens)"
            )

    def _check_positions(self) -> None:
        """The positions the maps name (the prompt's end, chosen rows, the span, pooled
        bins) lie inside what they hold."""
        # Chosen rows name positions of a sequence these maps do not hold whole.
        read = len(self.query_tokens) * (self.pooled or 1)
        if self.prompt_length is not None and (
            self.prompt_length < 0 or (self.query_positions is None and self.prompt_length > read)
        ):
            raise SchemaError(
                f"prompt_length {self.prompt_length} is outside 0 to {read}, "
                "the number of query tokens"
            )
        if self.query_positions is not None:
            if len(self.query_positions) != len(self.query_tokens):
                raise SchemaError(
                    f"query_positions has {len(self.query_positions)} positions for "
                    f"{len(self.query_tokens)} query tokens"
                )
            if any(position < 0 for position in self.query_positions):
                raise SchemaError("query_positions are token positions, 0 or more")
            keys = len(self.key_tokens)
            if self.one_sequence and any(position >= keys for position in self.query_positions):
                raise SchemaError(
                    f"query_positions name a token past the {keys} key tokens of a text read "
                    "onto itself"
                )
        if self.span is not None and not all(0 <= key < len(self.key_tokens) for key in self.span):
            raise SchemaError(f"span names key positions 0 to {len(self.key_tokens) - 1}")
        if self.pooled is not None and self.pooled < 1:
            raise SchemaError(f"pooled is a number of tokens per bin, not {self.pooled}")

    @property
    def one_sequence(self) -> bool:
        """Queries and keys are one sequence of tokens (see :func:`one_sequence`)."""
        return one_sequence(self.mode, self.between)

    def __repr__(self) -> str:  # what the maps are, not every weight and token
        grid = f"layers {index_span(self.layers)} × heads {index_span(self.heads)}"
        if self.aggregate is not None:
            grid = f"{self.aggregate.value} of {grid}"
        text = self.text if len(self.text) <= _REPR_TEXT else self.text[: _REPR_TEXT - 1] + "…"
        return (
            f"AttentionMaps({self.model!r}, {self.mode.value}, {grid}, "
            f"{len(self.query_tokens)} query × {len(self.key_tokens)} key tokens, "
            f"{self.weights.dtype}, text={text!r})"
        )

    @property
    def map_grid(self) -> tuple[int, int]:
        """How many maps there are along the layer and the head axis."""
        if self.aggregate is None:
            return len(self.layers), len(self.heads)
        return (1 if self.aggregate.folds_layers else len(self.layers)), 1

    def head(self, layer: int, head: int) -> np.ndarray:
        """The (query tokens, key tokens) map of one layer and head, by their model indices."""
        if self.aggregate is not None:
            raise UsageError("aggregated maps have no single heads")
        for name, index, held in (("layer", layer, self.layers), ("head", head, self.heads)):
            if index not in held:
                raise UsageError(f"{name} {index} is not held: these maps hold {name}s {held}")
        return self.weights[self.layers.index(layer), self.heads.index(head)]

    def select(
        self, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
    ) -> AttentionMaps:
        """A view restricted to some of the layers and heads held (by model index)."""
        if self.aggregate is not None:
            raise UsageError("aggregated maps cannot be narrowed to layers and heads")
        layers = list(self.layers if layers is None else layers)
        heads = list(self.heads if heads is None else heads)
        for name, chosen, held in (("layer", layers, self.layers), ("head", heads, self.heads)):
            missing = [index for index in chosen if index not in held]
            if missing:
                raise UsageError(f"{name} {missing[0]} is not held: these maps hold {name}s {held}")
        layer_rows = [self.layers.index(layer) for layer in layers]
        head_rows = [self.heads.index(head) for head in heads]
        weights = self.weights[np.ix_(layer_rows, head_rows)]
        kinds = None if self.layer_kinds is None else [self.layer_kinds[i] for i in layer_rows]
        return self.replace(weights=weights, layers=layers, heads=heads, layer_kinds=kinds)

    def astype(self, dtype: str) -> AttentionMaps:
        """The same maps with weights stored as ``float16`` or ``float32``."""
        if dtype not in ("float16", "float32"):
            raise UsageError(f"weights are stored as float16 or float32, not {dtype}")
        return self.replace(weights=self.weights.astype(dtype, copy=False))

    def between_sentences(self, which: str) -> AttentionMaps:
        """Of a sentence pair's maps, only the rows of one sentence and the columns of the
        other (``"a-b"``: A's tokens as queries over B's as keys), each row renormalised to
        sum to 1 over the columns kept, as bertviz's sentence filter shows them. Sentence A
        runs up to ``pair_start`` (its [CLS] and [SEP] included)."""
        if which not in BETWEEN:
            raise UsageError(f"between takes {', '.join(BETWEEN)}, not {which!r}")
        if self.pair_start is None or self.between is not None:
            raise UsageError("between needs the maps of a sentence pair (--pair)")
        if self.weighting is not None:
            raise UsageError(
                "between renormalises each row, and value-weighted maps have no rows that sum "
                "to 1: pick the sentences of unweighted maps"
            )
        if self.aggregate in (Aggregate.MAX, Aggregate.MAX_ALL):
            raise UsageError("max maps are not distributions: pick the sentences first")
        start = self.pair_start
        rows_of, columns_of = which.split("-")
        rows = slice(0, start) if rows_of == "a" else slice(start, len(self.query_tokens))
        columns = slice(0, start) if columns_of == "a" else slice(start, len(self.key_tokens))
        weights = keep(self.weights.astype(np.float32), rows, columns)
        flags = {
            name: None if getattr(self, name) is None else getattr(self, name)[part]
            for name, part in (("query_special", rows), ("key_special", columns))
        }
        return self.replace(
            query_tokens=self.query_tokens[rows],
            key_tokens=self.key_tokens[columns],
            weights=weights.astype(self.weights.dtype),
            pair_start=None,
            span=None,  # its columns are gone or moved
            between=which,
            **flags,
        )

    def reduced(self, rows: Selection = None, pool: int | None = None) -> AttentionMaps:
        """Of these whole maps, only some query rows over every key (``rows``: ``"last"``,
        ``-1``, ``"100-120"``, a list), or the maps pooled into at most ``pool`` × ``pool``
        bins: what ``--rows`` and ``--pool`` keep, as a long input's blocks make them."""
        queries, keys = len(self.query_tokens), len(self.key_tokens)
        check_pool(pool)
        if keeps_everything(rows, pool, queries, keys):
            return self
        if self.query_positions is not None or self.pooled is not None:
            raise UsageError("these maps hold chosen rows or pooled bins already, not whole maps")
        weights = np.stack(
            [
                of_whole(product_for(rows, pool, len(grid), queries, keys), grid)
                for grid in self.weights.astype(np.float32)
            ]
        )
        labels = product_labels(
            rows, pool, self.query_tokens, self.key_tokens, self.query_special, self.key_special
        )
        return self.replace(
            weights=weights.astype(self.weights.dtype),
            pair_start=None,
            span=self.span if rows is not None else None,
            **labels,
        )

    def with_positions(self) -> AttentionMaps:
        """The same maps with repeated token labels told apart by their positions:
        ``the`` twice becomes ``the·0`` and ``the·3``; a label seen once stays as it is."""
        return self.replace(
            query_tokens=numbered(self.query_tokens), key_tokens=numbered(self.key_tokens)
        )

    @property
    def weighting(self) -> Weighting | None:
        """What each weight was multiplied by (None: attention weights, rows sum to 1)."""
        return self.recorded.weighting

    def replace(self, **changes: Any) -> AttentionMaps:
        fields = {**self.__dict__, **changes}
        return AttentionMaps(**fields)

    def to_dict(self, *, weights: bool = True) -> dict[str, Any]:
        """The schema document: plain Python types, ready for ``json.dumps``. Without
        ``weights`` (the npz format keeps them as an array), every other field."""
        return document_of(self, plain_weights(self.weights) if weights else LEFT_OUT)

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> AttentionMaps:
        """Read a document written by :meth:`to_dict` (schema 1 or 2), checking it."""
        fields = fields_of(document)
        try:
            maps = cls(**fields)
        except (TypeError, ValueError) as error:
            raise SchemaError(f"malformed document: {error}") from None
        check_attention(maps)
        return maps

    def _picked(self, layer: int | None, head: int | None) -> AttentionMaps:
        """The maps of one layer, one head or both, by model index, or all of them."""
        for name, index, held in (("layer", layer, self.layers), ("head", head, self.heads)):
            if index is not None and index not in held:
                raise UsageError(f"{name} {index} is not held: these maps hold {name}s {held}")
        if layer is None and head is None:
            return self
        if self.aggregate is not None:
            raise UsageError(
                f"these maps are an aggregate ({self.aggregate.description}): pick layers and "
                "heads before aggregating"
            )
        return self.select(None if layer is None else [layer], None if head is None else [head])


# The maps' document, as their JSON holds it.

LEFT_OUT = object()  # the weights of a document without them (npz keeps them as an array)


def document_of(maps: AttentionMaps, weights: Any) -> dict[str, Any]:
    """The schema document of ``maps``: plain Python types, ready for ``json.dumps``, with
    ``weights`` as its weights (:data:`LEFT_OUT`: none)."""
    document = envelope(
        {
            "model": maps.model,
            "mode": maps.mode.value,
            "text": maps.text,
            "target": maps.target,
            "query_tokens": list(maps.query_tokens),
            "key_tokens": list(maps.key_tokens),
            "layers": list(maps.layers),
            "heads": list(maps.heads),
        }
    )
    if weights is not LEFT_OUT:
        document["weights"] = weights
    if maps.aggregate is not None:
        document["aggregate"] = maps.aggregate.value
    document.update(maps.recorded.document())
    for name in ("query_special", "key_special"):
        if getattr(maps, name) is not None:
            document[name] = list(getattr(maps, name))
    if maps.layer_kinds is not None:
        document["layer_kinds"] = list(maps.layer_kinds)
    optional = ("prompt_length", "pair", "pair_start", "between", "query_positions", "pooled")
    for name in (*optional, "span"):
        if getattr(maps, name) is not None:  # optional fields: older readers ignore them
            value = getattr(maps, name)
            document[name] = list(value) if isinstance(value, list) else value
    return document


def _as_weights(values: Any) -> np.ndarray:
    """Weights as maps keep them: float16 as stored (half the size), any other real
    numbers as float32. Complex or non-numeric values are refused, not cast: numpy would
    drop the imaginary part with a warning on stderr. Values too large for float32 become
    infinite quietly; check_attention refuses them with a message."""
    weights = np.asarray(values)
    if weights.dtype.kind not in "fiu":
        raise SchemaError(f"weights are real numbers, not {weights.dtype}")
    if weights.dtype in (np.float32, np.float16):
        return weights
    with np.errstate(over="ignore", invalid="ignore"):
        return weights.astype(np.float32)


def check_attention(maps: AttentionMaps) -> None:
    """Refuse weights that are not attention: a saved file is data, and drawing NaN, 5 or
    −0.5 as if they were weights would lie. Weights must be finite and in [0, 1]; rows of
    every map but a max must sum to 1; masked maps must not look ahead. Value-weighted
    maps need only be finite, 0 or more, and not look ahead."""
    # float16 keeps about three digits: a row of a few hundred of them may be off by 1e-2;
    # so may the rows of a model run in bfloat16, even when stored in float32.
    problem = attention_problem(
        maps.weights.astype(np.float64),
        causal=maps.mode is Mode.MASKED,
        tolerance=1e-2,
        distributions=maps.aggregate not in (Aggregate.MAX, Aggregate.MAX_ALL)
        and maps.weighting is None,
        positions=maps.query_positions,
        weighted=maps.weighting is not None,
    )
    if problem is not None:
        raise SchemaError(problem)
