"""Where batch and stats run, as the command line gives it: --engine, --ray-address and
each Ray worker's share, bundled into one argument."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.choices import Engine
from attnviz.cli import declarations as d
from attnviz.outputs import refuse_unused

if TYPE_CHECKING:
    from attnviz import engines
    from attnviz.cli.output import Environment


@dataclass(frozen=True)
class EngineSettings:
    """Where the work runs, as the command line gives it: each field declares its option."""

    engine: d.EngineOption = Engine.LOCAL
    ray_address: d.RayAddressOption = None
    cpus_per_worker: d.CpusPerWorkerOption = 1
    gpus_per_worker: d.GpusPerWorkerOption = 0.0

    def check(self, jobs: int | None = None) -> None:
        """The Ray options are refused with the local engine, rather than dropped unsaid;
        so is ``jobs`` (None: not given), for a command whose local engine has no use for
        it."""
        if self.engine is not Engine.LOCAL:
            return
        given = d.given_flags(self, among=("ray_address", "cpus_per_worker", "gpus_per_worker"))
        refuse_unused(given, "--engine ray only", "the local engine", "add --engine ray")
        if jobs is not None:
            refuse_unused(["--jobs"], "--engine ray", "the local engine here", "add --engine ray")

    def open(self, jobs: int, environment: Environment) -> engines.Engine:
        """The engine: ``jobs`` is the local engine's processes drawing pictures, or the
        Ray workers, each holding the model."""
        from attnviz import engines
        from attnviz.cli.settings import load_shown

        if self.engine is Engine.RAY:
            workers = engines.Workers(jobs, self.cpus_per_worker, self.gpus_per_worker)
            return engines.Ray(self.ray_address, workers)
        return engines.Local(jobs, functools.partial(load_shown, environment=environment))


# Gives a command the engine options as one ``run_on: EngineSettings`` argument.
engine_settings = d.bundle("run_on", EngineSettings)
LOCAL = EngineSettings()
