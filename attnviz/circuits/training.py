"""How ``circuit --method optimize`` learned its mask (:mod:`attnviz.circuits.optimized`),
as the options ask it and a circuit keeps it. Standard library only: the options and the
circuit both read it."""

from __future__ import annotations

from typing import NamedTuple


class Training(NamedTuple):
    """How ``--method optimize`` learned its mask (:mod:`attnviz.circuits.optimized`):
    ``steps`` of Adam at ``learning_rate``, a pair each, ``sparsity`` the weight of the
    mask's mean in the loss; or, with ``sizes`` (``--train-each``), one training a size,
    each step's pass keeping exactly that many edges and no sparsity term (``sparsity``
    None); and each step's loss, once learned."""

    steps: int
    learning_rate: float
    sparsity: float | None
    losses: tuple[float, ...] = ()
    sizes: tuple[int, ...] = ()
