"""Exact attention weights from a model that runs its own fused attention.

Fused kernels (PyTorch's scaled_dot_product_attention, flash attention) return
no weights, and a long input's whole T×T maps would not fit in memory anyway.
So, for one forward pass, attnviz registers an attention function with
transformers: every attention module calls it with the queries and keys it
computes from (after rotary embeddings), its mask and its score adjustments
(scaling, a position bias, logit soft-capping), and it returns the model's own
fused attention unchanged. In the modules asked for, it first hands those
inputs to attnviz, which computes the weights one block of query rows at a
time, in float32, and keeps only what was asked for of each block.

Shape letters: B inputs, H query heads, K key/value heads, T query tokens,
S key tokens, D head size, R query rows of a block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.products import Block, Product, WholeMaps
from attnviz.pretrained.implementations import running
from attnviz.pretrained.value_norms import (
    head_factors,
    input_matrix,
    output_projection,
    value_norms,
)
from attnviz.pretrained.windowed import applies, attention_by_windows
from attnviz.selection import Selection, resolve

if TYPE_CHECKING:
    import torch

FUSED = "attnviz_fused"  # the attention implementation's name while attnviz records
EAGER_RECORDING = "attnviz_eager"  # the same, passing through to eager attention (explain)
FUSED_BY_WINDOWS = "attnviz_fused_windowed"  # the same, sliding windows computed by windows

# The block's scores, their exponentials and the softmax exist at once, in float32.
_COPIES_PER_BLOCK = 3
DEFAULT_MEMORY = 256 * 2**20  # bytes a block of one head's weights may take
_CACHED_BLOCK = 12 * 2**20  # bytes of a CPU's block: 4 MiB of weights, in cache between passes


@dataclass
class Scores:
    """What one attention module computes its weights from, as its eager function would."""

    query: torch.Tensor  # (B, H, T, D), after rotary embeddings
    key: torch.Tensor  # (B, K, S, D)
    mask: torch.Tensor | None  # (B, 1 or H, T, S): bool (True: may attend) or added to scores
    causal: bool  # no mask was given and the module is causal: a later key is hidden
    scaling: float  # what the dot products are multiplied by
    # No mask was given and the module reads a sliding window: the key j is hidden from
    # the query i where j <= i - window (with ``causal``, the window's layers by windows)
    window: int | None = None
    softcap: float | None = None  # scores squashed to ±softcap by tanh (Gemma 2)
    position_bias: torch.Tensor | None = None  # (1 or B, H, T, S), added to the scores (T5)
    # (B, H, S): what each key writes through each head, ‖W_O^h v_j‖; the weights of a
    # block are multiplied by it (--weigh value), and have no logarithms then
    written: torch.Tensor | None = None

    @property
    def heads(self) -> int:
        return self.query.shape[1]

    def rows_per_block(self, memory: int) -> int:
        """How many query rows of one head a block takes: as many as fit in ``memory`` bytes
        of float32 blocks, and, on a CPU, no more than stay in its cache between the few
        passes over a block (several times faster than blocks that do not)."""
        per_row = self.key.shape[2] * 4 * _COPIES_PER_BLOCK
        budget = memory if self.query.device.type != "cpu" else min(memory, _CACHED_BLOCK)
        return max(1, min(self.query.shape[2], budget // per_row))

    def block(self, item: int, head: int, rows: np.ndarray, keys: int) -> Block:
        """The exact weights of query ``rows`` (positions) of ``head`` for input ``item``, over
        its first ``keys`` keys (those after are padding): (R, W) float32, each row a softmax
        over every key, with its logarithm (or, with ``written``, each weight times its key's
        norm). Causal rows give no weight to keys after the last of them: those are left out
        (W ≤ keys), not computed as zeros."""
        import torch

        group = self.heads // self.key.shape[1]  # query heads per key/value head
        picked = _picker(rows)
        width = min(keys, int(rows[-1]) + 1) if self.causal else keys
        mask = None
        start = 0
        if self.mask is not None:
            mask = self.mask[item, head if self.mask.shape[1] > 1 else 0, picked, :width]
            # The keys no row may read, before (a sliding window's, long behind the rows)
            # and after (a causal mask's), are hidden: their scores, exponentials and sums
            # are never computed, and the block leaves them out (its start and width):
            # their weights are 0.
            start, width = _visible(mask)
            mask = mask[:, :width]
        elif self.causal and self.window is not None:  # keys behind every row's window
            start = max(0, int(rows.min()) - self.window + 1)
        query = self.query[item, head, picked].float()  # (R, D)
        key = self.key[item, head // group, start:width].float()  # (W − start, D)
        read = (query * self.scaling) @ key.T  # (R, W − start): the keys some row may read
        lowest = torch.finfo(read.dtype).min  # a hidden key's score: exp gives exactly 0
        added = self.position_bias is not None
        if self.softcap is not None:
            read = torch.tanh(read / self.softcap) * self.softcap
        if self.position_bias is not None:
            bias = self.position_bias[min(item, self.position_bias.shape[0] - 1)]
            read += bias[head if bias.shape[0] > 1 else 0, picked, start:width].float()
        if mask is not None:
            if mask.dtype == torch.bool:
                read.masked_fill_(~mask[:, start:], lowest)
            else:
                read += mask[:, start:].float()
                added = True
        elif self.causal:  # only keys after the first row can be hidden from a row
            first = int(rows[0]) + 1
            at = torch.as_tensor(rows, device=read.device)[:, None]
            later = torch.arange(first, width, device=read.device)[None, :] > at  # (R, W − first)
            read[:, first - start :].masked_fill_(later, lowest)
            if self.window is not None:
                columns = torch.arange(start, width, device=read.device)[None, :]
                read.masked_fill_(columns <= at - self.window, lowest)  # (R, W − start)
        if added:  # an additive mask or bias may hold -inf: made finite
            read.clamp_(min=lowest)
        # The softmax and its logarithm from one exponential per weight (logsumexp, then
        # exp of the logs, would take two).
        logs = read.sub_(read.amax(dim=-1, keepdim=True))
        weights = logs.exp()
        total = weights.sum(dim=-1, keepdim=True)
        weights.div_(total)
        if self.written is not None:
            weights.mul_(self.written[item, head, start:width])
            return Block(rows, weights, start=start)
        logs.sub_(total.log_())
        return Block(rows, weights, logs, start)


def _visible(mask: torch.Tensor) -> tuple[int, int]:
    """The first key that some row of ``mask`` (R, W; bool, True: may attend, or added to
    the scores) may read, and one past the last; (0, W) where a row may read none."""
    import torch

    visible = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min
    seen = visible.any(0)  # (W,)
    width = len(seen)
    if not bool(seen.any()):
        return 0, width
    start = int(seen.to(torch.uint8).argmax())
    end = width - int(seen.flip(0).to(torch.uint8).argmax())
    # A row that may read nothing spreads its weight over every key, hidden or not.
    if (start or end < width) and not bool(visible[:, start:end].any(1).all()):
        return 0, width
    return start, end


def _picker(rows: np.ndarray) -> slice | list[int]:
    """Index query rows by a slice when they are a run (a view, no copy)."""
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows.tolist()


class Unrecordable(Exception):
    """An attention module computes its scores in a way attnviz does not reproduce."""


def scores_of(module: Any, query, key, mask, args: tuple, kwargs: dict) -> Scores:
    """The inputs of one call of an attention function, as :class:`Scores`."""
    if kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None:
        raise Unrecordable("learned attention sinks")
    scaling, window = kwargs.get("scaling"), kwargs.get("sliding_window")
    if scaling is None and args:
        raise Unrecordable("its attention function is given its settings by position")
    return Scores(
        query=query,
        key=key,
        mask=mask,
        # As PyTorch's fused attention decides: causal only over several queries, unmasked.
        causal=mask is None and _is_causal(module, kwargs) and query.shape[2] > 1,
        scaling=scaling if scaling is not None else query.shape[-1] ** -0.5,
        softcap=kwargs.get("softcap"),
        position_bias=kwargs.get("position_bias"),
        window=window if mask is None and isinstance(window, int) else None,
    )


def _is_causal(module: Any, kwargs: dict) -> bool:
    """Whether the module's attention is causal, as transformers' fused function decides: the
    call's ``is_causal`` where given, else the module's own."""
    given = kwargs.get("is_causal")
    return bool(given if given is not None else getattr(module, "is_causal", True))


def _additive(mask, query, key, module: Any, kwargs: dict):
    """The mask as eager attention adds it: 0 or the dtype's lowest (or None), whatever form
    the fused mask came in."""
    import torch

    lowest = torch.finfo(query.dtype).min
    if mask is not None:
        if mask.dtype != torch.bool:
            return mask
        return torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
            ~mask, lowest
        )
    if not _is_causal(module, kwargs) or query.shape[2] == 1:
        return None
    later = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device)
    return torch.zeros(later.shape, dtype=query.dtype, device=query.device).masked_fill(
        later.triu(1), lowest
    )[None, None]


def _eager_function(module: Any) -> Callable[..., Any]:
    return __import__(type(module).__module__, fromlist=["_"]).eager_attention_forward


def own_attention(module, query, key, value, mask, *args, **kwargs):
    """The model's own fast attention, given the mask PyTorch's fused kernel takes: that
    kernel, or, for what it does not do (logit soft-capping), the module's eager function."""
    if kwargs.get("softcap") is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, mask, *args, **kwargs)
    return eager_attention(module, query, key, value, mask, *args, **kwargs)


