"""What heads do to an answer, as data: the answer and its metric (:class:`Answer`), each
head's ablation, direct logit attribution and patch effects (:class:`HeadEffects`), and an
attention knockout's change per layer (:class:`Knockout`). Their pictures are drawn above
them (:mod:`attnviz.drawing`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import MEASURES, Ablation, Measure, Method, Output
from attnviz.drawing import drawer
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from attnviz.drawing import Picture

MEASURE_NAMES = frozenset(Measure)  # a StrEnum's members are their names


@dataclass(frozen=True)
class Answer:
    """What effects are measured on: the answer's first token after the text and, with a
    versus answer, its first token too; the metric is the answer token's log-probability,
    or logit(answer) − logit(versus)."""

    answer: str
    answer_token: str  # as the tokenizer spells it
    log_prob: float  # the answer token's clean log-probability (natural log)
    versus: str | None = None
    versus_token: str | None = None
    clean_metric: float | None = None  # None: the log-probability
    corrupt: str | None = None  # the corrupted text, where effects are patched from it
    corrupt_metric: float | None = None
    method: Method = Method.EXACT
    # Patch effects given as the fraction of the corruption's change they bring back,
    # (patched − corrupted) / (clean − corrupted), not in the metric's units.
    normalized: bool = False
    rank: int | None = None  # the answer token's place among the next tokens (1: likeliest)
    # The model's likeliest next tokens after the text, with their probabilities.
    predictions: tuple[tuple[str, float], ...] = ()

    # the measure's name (a Measure's value, or a caller's function's name); None: the
    # log-probability, or with a versus answer the logit difference
    measure: str | None = None
    text: str | None = None  # the text read, for a picture's title (None: not known)

    @property
    def metric_name(self) -> str:
        if self.measure is not None:
            return self.measure
        return Measure.LOG_PROB if self.versus is None else Measure.LOGIT_DIFFERENCE

    @property
    def metric_label(self) -> str:
        """What the effects measure, in words: a measure's label with the tokens in it."""
        if self.metric_name not in MEASURE_NAMES:
            return f"metric {self.metric_name}"
        label = MEASURES[Measure(self.metric_name)].label
        return label.format(answer=repr(self.answer_token), versus=repr(self.versus_token))

    def unit(self) -> str:
        """A change in the metric, with its unit where the measure has one."""
        if self.metric_name not in MEASURE_NAMES:
            return f"change in {self.metric_name}"
        measured = MEASURES[Measure(self.metric_name)]
        return f"change in {measured.short} ({measured.unit})"

    @property
    def probability(self) -> float:
        return math.exp(self.log_prob)

    @property
    def measure_given(self) -> bool:
        """True where the metric is not the default for the answer (log-probability)."""
        return self.metric_name != Measure.LOG_PROB

    def corruption(self) -> float:
        """clean − corrupted: what the corruption took of the metric, by which patch
        effects are normalised (refused where it is 0: nothing was taken)."""
        if self.clean_metric is None or self.corrupt_metric is None:
            raise UsageError("--normalize reads patch effects as a fraction: give --corrupt")
        change = self.clean_metric - self.corrupt_metric
        if change == 0:
            raise UsageError(
                f"the corrupted text leaves the metric as it was ({self.clean_metric:z.4g}): no "
                "fraction of its change can be recovered (--normalize needs a corruption "
                "that moves it)"
            )
        return change

    def fields(self) -> dict[str, object]:
        """What a table of effects on it records beside its rows (the metric's fields only
        where a versus answer, a corrupted text or the gradient method made them)."""
        found: dict[str, object] = {
            "answer": self.answer,
            "answer_token": self.answer_token,
            "answer_log_prob": self.log_prob,
        }
        if self.rank is not None:
            found |= {"answer_rank": self.rank, "answer_probability": self.probability}
        if self.versus is not None:
            found |= {"versus": self.versus, "versus_token": self.versus_token}
        if self.versus is not None or self.corrupt is not None or self.measure_given:
            found |= {"metric": self.metric_name, "clean_metric": self.clean_metric}
        if self.corrupt is not None:
            found |= {"corrupt": self.corrupt, "corrupt_metric": self.corrupt_metric}
        if self.method is not Method.EXACT:
            found["method"] = self.method.value
        if self.normalized:
            found["normalized"] = True
        return found


class Drawn:
    """A result that draws itself (effects, a trace, a knockout): :meth:`save` writes its
    picture by the suffix of a path, and a notebook shows the picture, not the arrays."""

    def picture(self, *args: Any, **options: Any) -> Picture:  # each its own options
        raise NotImplementedError

    def save(self, path: str | Path, **options: Any) -> None:
        """:meth:`picture` (with ``options``) written to ``path`` (.png, .svg or .pdf),
        whole or not at all."""
        drawer().save_figure(path, lambda kind: self.picture(format=kind, **options))

    def _repr_png_(self) -> bytes | None:
        return self.picture()._repr_png_()


