"""What effects on an answer are measured by, at the last position: each
:class:`~attnviz.choices.Measure`'s function of the logits, declared once, or a caller's
function of them (as TransformerLens users write theirs). Its words and unit:
:data:`attnviz.choices.MEASURES`.

Shape letters: B rows of a pass, V the vocabulary, D the model's width.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.choices import MEASURES, Measure
from attnviz.errors import UsageError

if TYPE_CHECKING:
    import torch

# Each measure's function of the last position's logits, (B, vocabulary) float32, the
# answer's and the versus answer's token ids, and the clean run's last logits
# (vocabulary,), where the measure reads them (MEASURES[...].clean): (B,).
MEASURED: dict[Measure, Callable[[Any, int, int | None, Any], Any]] = {
    Measure.LOG_PROB: lambda logits, answer, _versus, _clean: logits.log_softmax(-1)[:, answer],
    Measure.LOGIT_DIFFERENCE: lambda logits, answer, versus, _clean: (
        logits[:, answer] - logits[:, versus]
    ),
    Measure.PROB: lambda logits, answer, _versus, _clean: logits.softmax(-1)[:, answer],
    Measure.PROB_DIFFERENCE: lambda logits, answer, versus, _clean: (
        logits.softmax(-1)[:, answer] - logits.softmax(-1)[:, versus]
    ),
    # KL(clean ‖ run) = Σ p_clean (log p_clean − log p_run), in float64: nearly equal
    # distributions' log-probabilities cancel, and float32's rounding of each (about 1e-7
    # of a log-probability of 10) summed over the vocabulary rivals a small KL
    Measure.KL: lambda logits, _answer, _versus, clean: _kl(clean, logits),
}


def _kl(clean: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(clean ‖ run) of each row of ``logits`` (B, V) from ``clean`` (V,), summed in
    float64: (B,), in the logits' dtype."""
    wide, run = clean.double(), logits.double()
    found = (wide.softmax(-1) * (wide.log_softmax(-1) - run.log_softmax(-1))).sum(-1)
    return found.to(logits.dtype)


@dataclass(frozen=True)
class Metric:
    """What the effects measure at the last position: a :class:`Measure` of the answer
    token (and the versus token) or a caller's function of the logits; None: the
    log-probability, or with a ``versus`` token logit(answer) − logit(versus)."""

    answer_id: int
    versus_id: int | None = None
    # a caller's function takes the last logits, or those and the clean run's
    measure: Measure | Callable[..., Any] | None = None
    clean: torch.Tensor | None = None  # (vocabulary,) the clean run's last logits, float32

    @property
    def reads_clean(self) -> bool:
        """Whether it reads the clean run's next-token distribution (given as ``clean``)."""
        if isinstance(self.measure, Measure):
            return MEASURES[self.measure].clean
        return self.measure is not None and _takes_clean(self.measure)

    @property
    def has_direction(self) -> bool:
        """Whether it is linear in the last logits (a caller's function is not known to
        be): a head's output then has a direction to read it along (dla)."""
        if self.measure is None:
            return True
        return isinstance(self.measure, Measure) and MEASURES[self.measure].direction

    def of(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, vocabulary) last logits -> (B,) the metric of each row."""
        logits = logits.float()
        measure = self.measure
        if measure is None:
            measure = Measure.LOG_PROB if self.versus_id is None else Measure.LOGIT_DIFFERENCE
        assert self.clean is not None or not self.reads_clean  # given by whoever made it
        clean = None if self.clean is None else self.clean.to(logits.device)
        if isinstance(measure, Measure):
            return MEASURED[measure](logits, self.answer_id, self.versus_id, clean)
        return _given_metric(measure, logits, clean)

    def direction(self, unembedding: Any) -> torch.Tensor:
        """(D,) what a residual at the last position adds to the answer's logit (less the
        versus token's) read through the unembedding: W_U[answer], less W_U[versus]."""
        assert self.has_direction  # asked only of a metric with one
        weight = unembedding.weight
        direction = weight[self.answer_id].float()
        return direction if self.versus_id is None else direction - weight[self.versus_id].float()


def _takes_clean(function: Callable[..., Any]) -> bool:
    """Whether a caller's metric takes two arguments: the logits and the clean run's."""
    import inspect

    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the logits alone
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    needed = [p for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty]
    return len(needed) >= 2  # a second argument with a default is the caller's own


def _given_metric(
    function: Callable[..., Any], logits: torch.Tensor, clean: torch.Tensor | None
) -> torch.Tensor:
    """A caller's metric of each row's logits (and the clean run's last logits, where it
    takes them), (B,), or a usage error saying what it gave."""
    import torch

    found = function(logits) if clean is None else function(logits, clean)
    if not isinstance(found, torch.Tensor) or found.shape != logits.shape[:1]:
        shape = tuple(found.shape) if isinstance(found, torch.Tensor) else type(found).__name__
        raise UsageError(
            f"the metric {getattr(function, '__name__', function)!r} gave {shape}: it takes the "
            f"last position's logits, {tuple(logits.shape)}, and gives a number per row, "
            f"({logits.shape[0]},), as a tensor"
        )
    return found.float()