def eager_attention(module, query, key, value, mask, *args, **kwargs):
    """The module's eager attention, given the mask PyTorch's fused kernel takes: its output
    and its weights, (B, H, T, S)."""
    additive = _additive(mask, query, key, module, kwargs)
    return _eager_function(module)(module, query, key, value, additive, *args, **kwargs)


def _eager(module, query, key, value, mask, *args, **kwargs):
    return _eager_function(module)(module, query, key, value, mask, *args, **kwargs)


@contextlib.contextmanager
def recording(
    model: Any, record: Callable[..., None], *, fused: bool = True, by_windows: bool = False
) -> Iterator[None]:
    """Run ``model`` with an attention function that first calls ``record(module, query, key,
    value, mask, args, kwargs)`` and then runs the model's own attention: fused (with the masks
    PyTorch's fused kernel takes) or eager (with additive masks); fused ``by_windows``, a
    sliding-window layer over its window alone and no mask built (where
    :func:`attnviz.pretrained.windowed.applies`). The model's attention implementation and
    transformers' registries are left as they were."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    name, run, masks = (
        (FUSED, own_attention, sdpa_mask) if fused else (EAGER_RECORDING, _eager, eager_mask)
    )
    if fused and by_windows:
        name, run, masks = FUSED_BY_WINDOWS, attention_by_windows, None

    def attention(module, query, key, value, mask, *args, **kwargs):
        record(module, query, key, value, mask, args, kwargs)
        return run(module, query, key, value, mask, *args, **kwargs)

    with running(model, name, attention, masks):
        yield


class _Done(Exception):
    """Raised once every layer asked for has been reduced: the rest of the model need not run."""


@dataclass
class Layout:
    """One input of a batch: its query and key tokens (padding after them), and what to keep."""

    queries: int
    keys: int
    product: Callable[[int], Product] | None = None  # heads -> a fresh product; None: whole maps

    def made(self, heads: int) -> Product:
        if self.product is None:
            return WholeMaps(heads, self.queries, self.keys)
        return self.product(heads)


def fused_attention(
    model: Any,
    modules: list[tuple[Any, int]],
    wanted: list[int],
    arguments: dict[str, Any],
    heads: Selection,
    layouts: list[Layout],
    memory: int = DEFAULT_MEMORY,
    *,
    weigh: bool = False,
    eager: bool = False,
) -> tuple[list[list[np.ndarray]], list[int]]:
    """Run ``model`` once with its fused attention (its eager attention, with ``eager``); for
    each input, the product of each wanted layer's chosen heads, computed block by block,
    and the head indices. With ``weigh``, each weight is multiplied by what its key writes
    through the head (:mod:`attnviz.pretrained.value_norms`). The model stops once the last
    wanted layer is read.

    Raises :class:`Unrecordable` when a wanted layer computes its attention in a way this
    does not reproduce (or outside transformers' attention functions)."""
    import torch

    recorder = ProductRecorder(model, modules, wanted, heads, layouts, memory, weigh=weigh)
    with (
        recorder.recording(arguments, eager=eager, stop=True),
        torch.inference_mode(),
        contextlib.suppress(_Done),
    ):
        model(**arguments)
    return recorder.results()


class ProductRecorder:
    """The products of the wanted layers' chosen heads, reduced block by block from the
    queries and keys their attention is given while the model runs a forward pass: the
    one :func:`fused_attention` runs, or one a caller runs for its own ends (the clean
    pass of the heads' effects), so that one pass over a text serves both."""

    def __init__(
        self,
        model: Any,
        modules: list[tuple[Any, int]],
        wanted: list[int],
        heads: Selection,
        layouts: list[Layout],
        memory: int = DEFAULT_MEMORY,
        *,
        weigh: bool = False,
    ) -> None:
        self.model, self.wanted, self.heads = model, wanted, heads
        self.layouts, self.memory, self.weigh = layouts, memory, weigh
        self.owner = {
            id(part): layer
            for layer, (module, _) in enumerate(modules)
            if layer in wanted
            for part in module.modules()
        }
        self.products: dict[int, list[Product]] = {}
        self.chosen: list[int] = []

    def recording(
        self, arguments: dict[str, Any], *, eager: bool = False, stop: bool = False
    ) -> Any:
        """While it is entered, each forward pass of the model on ``arguments`` is recorded
        (the first of each wanted layer's calls); with ``stop``, the pass ends once the last
        is (``_Done``)."""

        import torch

        def record(module, query, key, value, mask, args, kwargs) -> None:
            layer = self.owner.get(id(module))
            if layer is None or layer in self.products:  # a layer computed again: its first
                return
            with torch.no_grad():  # a pass that asks for gradients keeps none of these
                scores = scores_of(module, query, key, mask, args, kwargs)
                if self.weigh:
                    scores.written = _written(self.model, module, scores.heads, value)
                self.chosen[:] = resolve(self.heads, scores.heads, "head")
                self.products[layer] = [
                    _reduce(scores, item, layout, self.chosen, self.memory)
                    for item, layout in enumerate(self.layouts)
                ]
            if stop and len(self.products) == len(self.wanted):
                raise _Done

        windows = applies(self.model, arguments)
        return recording(self.model, record, fused=not eager, by_windows=windows)

    def results(self) -> tuple[list[list[np.ndarray]], list[int]]:
        """For each input, each wanted layer's product; and the head indices. Raises
        :class:`Unrecordable` where a wanted layer was not recorded."""
        missing = [layer for layer in self.wanted if layer not in self.products]
        if missing:
            raise Unrecordable(
                f"layer {missing[0]} computes its attention outside transformers' attention "
                "functions"
            )
        per_input = [
            [self.products[layer][item].result() for layer in self.wanted]
            for item in range(len(self.layouts))
        ]
        return per_input, list(self.chosen)


def _written(model: Any, attention: Any, heads: int, value: torch.Tensor) -> torch.Tensor:
    """What each key writes through each of ``attention``'s heads, (B, H, S)."""
    projection = output_projection(model, attention)
    matrix = None if projection is None else input_matrix(projection)
    if matrix is None:
        kind = type(attention).__name__
        raise Unrecordable(f"attnviz cannot find the output projection of {kind}")
    if matrix.shape[0] != heads * value.shape[-1]:
        raise Unrecordable(
            f"its output projection takes {matrix.shape[0]} features, not its {heads} heads' "
            f"values of {value.shape[-1]} side by side"
        )
    return value_norms(value, head_factors(matrix, heads))


def _reduce(scores: Scores, item: int, layout: Layout, heads: list[int], memory: int) -> Product:
    product = layout.made(len(heads))
    step = scores.rows_per_block(memory)
    # Every head of a block of rows before the next block: what a product works out about
    # the rows themselves (the detectors' pairs of repeated tokens) serves all the heads.
    for rows in product.blocks(layout.queries, step):
        for slot, head in enumerate(heads):
            product.add(slot, scores.block(item, head, rows, layout.keys))
    return product
