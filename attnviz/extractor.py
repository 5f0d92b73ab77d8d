"""The :class:`Extractor` interface: one loaded model, turning texts into
:class:`~attnviz.maps.AttentionMaps` for a :class:`~attnviz.request.Request`.

Extractors are made by :func:`attnviz.load` (:mod:`attnviz.loading`), which
knows the built-in stack and pretrained models; this module knows neither, so
that both can build on it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from attnviz.analysis.heads import HeadTable
from attnviz.answer_readings import AnswerReadings, asking, no_next_token
from attnviz.asked import check_asked
from attnviz.choices import (
    Ablation,
    Mode,
    chosen,
)
from attnviz.circuits.pairs import check_pairs
from attnviz.errors import UsageError
from attnviz.generated import Sampling
from attnviz.progress import Listener, reporting
from attnviz.request import (
    Explaining,
    Input,
    Request,
    asked_for,
    check_text,
)
from attnviz.results import Result
from attnviz.selection import token_positions

if TYPE_CHECKING:
    from attnviz.analysis.heads import HeadTable
    from attnviz.circuits.circuit import Circuit
    from attnviz.generated import Generation
    from attnviz.maps import AttentionMaps
    from attnviz.needle import Cell, NeedleResults, Sweep


class Spec(Protocol):
    """What an extractor was built from and builds it again (in another process, say):
    :class:`attnviz.loading.ExtractorSpec`, as the extractors below the loader know it."""

    @property
    def model(self) -> str: ...

    def load(self) -> Extractor: ...


# A text; a (text, target) pair for cross mode; or (text, target, pair) with sentence B.
Item = str | tuple[str, str | None] | tuple[str, str | None, str | None]

# Told after each cell of a needle sweep: its number, the number of cells and the cell.
Progress = Callable[[int, int, "Cell"], None] | None
PROBE_LENGTH = 20  # random tokens in each half of the detectors' probe (TransformerLens's)


class Extractor(AnswerReadings):
    """One loaded model: any number of inputs in, what a request asks of each out.

    :meth:`run` is the one door: a :class:`~attnviz.request.Request` (what to read: maps,
    statistics, effects, a knockout) and inputs (a text, a (text, target, pair) tuple or an
    :class:`~attnviz.request.Input`) in, one :class:`Result` per input out. The methods
    named after a product (:meth:`extract`, :meth:`head_statistics`, …) ask it for that
    product; they take the request, or its fields as keyword arguments
    (``mode="masked", layers=0``), checked before any work. Those that read an answer
    (:meth:`head_effects`, :meth:`trace`, :meth:`lens`, :meth:`knockout`, :meth:`circuit`)
    are :class:`~attnviz.answer_readings.AnswerReadings`'.
    """

    spec: Spec

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def run(
        self,
        inputs: Iterable[Item | Input],
        request: Request | None = None,
        *,
        batch_size: int = 16,
        progress: Listener | None = None,
        names: list[str] | None = None,
        **options: Any,
    ) -> Iterator[Result]:
        """What ``request`` asks of each input, in order. Pretrained models read
        ``batch_size`` inputs per padded forward pass; each result equals what that input
        gives alone. The request is checked before any work; each input as it is reached.
        A request with a ``circuit`` reads every input together, as the circuit's pairs
        (each checked before any pass; ``names`` say each in an error, "pair 1"… by
        default), and gives one result. ``progress(what, done, total)`` is told how far
        each long pass has got (the exact sweeps, a pass per batch of changes; the
        gradient passes, a step per layer up and down)."""
        request = Request.of(request, options)
        _check_batch(inputs, batch_size, "run", "run([text])")
        self._check(request)
        if request.circuit is not None:
            pairs = [as_input(each) for each in inputs]
            check_pairs(pairs, request, names)
            return self._circuit(pairs, request, names, progress)
        checked = (check_asked(request, as_input(each)) for each in inputs)
        return self._batches(checked, request, batch_size, progress)

    def _one(self, given: Input, request: Request) -> Result:
        (found,) = self.run([given], request)
        return found

    def _together(self, inputs: list[Input], request: Request, progress: Listener | None) -> Result:
        (found,) = self.run(inputs, request, progress=progress)
        return found

    def _circuit(
        self,
        pairs: list[Input],
        request: Request,
        names: list[str] | None,
        progress: Listener | None,
    ) -> Iterator[Result]:
        with reporting(progress):  # around the read alone, never across a yield
            found = self._read_circuit(pairs, request, names)
        yield Result(pairs[0], circuit=found)

    def _read_circuit(
        self, pairs: list[Input], request: Request, names: list[str] | None
    ) -> Circuit:
        """The circuit of checked pairs (``names`` say each in an error): a model that
        reads no next token has none."""
        raise no_next_token(self.name, request.next_token_reader)

    def _batches(
        self, inputs: Iterator[Input], request: Request, size: int, progress: Listener | None
    ) -> Iterator[Result]:
        while batch := list(islice(inputs, size)):
            with reporting(progress):  # around the read alone, never across a yield
                results = self._read(batch, request)
            yield from results

    @abstractmethod
    def _check(self, request: Request) -> None:
        """Refuse, before any input is read, what this model cannot read at all."""

    def _read(self, batch: list[Input], request: Request) -> list[Result]:
        """What the request asks of one batch of checked inputs: here maps and the
        statistics read from them; no answer (a pretrained language model reads effects),
        and no pass long enough to report on."""
        answered = request.effects and any(each.answer is not None for each in batch)
        if answered or request.knockout is not None or request.trace is not None or request.lens:
            raise no_next_token(self.name, request.next_token_reader)
        results = []
        for each, maps in zip(batch, self._extract_many(batch, request), strict=True):
            table = HeadTable.of(maps) if request.statistics else None
            results.append(Result(each, maps if request.maps else None, table))
        return results

    @abstractmethod
    def _extract_many(self, inputs: list[Input], request: Request) -> list[AttentionMaps]:
        """The maps of one batch of checked inputs, in order."""

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
        items: Iterable[Item | Input],
        request: Request | None = None,
        *,
        batch_size: int = 16,
        **options: Any,
    ) -> Iterator[AttentionMaps]:
        """The maps of each item (a text, a (text, target) pair or (text, target, pair)),
        in order, ``batch_size`` items per forward pass (:meth:`run`)."""
        _check_batch(items, batch_size, "extract_many", "extract")
        asked = asking(request, options, maps=True)
        found = self.run(items, asked, batch_size=batch_size)
        return (asked_for(each.maps) for each in found)

    def head_statistics(
        self,
        text: str,
        request: Request | None = None,
        *,
        target: str | None = None,
        pair: str | None = None,
        answer: str | None = None,
        ablate: Ablation | str = Ablation.ZERO,
        versus: str | None = None,
        corrupt: str | None = None,
        **options: Any,
    ) -> HeadTable:
        """Each head's statistics for one text, as ``attnviz heads`` lists them. A pretrained
        model running fused attention sums them block by block, so that a long input's
        whole maps never exist; the numbers are those of the whole maps. With ``answer``,
        each head's effects on it too (:meth:`head_effects`, ``ablate``, ``versus`` and
        ``corrupt`` as there), read in the same pass over the text where the model allows."""
        effects = {"effects": True, "ablate": ablate} if answer is not None else {}
        asked = asking(request, options, statistics=True, **effects)
        given = Input(text, target, pair, answer, versus, corrupt)
        return asked_for(self._one(given, asked).statistics)

    def head_tables(
        self,
        items: Iterable[Item | Input],
        request: Request | None = None,
        *,
        batch_size: int = 16,
        **options: Any,
    ) -> Iterator[HeadTable]:
        """:meth:`head_statistics` of each item, in order, ``batch_size`` items per forward
        pass (as :meth:`extract_many` reads them): what ``attnviz stats`` sums up."""
        _check_batch(items, batch_size, "head_tables", "head_statistics")
        asked = asking(request, options, statistics=True)
        found = self.run(items, asked, batch_size=batch_size)
        return (asked_for(each.statistics) for each in found)

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
        request = Request.of(request, options)
        check_text(prompt, "prompt")
        sampling = Sampling(max_new_tokens, sample, temperature, top_p, seed, stop)
        return self._generate(prompt, sampling, request)

    def _generate(self, prompt: str, sampling: Sampling, request: Request) -> Generation:
        """What :meth:`generate` asks, checked."""
        raise UsageError(f"{self.name} does not generate text: give a pretrained language model")

    def needle(
        self,
        sweep: Sweep,
        haystack: str | None = None,
        progress: Progress = None,
    ) -> NeedleResults:
        """A needle-in-a-haystack sweep (:mod:`attnviz.needle`): each cell's prompt answered
        greedily, and each head's retrieval score and weight on the needle, read while the
        model writes. ``haystack`` is the filler (attnviz's own by default); ``progress`` is
        called after each cell with its number, the number of cells and the cell."""
        if haystack is not None:
            check_text(haystack, "haystack")
        return self._needle(sweep, haystack, progress)

    def _needle(self, sweep: Sweep, haystack: str | None, progress: Progress) -> NeedleResults:
        """What :meth:`needle` asks, checked."""
        raise UsageError(
            f"{self.name} does not write text: needle needs a causal language model "
            "(--model smollm2, --model gemma3, a GPT-2 or Llama folder)"
        )

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
        text, target = without_pair(Input(text, target))
        asked = Explaining(text, target, parse_mode(mode), layer, head, query, raw_pieces)
        return self._explain(asked)

    @abstractmethod
    def _explain(self, asked: Explaining) -> Any:
        """What :meth:`explain` asks, its text and mode checked."""


def parse_mode(mode: Mode | str | None) -> Mode | None:
    return None if mode is None else chosen(Mode, mode, "mode")


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


def _check_batch(inputs: object, batch_size: int, method: str, single: str) -> None:
    if isinstance(inputs, str | bytes):
        raise UsageError(f"{method} reads a list of texts; for one text use {single}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size is a whole number of at least 1, not {batch_size!r}")


def as_input(item: Item | Input, answer: str | None = None) -> Input:
    """An input as given, or made of a text or a (text, target, pair) tuple and the
    ``answer`` it carries: checked."""
    if isinstance(item, Input):
        return item
    if isinstance(item, str):
        return Input(item, answer=answer)
    if not isinstance(item, tuple | list) or not 1 <= len(item) <= 3:
        raise UsageError(
            f"an input is a text, or a tuple (text, target) or (text, target, pair); not {item!r}"
        )
    text, target, pair = (*item, None, None)[:3]
    return Input(text, target, pair, answer)


def without_pair(item: Input) -> tuple[str, str | None]:
    """(text, target) of a checked input, for models that read no sentence pairs."""
    if item.pair is not None:
        raise UsageError("sentence pairs (--pair) are read by pretrained encoders such as BERT")
    return item.text, item.target
