"""What a circuit's run says of the circuit it found, each in one line on stderr: a
faithfulness that is not defined or keeps little of the answer, and pruning that moved
it."""

from __future__ import annotations

from attnviz.errors import option, warn

LOW_FAITHFULNESS = 0.1  # a circuit below it is said to keep little of the answer
_PRINTED = 5e-4  # faithfulness is printed to 0.001: a smaller move is not said


def say_faithfulness(
    faithfulness: float | None, edges: int, node_level: bool, ungrouped: bool = False
) -> None:
    """Where the circuit of ``edges`` edges is no circuit to trust, and what to try (of
    what its options take: ``ungrouped`` counts take no other method, selection or level)."""
    if faithfulness is None:
        warn(
            "the corrupted text changes the metric by no more than float32 rounding of its "
            "size: faithfulness is not defined"
        )
    elif edges and faithfulness < LOW_FAITHFULNESS:
        warn(
            f"the circuit of {edges:,} edges keeps {faithfulness:z.3f} of what the corruption "
            f"takes (faithfulness below {LOW_FAITHFULNESS}): try "
            + (
                f"more {option('--nodes')}"
                if node_level
                else f"more {option('--edges')}"
                if ungrouped
                else f"more {option('--edges')}, {option('--method', 'optimize')}, "
                f"{option('--select', 'greedy')}, {option('--level', 'node')}"
            )
            + f", or {option('--curve')} to see where it rises"
        )


def say_pruning_moved(chosen: int, kept: int, before: float | None, after: float | None) -> None:
    """Where pruning the circuit of ``chosen`` edges to ``kept`` moved its faithfulness
    from ``before`` to ``after``: in a model with norms after attention an edge of a dead
    end still counts."""
    if before is None or after is None or abs(after - before) < _PRINTED:
        return
    taken = chosen - kept
    warn(
        f"pruning took {taken:,} dead-end edge{'s' if taken != 1 else ''} out of the circuit "
        f"({chosen:,} → {kept:,}) and moved its faithfulness from {before:z.3f} to "
        f"{after:z.3f}: this model's heads share the norm after attention, so an edge that "
        f"leads nowhere still changes what they carry; {option('--no-prune')} "
        "measures the circuit as chosen"
    )


def say_counted_alike() -> None:
    """Where ``--count ungrouped`` was asked of a model whose query heads have their own
    keys and values: its edges are MIB's as they are."""
    warn(
        f"{option('--count', 'ungrouped')}: this model's query heads have their own keys and "
        "values, so its edges are counted as MIB counts them either way"
    )
