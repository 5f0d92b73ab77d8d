"""The :class:`Extractor` interface: one loaded model, turning texts into
:class:`~attnviz.maps.AttentionMaps` for a :class:`~attnviz.request.Request`.

Extractors are made by :func:`attnviz.load` (:mod:`attnviz.loading`), which
knows the built-in stack and pretrained models; this module knows neither, so
that both can build on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from attnviz.analysis.heads import HeadTable
from attnviz.choices import Ablation, Mode, chosen
from attnviz.errors import UsageError
from attnviz.request import Request
from attnviz.selection import Selection, token_positions

if TYPE_CHECKING:
    from attnviz.analysis.heads import HeadEffects, HeadTable, Knockout
    from attnviz.loading import ExtractorSpec
    from attnviz.maps import AttentionMaps
    from attnviz.needle import Cell, NeedleResults, Sweep
    from attnviz.pretrained.generation import Generation

# A text; a (text, target) pair for cross mode; or (text, target, pair) with sentence B.
Item = str | tuple[str, str | None] | tuple[str, str | None, str | None]
Checked = tuple[str, str | None, str | None]  # (text, target, pair), each part checked

PROBE_LENGTH = 20  # random tokens in each half of the detectors' probe (TransformerLens's)


class Extractor(ABC):
    """One loaded model: any number of texts in, their attention maps out.

    Every method takes one :class:`~attnviz.request.Request`, or its fields as
    keyword arguments (``mode="masked", layers=0``), checked before any work.
    """

    spec: ExtractorSpec

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name as the maps record it."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def extract(
        self,
        text: str,
        request: Request | None = None,
        *,
        target: str | None = None,
        pair: str | None = None,
        **options: Any,
    ) -> AttentionMaps:
        """The attention maps of ``text`` for ``request`` (or its fields as ``options``).

        In cross mode the tokens of ``target`` are the queries (rows) and the
        tokens of ``text`` the keys (columns). ``pair`` is sentence B of a
        sentence pair for an encoder (``[CLS] A [SEP] B [SEP]``, with token types).
        """
        (maps,) = self.extract_many([(text, target, pair)], request, **options)
        return maps

    def extract_many(
        self,
        items: Iterable[Item],
        request: Request | None = None,
        *,
        batch_size: int = 16,
        **options: Any,
    ) -> Iterator[AttentionMaps]:
        """The maps of each item (a text, a (text, target) pair or (text, target, pair)),
        in order. Pretrained models run ``batch_size`` items per padded forward pass;
        each result equals what :meth:`extract` gives for that item alone. The request
        is checked before any work; each item as it is reached."""
        request = Request.of(request, options)
        _check_batch(items, batch_size, "extract_many", "extract")
        return self._extract_many((as_item(item) for item in items), request, batch_size)

    @abstractmethod
    def _extract_many(
        self, items: Iterator[Checked], request: Request, batch_size: int
    ) -> Iterator[AttentionMaps]:
        """The maps of checked items, in order."""

    def head_statistics(
        self,
        text: str,
        request: Request | None = None,
        *,
        target: str | None = None,
        pair: str | None = None,
        answer: str | None = None,
        ablate: Ablation | str = Ablation.ZERO,
        **options: Any,
    ) -> HeadTable:
        """Each head's statistics for one text, as ``attnviz heads`` lists them. A pretrained
        model running fused attention sums them block by block, so that a long input's
        whole maps never exist; the numbers are those of the whole maps. With ``answer``,
        each head's effects on it too (:meth:`head_effects`, ``ablate`` as there), read
        in the same pass over the text where the model allows."""
        request = Request.of(request, options)
        _check_statistics(request)
        if answer is not None and target is None and pair is None:
            table = self._statistics_with_effects(text, answer, request, ablate)
            if table is not None:
                return table
        (table,) = self.head_tables([(text, target, pair)], request)
        if answer is None:
            return table
        return table.with_effects(self.head_effects(text, answer, request, ablate=ablate))

    def _statistics_with_effects(
        self, text: str, answer: str, request: Request, ablate: Ablation | str
    ) -> HeadTable | None:
        """Statistics and effects from one pass over the text; None where they are read
        in two (by default)."""
        return None

    def head_tables(
        self,
        items: Iterable[Item],
        request: Request | None = None,
        *,
        batch_size: int = 16,
        **options: Any,
    ) -> Iterator[HeadTable]:
        """:meth:`head_statistics` of each item, in order, ``batch_size`` items per forward
        pass (as :meth:`extract_many` reads them): what ``attnviz stats`` sums up."""
        request = Request.of(request, options)
        _check_batch(items, batch_size, "head_tables", "head_statistics")
        _check_statistics(request)
        return self._head_tables((as_item(item) for item in items), request, batch_size)

    def _head_tables(
        self, items: Iterator[Checked], request: Request, batch_size: int
    ) -> Iterator[HeadTable]:
        return map(HeadTable.of, self._extract_many(items, request, batch_size))

    def head_effects(
        self,
        text: str,
        answer: str,
        request: Request | None = None,
        *,
        ablate: Ablation | str = Ablation.ZERO,
        **options: Any,
    ) -> HeadEffects:
        """What each chosen head does to the answer's first token after ``text``: the change
        in its log-probability with the head ablated (``ablate``: its output zeroed, or
        replaced by its mean over the text) and its direct logit attribution. A causal
        language model only."""
        raise no_next_token(self.name)

    def knockout(
        self,
        text: str,
        answer: str,
        rows: Selection,
        span: Selection,
        request: Request | None = None,
        *,
        window: int = 1,
        **options: Any,
    ) -> Knockout:
        """Attention knockout: the change in the answer's log-probability when the query
        ``rows`` may not read the ``span`` keys (each as ``--rows`` names tokens: positions
        or a text), in ``window`` layers around each chosen layer. A causal language model
        only."""
        raise no_next_token(self.name)

    def detection_probe(self, length: int = PROBE_LENGTH, seed: int = 0) -> str:
        """The head detectors' probe: ``length`` random tokens (drawn with ``seed``), then
        the same tokens again, after the model's first token where it has one (as
        TransformerLens's induction probe). An induction head reads, from each token of
        the second half, the token that followed it in the first."""
        raise NotImplementedError

    def generate(
        self,
        prompt: str,
        request: Request | None = None,
        *,
        max_new_tokens: int = 20,
        sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: bool = True,
        **options: Any,
    ) -> Generation:
        """Let the model write up to ``max_new_tokens`` tokens after ``prompt`` (greedy, or
        sampled with ``sample``, reproducibly by ``seed``; ending at the end-of-sequence
        token unless ``stop=False``) and return the text with the maps of the whole
        sequence, ``maps.prompt_length`` marking where the generated rows begin.
        Decoders give masked attention; encoder-decoders the cross-attention of each
        written token over the prompt (the request's mode may ask for masked or self)."""
        raise UsageError(f"{self.name} does not generate text: give a pretrained language model")

    def needle(
        self,
        sweep: Sweep,
        haystack: str | None = None,
        progress: Callable[[int, int, Cell], None] | None = None,
    ) -> NeedleResults:
        """A needle-in-a-haystack sweep (:mod:`attnviz.needle`): each cell's prompt answered
        greedily, and each head's retrieval score and weight on the needle, read while the
        model writes. ``haystack`` is the filler (attnviz's own by default); ``progress`` is
        called after each cell with its number, the number of cells and the cell."""
        raise UsageError(
            f"{self.name} does not write text: needle needs a causal language model "
            "(--model smollm2, --model gemma3, a GPT-2 or Llama folder)"
        )

    @abstractmethod
    def explain(
        self,
        text: str,
        *,
        mode: Mode | str | None = None,
        target: str | None = None,
        layer: int | str = 0,
        head: int | str = 0,
        query: int | None = None,
        raw_pieces: bool = False,
    ) -> Any:
        """One head's attention step by step: the built-in stack walks through every
        matrix; a pretrained model explains one ``query`` row from its dot products
        (tokens labelled with the tokenizer's own pieces when ``raw_pieces``)."""


def _check_statistics(request: Request) -> None:
    if request.pool is not None:
        raise UsageError("statistics are read from exact rows: --pool does not apply to them")
    if request.weigh is not None:
        raise UsageError(
            "head statistics read each row as a distribution: --weigh does not apply to them"
        )


def check_answer(answer: object) -> str:
    """An answer as given, if it is a text with something in it."""
    if not isinstance(answer, str):
        raise UsageError(f"the answer is a text, not {type(answer).__name__}")
    if not answer.strip():
        raise UsageError("the answer is empty: give the words the model should go on with")
    return answer


def no_next_token(model: str) -> UsageError:
    """The refusal of an answer by a model that predicts no next token."""
    return UsageError(
        f"{model} has no next token to read: --answer needs a causal language model "
        "(--model smollm2, a GPT-2 or Llama folder); the built-in stack has no unembedding"
    )


def parse_mode(mode: Mode | str | None) -> Mode | None:
    return None if mode is None else chosen(Mode, mode, "mode")


def check_text(text: str, what: str = "text") -> None:
    """An empty or blank text is a usage error, checked before any model runs."""
    if not isinstance(text, str):
        raise UsageError(f"the {what} is a str, not {type(text).__name__}")
    if not text or not text.strip():
        raise UsageError(f"the {what} is empty: give some words to look at")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        # Python keeps a command line's bytes that are not UTF-8 as U+DC80..U+DCFF.
        code = ord(text[error.start])
        what_is_there = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a surrogate"
        raise UsageError(
            f"the {what} is not UTF-8 text: {what_is_there} at offset {error.start}"
        ) from None


Finder = Callable[[str], list[int]]  # a text -> the positions of the tokens that cover it


def positions_asked(
    request: Request, queries: int, keys: int, find_query: Finder, find_key: Finder
) -> tuple[list[int] | None, list[int] | None]:
    """The query rows (``--rows``) and the keys of the span (``--span``) of one input, as
    positions: given as indices, or as a text that the finders look for."""
    rows = span = None
    if request.rows is not None:
        rows = token_positions(request.rows, queries, "row", "query tokens", find_query)
    if request.span is not None:
        span = token_positions(request.span, keys, "span key", "key tokens", find_key)
    return rows, span


def _check_batch(items: Iterable[Item], batch_size: int, method: str, single: str) -> None:
    if isinstance(items, str | bytes):
        raise UsageError(f"{method} reads a list of texts; for one text use {single}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size is a whole number of at least 1, not {batch_size!r}")


def as_item(item: Item) -> Checked:
    """(text, target, pair) of an item, each given part checked like the text."""
    if isinstance(item, str):
        return as_item((item, None, None))
    if not isinstance(item, tuple | list) or not 1 <= len(item) <= 3:
        raise UsageError(
            f"an input is a text, or a tuple (text, target) or (text, target, pair); not {item!r}"
        )
    text, target, pair = (*item, None, None)[:3]
    check_text(text, "text")
    if target is not None:
        check_text(target, "target")
    if pair is not None:
        check_text(pair, "pair")
    return text, target, pair


def without_pair(item: Checked) -> tuple[str, str | None]:
    """(text, target) of a checked item, for models that read no sentence pairs."""
    text, target, pair = item
    if pair is not None:
        raise UsageError("sentence pairs (--pair) are read by pretrained encoders such as BERT")
    return text, target
