"""A circuit over pairs read by Ray workers: each worker holds the model and gives back
the sums of one pass over its pairs; :class:`RayPhases` runs the phases of
:mod:`attnviz.circuits.phases` over them (Ray's session and workers:
:mod:`attnviz.distributed`).
"""

from __future__ import annotations

import functools
import json
import pickle
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from attnviz.choices import CircuitMethod
from attnviz.circuits import driver, passes
from attnviz.circuits.ablated import Means
from attnviz.circuits.pairs import as_passes_read, check_pairs
from attnviz.circuits.phases import Edge, Scored
from attnviz.distributed import (
    Workers,
    quiet_progress,
    say_task_warnings,
    use_threads,
    warnings_kept,
)
from attnviz.errors import AttnvizError
from attnviz.inputs import Input
from attnviz.results import Result

if TYPE_CHECKING:
    from attnviz.circuits.ablated import Ablated
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.training import Training
    from attnviz.extractor import Spec
    from attnviz.loading import ExtractorSpec
    from attnviz.pretrained.extractor import PretrainedExtractor
    from attnviz.request import Request


class PassWorker:
    """One worker of ``circuit``: a model; each task gives back the sum of one pass over
    its pairs (pickled), or the one-line error a pair met (a usage error stays one)."""

    def __init__(
        self,
        spec: ExtractorSpec,
        request: Request,
        threads: int,
        count: int,
        names: list[str] | None,
    ) -> None:
        use_threads(threads)
        # a circuit's request is refused by any other model before it reaches a worker
        extractor = cast("PretrainedExtractor", spec.load())
        self.runs_of = passes.PairRuns(extractor, request, count, names)
        self.extractor = extractor

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        (listed,) = batch["task"]  # one task: a JSON list of [place, input's fields]
        pairs = [(index, Input(**fields)) for index, fields in json.loads(listed)]
        # between attnviz's own processes
        phase, argument, ablated = pickle.loads(batch["pass"][0])
        self.runs_of.ablated = ablated
        by_phase = {
            "scored": lambda: passes.scored(self.runs_of, pairs, *argument),
            "exact": lambda: passes.exact_summed(self.runs_of, pairs, argument),
            "measured": lambda: passes.measured_summed(self.runs_of, pairs, argument),
            "optimized": lambda: passes.optimized_over(self.runs_of, pairs, *argument),
            "means": lambda: passes.means_summed(self.runs_of, pairs),
            "promoted": lambda: passes.promoted(self.extractor, argument),
            "graph": lambda: passes.graph_of_model(self.extractor),
            "checked": lambda: passes.pairs_checked(self.runs_of, pairs),
        }
        with warnings_kept() as said:
            try:
                found: Any = by_phase[phase]()
            except AttnvizError as error:
                found = error
        return {"found": [pickle.dumps(found)], "warnings": [json.dumps(said)]}


@dataclass
class RayPhases:
    """The passes of a circuit spread over Ray workers: the pairs cut into tasks, each
    pass a map over them, the sums added here
    (:class:`attnviz.circuits.phases.Phases`)."""

    spec: Spec
    request: Request
    inputs: list[Input]  # as the passes read them (circuits.pairs.as_passes_read)
    names: list[str] | None
    workers: Workers
    ablated: Ablated | None = None  # handed to every task (a worker keeps no state)

    def _summed(
        self, phase: str, argument: Any, first_only: bool = False, whole: bool = False
    ) -> list[Any]:
        """Each task's result of ``phase``: the pairs cut into tasks (the first pair alone
        where ``first_only``; every pair in one task where ``whole``)."""
        import ray.data

        pairs = [[index, asdict(given)] for index, given in enumerate(self.inputs)]
        listed = pairs[:1] if first_only else pairs
        size = len(listed) if whole else max(1, -(-len(listed) // (self.workers.count * 4)))
        passed = pickle.dumps((phase, argument, self.ablated))
        rows = [
            {"task": json.dumps(listed[start : start + size]), "pass": passed}
            for start in range(0, len(listed), size)
        ]
        constructor = {
            "spec": self.spec,
            "request": self.request,
            "threads": self.workers.cpus,
            "count": len(self.inputs),
            "names": self.names,
        }
        results = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            PassWorker,
            fn_constructor_kwargs=constructor,
            batch_size=1,
            **self.workers.map_options(),
        )
        found = []
        for row in results.iter_rows():
            say_task_warnings(row["warnings"])
            value = pickle.loads(row["found"])
            if isinstance(value, AttnvizError):
                raise value
            found.append(value)
        return found

    @property
    def pairs(self) -> int:
        return len(self.inputs)

    def graph(self) -> Graph:
        (graph,) = self._summed("graph", None, first_only=True)
        return graph

    def checked(self) -> None:
        self._summed("checked", None)

    def scored(self, method: CircuitMethod, steps: int | None, bootstrap: int | None) -> Scored:
        parts = self._summed("scored", (method, steps, bootstrap))
        return functools.reduce(Scored.merged, parts)

    def exact(self, edges: list[Edge]) -> np.ndarray:
        return np.sum(self._summed("exact", edges), axis=0)

    def measured(self, kept: np.ndarray) -> np.ndarray:
        return np.sum(self._summed("measured", kept), axis=0)

    def means(self) -> Means:
        return functools.reduce(Means.merged, self._summed("means", None))

    def ablating(self, ablated: Ablated) -> None:
        self.ablated = ablated

    def optimized(
        self, start: np.ndarray, gap: float, training: Training
    ) -> tuple[np.ndarray, Training]:
        # one worker trains: each step's update needs the step before's
        (learned,) = self._summed("optimized", (start, gap, training), whole=True)
        return learned

    def promoted(self, last: np.ndarray) -> tuple[str, ...]:
        (labels,) = self._summed("promoted", last, first_only=True)
        return labels


def circuit_found(
    spec: Spec, inputs: list[Input], request: Request, names: list[str] | None, workers: Workers
) -> Result:
    """A circuit as :meth:`attnviz.extractor.Extractor.run` reads it, the pairs read by
    Ray workers each holding the model ``spec`` loads."""
    quiet_progress()
    request = check_pairs(inputs, request, names)
    options = request.circuit
    assert options is not None  # check_pairs'
    read = as_passes_read(inputs, options)
    phases = RayPhases(spec, request, read, names, workers)
    return Result(inputs[0], circuit=driver.circuit_of(phases, options, inputs))
