"""A circuit on a shared machine: `attnviz circuit --model smollm2` over the first IOI pairs,
timed with the machine idle and under an artificial load (processes spinning on cores, as
another user's work holds them), with torch's threads as each setting leaves them.

Why it matters: OpenMP's threads wait for each other at the end of every parallel
operation, spinning (libgomp's default); where another process holds a core, the thread
on it runs only when the scheduler lets it, and every one of a forward pass's thousands
of small operations waits for it. Target: under load, attnviz's default within 1.5x
the time of one thread (OMP_NUM_THREADS=1), and idle no slower than torch's default.

    python benchmarks/threads.py [--pairs 3] [--loads 0,1,2] [--limit 600]

Each setting's time is printed beside one thread's under the same load, in one run; a run
past --limit seconds is stopped and shown as "> limit". --load torch (the default) loads
the cores with other torch processes, each multiplying matrices on every core with torch's
own threads (spinning), as a second job does; --load python with processes spinning in a
loop on one core each.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IOI = Path(__file__).resolve().parent.parent / "sample_texts" / "ioi_pairs.jsonl"
# The settings compared: the environment each run adds (attnviz's default adds none).
SETTINGS = {
    "attnviz's default (OMP_WAIT_POLICY=PASSIVE)": {},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
    "spinning, torch's default (GOMP_SPINCOUNT=300000)": {"GOMP_SPINCOUNT": "300000"},
}
_CHOSEN = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # each setting's own
# The load: a process spinning on one core (python), or another torch process multiplying
# matrices on every core with torch's default threads (torch), as a second attnviz would.
LOADS = {
    "python": "while True: pass",  # one core each
    "torch": "import torch\nx = torch.randn(256, 576)\n"
    "while True: x = (x @ torch.randn(576, 576)).tanh()",
}


def timed(command: list[str], settings: dict[str, str], limit: float) -> float | None:
    """The command's wall time in seconds (None: stopped at ``limit``)."""
    environment = {**_unset(), **settings}
    started = time.perf_counter()
    try:
        subprocess.run(
            command, env=environment, check=True, timeout=limit,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - started


def _unset() -> dict[str, str]:
    """This process's environment without the threads' settings (each run's own)."""
    return {name: value for name, value in os.environ.items() if name not in _CHOSEN}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--loads", default="0,1,2", help="spinning processes, per run")
    parser.add_argument("--limit", type=float, default=600.0)
    parser.add_argument("--load", choices=sorted(LOADS), default="torch")
    arguments = parser.parse_args()
    lines = IOI.read_text(encoding="utf-8").splitlines()[: arguments.pairs]
    with tempfile.TemporaryDirectory() as folder:
        pairs = Path(folder) / "pairs.jsonl"
        pairs.write_text("\n".join(lines) + "\n", encoding="utf-8")
        command = [sys.executable, "-m", "attnviz", "circuit", "--model", "smollm2"]
        command += ["--pairs", str(pairs), "--edges", "100", "-f", "json"]
        timed(command, {"OMP_NUM_THREADS": "1"}, arguments.limit)  # converted, cached
        print(f"{arguments.pairs} IOI pairs, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.2f} before the runs")  # fmt: skip
        print(
            f"| {arguments.load} processes loading the cores | setting | seconds | / one thread |"
        )
        print("| --- | --- | --- | --- |")
        for load in (int(each) for each in arguments.loads.split(",")):
            spin = LOADS[arguments.load]
            spinners = [
                subprocess.Popen([sys.executable, "-c", spin], env=_unset()) for _ in range(load)
            ]
            try:
                found = {name: timed(command, added, arguments.limit)
                         for name, added in SETTINGS.items()}  # fmt: skip
            finally:
                for spinner in spinners:
                    spinner.kill()
                    spinner.wait()
            one = found["OMP_NUM_THREADS=1"]
            for name, seconds in found.items():
                shown = f"> {arguments.limit:.0f}" if seconds is None else f"{seconds:.1f}"
                ratio = "" if seconds is None or one is None else f"{seconds / one:.2f}x"
                print(f"| {load} | {name} | {shown} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