@dataclass(frozen=True)
class HeadEffects(Drawn):
    """Each chosen head's effect on one answer token: ``ablation`` and ``dla``, and with a
    corrupted text ``patch``, (L, H) float64 in the order of ``layers`` and ``heads``."""

    on: Answer
    ablate: Ablation
    layers: list[int]
    heads: list[int]
    ablation: np.ndarray | None  # (L, H); None with --ablate none
    dla: np.ndarray | None  # (L, H); None for a metric not linear in the logits
    patch: np.ndarray | None = None  # (L, H)

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        columns = ", ".join(
            name for name in ("ablation", "dla", "patch") if getattr(self, name) is not None
        )
        return (
            f"<HeadEffects on answer {self.on.answer_token!r} (log-probability "
            f"{self.on.log_prob:z.3f}): {len(self.layers)} layers × {len(self.heads)} heads, "
            f"{columns}>"
        )

    def picture(
        self, column: str | None = None, format: Output | str = "png", **style: Any
    ) -> Picture:
        """The layers × heads grid ``heads --picture`` draws of one effect: ``column``
        ablation, dla or patch (by default patch, else ablation, else dla), in
        diverging colours centred on 0. ``style``: ``dpi``, ``figsize``, ``font_size``,
        ``title``, as export's options. ``.data`` holds the bytes; a notebook shows it."""
        return drawer().effects_figure(self, column, format, style)

    @property
    def answer(self) -> str:
        return self.on.answer

    @property
    def answer_token(self) -> str:
        return self.on.answer_token

    @property
    def log_prob(self) -> float:
        return self.on.log_prob

    def normalized(self) -> HeadEffects:
        """The patch effects as the fraction of the corruption's change each head brings
        back, (patched − corrupted) / (clean − corrupted): 1 all of it, 0 none (the IOI
        paper's and TransformerLens's tutorials' reading); ablation and dla as they are."""
        if self.patch is None:
            raise UsageError("--normalize reads patch effects as a fraction: give --corrupt")
        on = replace(self.on, normalized=True)
        return replace(self, on=on, patch=self.patch / self.on.corruption())

    def drawn_column(self) -> str:
        """The effect a picture draws unless told: patch, else ablation, else dla."""
        return next(
            name for name in ("patch", "ablation", "dla") if getattr(self, name) is not None
        )

    def of(self, layer: int, head: int) -> dict[str, float]:
        """One head's effects by column name."""
        row, column = self.layers.index(layer), self.heads.index(head)
        found = {
            name: float(values[row, column])
            for name, values in (
                ("ablation", self.ablation),
                ("dla", self.dla),
                ("patch", self.patch),
            )
            if values is not None
        }
        return found

    def fields(self) -> dict[str, object]:
        """What a table of these effects records beside its rows."""
        return {**self.on.fields(), "ablate": self.ablate.value}


@dataclass(frozen=True)
class Knockout(Drawn):
    """The answer's log-probability change when some query rows may not read some keys,
    in a window of layers around each chosen layer."""

    answer: str
    answer_token: str
    log_prob: float  # the clean log-probability
    rows: list[int]  # the query rows that may not read
    span: list[int]  # the keys they may not read
    window: int  # how many layers each knockout spans
    layers: list[int]  # the layer each window is centred on
    windows: list[tuple[int, int]]  # the first and last layer of each window
    change: np.ndarray  # (L,) natural log

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        return (
            f"<Knockout on answer {self.answer_token!r}: rows {self.rows} may not read keys "
            f"{self.span}, {self.window} layer(s) at a time, {len(self.layers)} layers>"
        )

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The change in the answer's log-probability for each layer's window, as bars
        (``heads --knockout --picture`` draws it). ``style``: ``dpi``, ``figsize``,
        ``font_size``, ``title``, as export's options. A notebook shows it."""
        return drawer().knockout_figure(self, format, style)

    def records(self) -> list[dict[str, object]]:
        """A row per window: its layer, the layers it knocks out and the change."""
        return [
            {"layer": layer, "first": first, "last": last, "knockout": float(change)}
            for layer, (first, last), change in zip(
                self.layers, self.windows, self.change, strict=True
            )
        ]

    def fields(self) -> dict[str, object]:
        """What a table of these windows records beside its rows."""
        return {
            "answer": self.answer,
            "answer_token": self.answer_token,
            "answer_log_prob": self.log_prob,
            "knockout_rows": self.rows,
            "knockout_span": self.span,
            "window": self.window,
        }
