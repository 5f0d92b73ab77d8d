"""How long the test suite takes, as CI runs it: `make test` (every test but the
integration tests, with coverage), then `make integration` (the real packaged models,
each converted from its GGUF file first, and a Ray cluster).

Target (issue 11): `make test` within 4 minutes on a 2-core machine; the integration
tests' time is reported beside it. Timed here, not in a test: a timed test would fail
on a busy machine for no fault of the code.

    python benchmarks/suite.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TARGET_SECONDS = 240
ROOT = Path(__file__).resolve().parent.parent


def timed(target: str) -> tuple[bool, float]:
    """Run ``make target``; whether it passed, and its seconds. Its last lines are shown."""
    start = time.perf_counter()
    result = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    summary = [line for line in result.stdout.splitlines() if line.startswith(("TOTAL", "="))]
    print("\n".join(summary[-3:]))
    return result.returncode == 0, seconds


def main() -> None:
    passed, seconds = timed("test")
    print(f"make test: {seconds:.0f} s on {os.cpu_count()} cores (target <= {TARGET_SECONDS} s)")
    integrated, more = timed("integration")
    print(f"make integration: {more:.0f} s (no target: minutes of model conversion)")
    sys.exit(0 if passed and integrated and seconds <= TARGET_SECONDS else 1)


if __name__ == "__main__":
    main()
