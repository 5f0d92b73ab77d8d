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

from attnviz.choices import Measure
from attnviz.errors import UsageError

if TYPE_CHECKING:
    import torch

# Each measure's function of the last position's logits, (B, vocabulary) float32, and the
# answer's and the versus answer's token ids: (B,).
MEASURED: dict[Measure, Callable[[Any, int, int | None], Any]] = {
    Measure.LOG_PROB: lambda logits, answer, _versus: logits.log_softmax(-1)[:, answer],
    Measure.LOGIT_DIFFERENCE: lambda logits, answer, versus: logits[:, answer] - logits[:, versus],
}


@dataclass(frozen=True)
class Metric:
    """What the effects measure at the last position: a :class:`Measure` of the answer
    token (and the versus token) or a caller's function of the logits; None: the
    log-probability, or with a ``versus`` token logit(answer) − logit(versus)."""

    answer_id: int
    versus_id: int | None = None
    measure: Measure | Callable[[Any], Any] | None = None

    def of(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, vocabulary) last logits -> (B,) the metric of each row."""
        logits = logits.float()
        measure = self.measure
        if measure is None:
            measure = Measure.LOG_PROB if self.versus_id is None else Measure.LOGIT_DIFFERENCE
        if isinstance(measure, Measure):
            return MEASURED[measure](logits, self.answer_id, self.versus_id)
        return _given_metric(measure, logits)

    def direction(self, unembedding: Any) -> torch.Tensor:
        """(D,) what a residual at the last position adds to the answer's logit (less the
        versus token's) read through the unembedding: W_U[answer], less W_U[versus]."""
        weight = unembedding.weight
        direction = weight[self.answer_id].float()
        return direction if self.versus_id is None else direction - weight[self.versus_id].float()


def _given_metric(function: Callable[[Any], Any], logits: torch.Tensor) -> torch.Tensor:
    """A caller's metric of each row's logits, (B,), or a usage error saying what it gave."""
    import torch

    found = function(logits)
    if not isinstance(found, torch.Tensor) or found.shape != logits.shape[:1]:
        shape = tuple(found.shape) if isinstance(found, torch.Tensor) else type(found).__name__
        raise UsageError(
            f"the metric {getattr(function, '__name__', function)!r} gave {shape}: it takes the "
            f"last position's logits, {tuple(logits.shape)}, and gives a number per row, "
            f"({logits.shape[0]},), as a tensor"
        )
    return found.float()
