"""What an extractor reads of an answer after a text (a causal language model's next
token): each head's effects on it, a trace, the logit lens, a knockout and a circuit, each
a method that asks :meth:`~attnviz.extractor.Extractor.run` for that product alone.

:class:`AnswerReadings` is a part of :class:`~attnviz.extractor.Extractor`, kept apart by
concern.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from attnviz.choices import (
    Ablation,
    CircuitMethod,
    Intervention,
    Level,
    Select,
    Site,
    chosen,
)
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.pairs import pairs_given, pairs_of_scores
from attnviz.errors import UsageError
from attnviz.progress import Listener
from attnviz.progress_bars import bars, shown_here
from attnviz.request import Input, Request, asked_for
from attnviz.selection import Selection

if TYPE_CHECKING:
    from attnviz.analysis.effects import HeadEffects, Knockout
    from attnviz.analysis.lens import Lens
    from attnviz.analysis.trace import Trace
    from attnviz.circuits.circuit import Circuit
    from attnviz.results import Result


class AnswerReadings(ABC):
    """The methods of an extractor that read an answer: each asks :meth:`run` for one
    product of one text (or, for a circuit, of pairs of texts)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name as the maps record it."""

    @abstractmethod
    def _one(self, given: Input, request: Request) -> Result:
        """What ``request`` asks of one input (:meth:`~attnviz.extractor.Extractor.run`)."""

    @abstractmethod
    def _together(self, inputs: list[Input], request: Request, progress: Listener | None) -> Result:
        """What ``request`` asks of every input together: a circuit over its pairs."""

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
        asked = asking(request, options, effects=True, ablate=ablate)
        given = Input(text, answer=answer, versus=versus, corrupt=corrupt)
        return asked_for(self._one(given, asked).effects)

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
        given = Input(text, answer=answer, versus=versus, corrupt=corrupt)
        return asked_for(self._one(given, asked).trace)

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

    def circuit(
        self,
        text: str | None = None,
        answer: str | None = None,
        corrupt: str | None = None,
        request: Request | None = None,
        *,
        versus: str | None = None,
        pairs: Iterable[Input | Mapping[str, str]] | None = None,
        method: CircuitMethod | str = CircuitMethod.GRADIENT,
        steps: int | None = None,
        edges: int | str | None = None,
        curve: Sequence[int | str] = (),
        refine: int | None = None,
        select: Select | str = Select.TOP,
        threshold: float | None = None,
        prune: bool = True,
        scores: str | None = None,
        level: Level | str = Level.EDGE,
        nodes: int | str | None = None,
        bootstrap: int | None = None,
        train_steps: int | None = None,
        learning_rate: float | None = None,
        sparsity: float | None = None,
        train_each: bool = False,
        ablation: Intervention | str = Intervention.PATCH,
        progress: Listener | bool = True,
        **options: Any,
    ) -> Circuit:
        """Every edge between the model's heads and MLPs (:mod:`attnviz.circuits.graph`) scored on
        an answer (docs/effects.md, Circuits): the change in the metric (as
        :meth:`head_effects` reads it) when that edge alone carries ``ablation``'s value
        ("patch": the corrupted run's; "zero", "mean": every node's output replaced in the
        clean text's run), by ``method`` ("exact", "gradient": EAP, "ig": EAP-IG with
        ``steps`` points; ``refine`` K: the estimate's top K again exactly; "optimize": a mask
        learned from EAP-IG's scores in ``train_steps`` of Adam at ``learning_rate``,
        ``sparsity`` the weight of its mean; with ``train_each`` and a ``curve``, a mask
        trained at each size, each circuit inside the next, each pass keeping exactly its
        size's edges); the circuit chosen by ``select`` ("top": the
        ``edges`` largest |scores|, 100 by default, "all", 0…; "greedy": EAP-IG's; "threshold":
        |score| at least ``threshold``), its dead ends out if ``prune``, and its
        faithfulness, and each size of ``curve`` (or ["mib"]: MIB's ten fractions, CPR and
        CMD in :attr:`Circuit.areas`); ``level`` "node" chooses ``nodes`` heads and MLPs by
        their own scores and keeps the edges between them; ``scores``, a circuit's JSON
        document over the same pairs, gives the scores without scoring again; ``bootstrap`` B
        bootstraps every score over B resamples of the pairs. One ``text`` with its
        ``answer`` and ``corrupt`` twin, or ``pairs`` (each an Input or a mapping of text,
        answer, versus, corrupt): every score the mean over them. A causal language model
        only. ``progress``: bars on stderr where a terminal or a notebook shows them (True),
        none (False), or a listener told each step (:mod:`attnviz.progress`)."""
        circuit = CircuitOptions(
            method=chosen(CircuitMethod, method, "method"),
            steps=steps,
            edges=edges,
            curve=tuple(curve),
            refine=refine,
            select=chosen(Select, select, "selection"),
            threshold=threshold,
            prune=prune,
            scores=scores,
            level=chosen(Level, level, "level"),
            nodes=nodes,
            bootstrap=bootstrap,
            train_steps=train_steps,
            learning_rate=learning_rate,
            sparsity=sparsity,
            train_each=train_each,
            ablation=chosen(Intervention, ablation, "ablation"),
        )
        asked = asking(request, options, circuit=circuit)
        given = (
            pairs_of_scores(circuit)
            if text is None and pairs is None and answer is None and scores is not None
            else pairs_given(text, answer, corrupt, versus, pairs)
        )
        if progress is True and shown_here():  # a person watches: bars on stderr
            with bars() as listener:
                return asked_for(self._together(given, asked, listener).circuit)
        told = progress if callable(progress) else None
        return asked_for(self._together(given, asked, told).circuit)

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


def no_next_token(model: str, reader: str = "--answer") -> UsageError:
    """The refusal by a model that predicts no next token of what reads one: ``reader``
    names what was asked (``--answer``, ``the lens``)."""
    return UsageError(
        f"{model} has no next token to read: {reader} needs a causal language model "
        "(--model smollm2, a GPT-2 or Llama folder); the built-in stack has no unembedding"
    )


def asking(request: Request | None, options: dict[str, Any], **asked: Any) -> Request:
    """The request of a method named after what it reads: ``request`` (or one made of
    ``options``) asking for ``asked`` alone."""
    products: dict[str, Any] = {"maps": False, "statistics": False, "effects": False}
    products |= {"knockout": None, "trace": None, **asked}
    if request is None:  # made whole, so that it is checked with what it asks
        return Request.of(None, {**options, **products})
    return replace(Request.of(request, options), **products)
