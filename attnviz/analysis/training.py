"""How ``circuit --method optimize`` learned its mask (:mod:`attnviz.pretrained.optimized`),
as the options ask it and a circuit keeps it. Standard library only: the options and the
circuit both read it."""

from __future__ import annotations

from typing import NamedTuple


class Training(NamedTuple):
    """How ``--method optimize`` learned its mask (:mod:`attnviz.pretrained.optimized`):
    ``steps`` of Adam at ``learning_rate``, a pair each, ``sparsity`` the weight of the
    mask's mean in the loss; and each step's loss, once learned."""

    steps: int
    learning_rate: float
    sparsity: float
    losses: tuple[float, ...] = ()
