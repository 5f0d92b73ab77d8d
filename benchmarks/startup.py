"""Start-up cost of `attnviz show`, measured against a bare `import torch` in the same run.

Target (issue 2): `attnviz show "Hello I love you"` takes at most 1.2x the time
of `python -c "import torch"`. `attnviz --help` and `--version` must not pay
for torch at all, so they are compared with a bare `python -c pass`.

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import sys

from common import medians

ATTNVIZ = [sys.executable, "-m", "attnviz"]
SHOW = 'attnviz show "Hello I love you"'
TORCH = "python -c 'import torch'"
COMMANDS = {
    TORCH: [sys.executable, "-c", "import torch"],
    "python -c pass": [sys.executable, "-c", "pass"],
    SHOW: [*ATTNVIZ, "show", "Hello I love you", "--width", "120"],
    "attnviz --help": [*ATTNVIZ, "--help"],
    "attnviz --version": [*ATTNVIZ, "--version"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    median = medians(COMMANDS, parser.parse_args().runs)
    show_ratio = median[SHOW] / median[TORCH]
    print(f"show / import torch = {show_ratio:.2f}x (target <= 1.20x)")
    print(f"--help / python -c pass = {median['attnviz --help'] / median['python -c pass']:.2f}x")
    sys.exit(0 if show_ratio <= 1.2 else 1)


if __name__ == "__main__":
    main()
