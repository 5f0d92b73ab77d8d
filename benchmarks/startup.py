"""Start-up cost of attnviz, measured against bare imports in the same run.

Targets: `attnviz show "Hello I love you"` at most 1.2x `python -c "import torch"`
(it needs torch); `attnviz --help` at most 1.3x `python -c "import typer, rich"`
(it needs nothing more); a usage error (`attnviz show ""`) imports no torch, so
it takes a fraction of `import torch` (at most 0.25x; typer 0.29 itself
imports pydantic to convert a command's arguments, about 0.1 s here).

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import sys

from common import medians

ATTNVIZ = [sys.executable, "-m", "attnviz"]
SHOW = 'attnviz show "Hello I love you"'
TORCH = "python -c 'import torch'"
TYPER = "python -c 'import typer, rich'"
HELP = "attnviz --help"
USAGE_ERROR = "attnviz show '' (usage error)"
COMMANDS = {
    TORCH: [sys.executable, "-c", "import torch"],
    TYPER: [sys.executable, "-c", "import typer, rich"],
    SHOW: [*ATTNVIZ, "show", "Hello I love you", "--width", "120"],
    HELP: [*ATTNVIZ, "--help"],
    "attnviz show --help": [*ATTNVIZ, "show", "--help"],
    USAGE_ERROR: [*ATTNVIZ, "show", ""],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    median = medians(COMMANDS, parser.parse_args().runs, check=False)
    ratios = {
        "show / import torch (target <= 1.20x)": (median[SHOW] / median[TORCH], 1.2),
        "--help / import typer, rich (target <= 1.30x)": (median[HELP] / median[TYPER], 1.3),
        "show '' / import torch (target <= 0.25x)": (median[USAGE_ERROR] / median[TORCH], 0.25),
    }
    for name, (ratio, _) in ratios.items():
        print(f"{name:50} {ratio:.2f}x")
    sys.exit(0 if all(ratio <= target for ratio, target in ratios.values()) else 1)


if __name__ == "__main__":
    main()
