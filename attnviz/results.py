"""What one request read of one input: the products it asked for, as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.activations import Activations
    from attnviz.analysis.effects import HeadEffects, Knockout
    from attnviz.analysis.heads import HeadTable
    from attnviz.analysis.lens import Lens
    from attnviz.analysis.trace import Trace
    from attnviz.circuits.circuit import Circuit
    from attnviz.inputs import Input
    from attnviz.maps import AttentionMaps


@dataclass(frozen=True)
class Result:
    """What a request read of one input: each product it asked for, None where not asked.
    A circuit is read of every input of a run together (its pairs): one result, its
    ``input`` the first pair, its ``circuit`` the circuit over all of them."""

    input: Input
    maps: AttentionMaps | None = None
    statistics: HeadTable | None = None  # with the effects joined in where both were asked
    effects: HeadEffects | None = None
    knockout: Knockout | None = None
    trace: Trace | None = None
    lens: Lens | None = None
    circuit: Circuit | None = None
    activations: Activations | None = None
