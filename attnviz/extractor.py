"""The :class:`Extractor` interface: one loaded model, turning texts into
:class:`~attnviz.maps.AttentionMaps` for a :class:`~attnviz.request.Request`.

Extractors are made by :func:`attnviz.load` (:mod:`attnviz.loading`), which
knows the built-in stack and pretrained models; this module knows neither, so
that both can build on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from attnviz.analysis.heads import HeadTable
from attnviz.asked import check_asked, no_next_token, no_sites
from attnviz.choices import Ablation, Mode, Site, chosen
from attnviz.circuits.options import circuit_options
from attnviz.circuits.pairs import check_pairs, pairs_given, pairs_of_scores
from attnviz.errors import UsageError
from attnviz.generated import Sampling
from attnviz.inputs import Explaining, Input, Item, as_input, check_batch, check_text, without_pair
from attnviz.progress import Listener, reporting
from attnviz.progress_bars import bars, shown_here
from attnviz.request import Request, asked_for, asking
from attnviz.results import Result
from attnviz.selection import Selection

if TYPE_CHECKING:
    from attnviz.activations import Activations
    from attnviz.analysis.effects import HeadEffects, Knockout
    from attnviz.analysis.heads import HeadTable
    from attnviz.analysis.lens import Lens
    from attnviz.analysis.trace import Trace
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


# Told after each cell of a needle sweep: its number, the number of cells and the cell.
Progress = Callable[[int, int, "Cell"], None] | None
PROBE_LENGTH = 20  # random tokens in each half of the detectors' probe (TransformerLens's)


class Extractor(ABC):
    r"""One loaded model: any number of inputs in, what a request asks of each out.

    :meth:`run` is the one door: a :class:`~attnviz.request.Request` (what to read: maps,
    statistics, effects, a trace, the lens, a knockout, a circuit) and inputs (texts,
    (text, target, pair) tuples or :class:`~attnviz.inputs.Input`\ s) in, a
    :class:`Result` per input out (one for a circuit's pairs). Each method named after a
    product (:meth:`extract`, :meth:`head_effects`, :meth:`circuit`, …) asks it for that
    product of one text; they take the request, or its fields as keyword arguments
    (``mode="masked", layers=0``), checked before any work.
    """

    # What an extractor is, fixed when it is made, are attributes; what it does, methods.
    spec: Spec
    name: str  # the model's name as the maps record it

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
        check_batch(inputs, batch_size, "run", "extract or run([text])")
        self._check(request)
        if request.circuit is not None:
            pairs = [as_input(each) for each in inputs]
            request = check_pairs(pairs, request, names)
            return self._circuit(pairs, request, names, progress)
        checked = (check_asked(request, as_input(each)) for each in inputs)
        return self._batches(checked, request, batch_size, progress)

    def _one(self, given: Input, request: Request) -> Result:
        (found,) = self.run([given], request)
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
        reads_answer = request.knockout is not None or request.trace is not None or request.lens
        if request.activations is not None:
            raise no_sites(self.name)
        if answered or reads_answer:
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
        asked = asking(request, options, maps=True)
        return asked_for(self._one(Input(text, target, pair), asked).maps)

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

    def head_effects(
        self,
        text: str,
        answer: str,
        request: Request | None = None,
        *,
        ablate: Ablation | str = Ablation.ZERO,
        versus: str | None = None,
        corrupt: str | None = None,
        **options: Any,
    ) -> HeadEffects:
        """What each chosen head does to the answer's first token after ``text``: the change
        in the metric with the head ablated (``ablate``: its output zeroed, or replaced by
        its mean over the text) and its direct logit attribution. The metric is the
        answer token's log-probability, or with ``versus`` logit(answer) − logit(versus).
        With ``corrupt`` (the text with a fact changed, as many tokens), each head's
        ``patch`` too: the metric with its clean output put into the corrupted run, less
        the corrupted run's. ``method="gradient"`` estimates ablation and patch from one
        backward pass. A causal language model only."""
        given = Input(text, answer=answer, versus=versus, corrupt=corrupt)
        found = self._one(given, asking(request, options, effects=True, ablate=ablate))
        return asked_for(found.effects)

    def trace(
        self,
        text: str,
        answer: str,
        corrupt: str,
        request: Request | None = None,
        *,
        site: Site | str = Site.RESID,
        by_position: bool = False,
        versus: str | None = None,
        **options: Any,
    ) -> Trace:
        """For each layer and position, how much of the metric (as :meth:`head_effects`
        reads it) comes back when the clean run's activation at ``site`` (``"resid"``, the
        residual stream entering the layer; ``"attn"``; ``"resid_mid"``; ``"mlp"``;
        ``"resid_post"``, the residual stream leaving it) is put into the run on
        ``corrupt`` there: a (layers, positions) ``effect``. At a head's site (``"q"``,
        ``"k"``, ``"v"``, ``"z"``, ``"pattern"``) each head's at every position, (layers, heads), or
        ``by_position``, (layers, heads, positions). A causal language model only."""
        asked = asking(request, options, trace=site, by_position=by_position)
        return asked_for(self._one(Input(text, None, None, answer, versus, corrupt), asked).trace)

    def lens(
        self,
        text: str,
        answer: str | None = None,
        request: Request | None = None,
        **options: Any,
    ) -> Lens:
        """The logit lens: each layer's residual stream, at every position, read through
        the final norm and the unembedding: ``.top`` (the likeliest next token), ``.top_ids``,
        ``.probability`` and, with an ``answer``, ``.answer`` (its first token's
        log-probability), each (layers, positions). A causal language model only."""
        asked = asking(request, options, lens=True)
        return asked_for(self._one(Input(text, answer=answer), asked).lens)

    def activations(
        self,
        text: str,
        sites: Sequence[str] = (),
        request: Request | None = None,
        *,
        positions: Selection = None,
        edits: Mapping[str, Any] | None = None,
        patch_from: str | None = None,
        answer: str | None = None,
        versus: str | None = None,
        target: str | None = None,
        pair: str | None = None,
        **options: Any,
    ) -> Activations:
        """Each site ``sites`` names (``"resid_post"``, ``"a3.h1"``…: the names, shapes and
        edits are :mod:`attnviz.activations`'), read in one run of ``text`` with ``edits``
        in place (``"patch"``: the run on ``patch_from``'s value), at ``positions`` (as
        ``rows`` takes them); ``.metric`` the ``answer``'s in that run, as
        :meth:`head_effects` reads it. No hook outlives the call. The layers are those of
        the stack the mode reads (as :meth:`extract`'s): an encoder-decoder's encoder for
        ``text`` alone, its decoder for a ``target`` (its self-attention, masked, or its
        cross-attention over ``text``); ``pair`` is an encoder's sentence B."""
        rows = {} if positions is None else {"rows": positions}
        asked = asking(request, options | rows, activations=tuple(sites), edits=edits)
        given = Input(text, target, pair, answer=answer, versus=versus, corrupt=patch_from)
        return asked_for(self._one(given, asked).activations)

    def circuit(
        self,
        text: str | None = None,
        answer: str | None = None,
        corrupt: str | None = None,
        request: Request | None = None,
        *,
        versus: str | None = None,
        pairs: Iterable[Input | Mapping[str, str]] | None = None,
        progress: Listener | bool = True,
        **options: Any,
    ) -> Circuit:
        """Every edge between the model's heads and MLPs (:mod:`attnviz.circuits.graph`) scored on
        an answer (docs/effects.md, Circuits): the change in the metric (as
        :meth:`head_effects` reads it) when that edge alone carries ``ablation``'s value
        ("patch": the corrupted run's; "zero", "mean": every node's output replaced in the
        clean text's run), and the circuit chosen by those scores with its faithfulness.
        The circuit's ``options`` are :class:`~attnviz.circuits.options.CircuitOptions`'
        fields (``method="ig", steps=20, edges=50, curve=["mib"], level="node", …``, each
        said there), the others the request's. One ``text`` with its ``answer`` and
        ``corrupt`` twin, or ``pairs`` (each an Input or a mapping of text, answer, versus,
        corrupt): every score the mean over them; none, with ``scores`` (a circuit's JSON
        document), its pairs. A causal language model only. ``progress``: bars on stderr
        where a terminal or a notebook shows them (True), none (False), or a listener told
        each step (:mod:`attnviz.progress`)."""
        circuit, options = circuit_options(options)
        asked = asking(request, options, circuit=circuit)
        given = (
            pairs_of_scores(circuit)
            if text is None and pairs is None and answer is None and circuit.scores is not None
            else pairs_given(text, answer, corrupt, versus, pairs)
        )
        if progress is True and shown_here():  # a person watches: bars on stderr
            with bars() as listener:
                (found,) = self.run(given, asked, progress=listener)
        else:
            (found,) = self.run(given, asked, progress=progress if callable(progress) else None)
        return asked_for(found.circuit)

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
        asked = asking(request, options, knockout=(rows, span), window=window)
        return asked_for(self._one(Input(text, answer=answer), asked).knockout)

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
        chosen_mode = None if mode is None else chosen(Mode, mode, "mode")
        asked = Explaining(text, target, chosen_mode, layer, head, query, raw_pieces)
        return self._explain(asked)

    @abstractmethod
    def _explain(self, asked: Explaining) -> Any:
        """What :meth:`explain` asks, its text and mode checked."""
