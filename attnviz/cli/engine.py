"""Where batch and stats run, as the command line gives it: --engine, --ray-address and
each Ray worker's share, bundled into one argument."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.choices import Engine
from attnviz.cli import declarations as d
from attnviz.cli.bundles import bundle, given_flags
from attnviz.cli.settings import load_shown
from attnviz.outputs import refuse_unused

if TYPE_CHECKING:
    from attnviz import engines
    from attnviz.cli.environment import Environment


EngineOption = Annotated[
    Engine,
    d.in_scale(
        "--engine",
        metavar="ENGINE",
        case_sensitive=False,
        help="local: this machine. ray: Ray workers, each holding the model (--jobs of them), "
        "on the cluster at --ray-address or on a local Ray. Needs attnviz[ray].",
    ),
]
RayAddressOption = Annotated[
    str | None,
    d.in_scale(
        "--ray-address",
        metavar="ADDRESS",
        help=(
            "A running Ray cluster to join (host:port, or auto: the one on this machine);"
            " without it (or RAY_ADDRESS) a local Ray starts and stops with the command."
            " A cluster with token authentication (Ray 2.59 on) also needs"
            " RAY_AUTH_MODE=token."
        ),
    ),
]
CpusPerWorkerOption = Annotated[
    int,
    d.in_scale(
        "--num-cpus-per-worker",
        metavar="N",
        min=1,
        help="CPUs each Ray worker holds; torch runs that many threads in it. Files equal a "
        "local run's with as many torch threads (OMP_NUM_THREADS=N).",
    ),
]
GpusPerWorkerOption = Annotated[
    float,
    d.in_scale(
        "--num-gpus-per-worker",
        parser=d.number(0.0),
        metavar="N",
        help="GPUs each Ray worker holds, 0 or more (0.5: two workers share one GPU).",
    ),
]


JobsOption = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        metavar="N",
        min=1,
        max=1024,
        show_default="2",
        help="With --engine ray: Ray workers, each holding the model.",
    ),
]


@dataclass(frozen=True)
class EngineSettings:
    """Where the work runs, as the command line gives it: each field declares its option."""

    engine: EngineOption = Engine.LOCAL
    ray_address: RayAddressOption = None
    cpus_per_worker: CpusPerWorkerOption = 1
    gpus_per_worker: GpusPerWorkerOption = 0.0

    def check(self, jobs: int | None = None) -> None:
        """The Ray options are refused with the local engine, rather than dropped unsaid;
        so is ``jobs`` (None: not given), for a command whose local engine has no use for
        it."""
        if self.engine is not Engine.LOCAL:
            return
        given = given_flags(self, among=("ray_address", "cpus_per_worker", "gpus_per_worker"))
        refuse_unused(given, "--engine ray only", "the local engine", "add --engine ray")
        if jobs is not None:
            refuse_unused(["--jobs"], "--engine ray", "the local engine here", "add --engine ray")

    def open(self, jobs: int, environment: Environment) -> engines.Engine:
        """The engine: ``jobs`` is the local engine's processes drawing pictures, or the
        Ray workers, each holding the model."""
        from attnviz import engines  # numpy: after the options are checked

        if self.engine is Engine.RAY:
            workers = engines.Workers(jobs, self.cpus_per_worker, self.gpus_per_worker)
            return engines.Ray(self.ray_address, workers)
        return engines.Local(jobs, functools.partial(load_shown, environment=environment))


# Gives a command the engine options as one ``run_on: EngineSettings`` argument.
engine_settings = bundle("run_on", EngineSettings)
LOCAL = EngineSettings()
