"""``--select ilp``: the circuit of exactly N edges of largest kept |score| among the
circuits without a dead end, found as an integer linear program (the 2025 MIB shared
task's replacement of greedy selection, Nikankin et al., "Improving Circuit Faithfulness
via Better Edge Selection"), solved by scipy's HiGHS (``scipy.optimize.milp``).

The program: a 0/1 variable x_e for each edge and y_v for each head and MLP (the input
node is always there); maximise Σ |score_e| x_e subject to Σ x_e = N; an edge only from a
node kept (x_e ≤ y_u, the input excepted) and only into an input of one (x_e ≤ Σ y_v over
the nodes reading it: a key/value input is every query head's of its group; the logits
excepted); a node kept only where a kept edge leaves it and one enters one of its inputs.
Its circuits are those :func:`attnviz.circuits.selections.pruned` leaves as they are:
every path from the input to the logits, none ending before.

Shape letters: U upstream nodes, N downstream nodes, E edges, V the heads and MLPs.
"""

from __future__ import annotations

import numpy as np

from attnviz.circuits.graph import Graph
from attnviz.errors import UsageError

# The largest graph the program is set up for: Gemma 3 270M's 5,644 edges (and the tests'
# tiny models) fit; on SmolLM2's 70,651 HiGHS had not solved the circuit of 70 edges after
# six minutes on two cores (python -m benchmarks.ilp --model smollm2, 2026-12-04).
MOST_ILP_EDGES = 10_000
TIME_LIMIT = 600.0  # seconds HiGHS may take for one circuit before the command gives up


def check_ilp_size(graph: Graph) -> None:
    """A graph too large for the program refused in one line, before any pass."""
    if graph.count > MOST_ILP_EDGES:
        raise UsageError(
            f"--select ilp solves a program of a variable per edge: this model's graph has "
            f"{graph.count:,} edges, more than the {MOST_ILP_EDGES:,} it is set up for; give "
            "--select top or greedy"
        )


def ilp_circuit(graph: Graph, magnitude: np.ndarray, count: int) -> np.ndarray:
    """(U, N) bool: the ``count`` edges of largest summed ``magnitude`` (U, N) that form a
    circuit without a dead end (the module's program)."""
    from scipy.optimize import LinearConstraint, milp  # only where an ILP is asked
    from scipy.sparse import coo_array

    mask = np.zeros(graph.edges.shape, dtype=bool)
    if count == 0:
        return mask
    upstream, downstream = graph.edge_list()  # (E,) each
    edges, nodes = len(upstream), len(graph.upstream) - 1  # y_v for upstream nodes 1…U-1
    rows: list[np.ndarray] = []
    columns: list[np.ndarray] = []
    values: list[np.ndarray] = []
    bounds: list[float] = []

    def at_most_zero(row_of: np.ndarray, column: np.ndarray, value: float) -> None:
        rows.append(row_of)
        columns.append(column)
        values.append(np.full(len(row_of), value))

    # x_e ≤ y_u: an edge leaves a node kept (the input node needs no variable)
    leaving = np.flatnonzero(upstream > 0)
    first = len(bounds)
    at_most_zero(first + np.arange(len(leaving)), leaving, 1.0)
    at_most_zero(first + np.arange(len(leaving)), edges + upstream[leaving] - 1, -1.0)
    bounds += [0.0] * len(leaving)
    # x_e ≤ Σ y_v over the nodes v reading the edge's downstream input (not the logits)
    entering = np.flatnonzero(downstream < len(graph.downstream) - 1)
    first = len(bounds)
    at_most_zero(first + np.arange(len(entering)), entering, 1.0)
    place, reader = np.nonzero(graph.inputs.T[downstream[entering]])  # (E', U): v reads d
    at_most_zero(first + place, edges + reader - 1, -1.0)
    bounds += [0.0] * len(entering)
    # y_v ≤ Σ x_e leaving v, and y_v ≤ Σ x_e entering one of v's inputs
    for node in range(1, nodes + 1):
        for touching in (upstream == node, graph.inputs[node][downstream]):
            row = len(bounds)
            at_most_zero(np.array([row]), np.array([edges + node - 1]), 1.0)
            touched = np.flatnonzero(touching)
            at_most_zero(np.full(len(touched), row), touched, -1.0)
            bounds.append(0.0)
    matrix = coo_array(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
        shape=(len(bounds), edges + nodes),
    ).tocsr()
    size = LinearConstraint(np.concatenate([np.ones(edges), np.zeros(nodes)])[None], count, count)
    linked = LinearConstraint(matrix, -np.inf, np.array(bounds))
    gains = np.concatenate([-magnitude[upstream, downstream], np.zeros(nodes)])
    found = milp(
        gains,
        constraints=[size, linked],
        integrality=np.ones(edges + nodes),
        bounds=(0, 1),
        # the optimum itself: HiGHS otherwise stops within 0.01% of it
        options={"time_limit": TIME_LIMIT, "mip_rel_gap": 0.0},
    )
    if found.status != 0 or found.x is None:
        raise UsageError(
            f"--select ilp found no circuit of exactly {count:,} edges without a dead end "
            f"({found.message.strip().rstrip('.')}): give another size, or --select top"
        )
    taken = found.x[:edges] > 0.5
    mask[upstream[taken], downstream[taken]] = True
    return mask
