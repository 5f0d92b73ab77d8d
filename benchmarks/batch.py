"""Heatmaps per second written by `attnviz batch` as PNG, against one matplotlib figure per
heatmap, measured side by side in one run.

Target (issue 4): at least 5x the naive baseline with --jobs 1 and 10x with --jobs 2.

The naive baseline draws each heatmap the plain way: plt.subplots, imshow, tick
labels, colour bar, title, savefig, close, at the same figure size and dpi as
attnviz's picture of that map. It is timed over a sample of the same maps.
`attnviz batch` is timed as a whole process, start-up, model and all.

    python benchmarks/batch.py [--inputs 120] [--sample 80]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnviz.panels import panels_of

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts" / "sentences.txt"


def naive_rate(maps_list, sample: int, folder: Path) -> float:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnviz.render.layout import head_figure_size
    from attnviz.render.style import Style

    jobs = [(maps, panel) for maps in maps_list for panel in panels_of(maps)][:sample]
    started = time.perf_counter()
    for number, (maps, panel) in enumerate(jobs):
        size = head_figure_size(len(maps.query_tokens), len(maps.key_tokens))
        figure, axes = plt.subplots(figsize=size, dpi=Style().dpi)
        image = axes.imshow(panel.matrix, cmap="viridis", vmin=0, vmax=1)
        axes.set_xticks(range(len(maps.key_tokens)), maps.key_tokens, rotation=90)
        axes.set_yticks(range(len(maps.query_tokens)), maps.query_tokens)
        figure.colorbar(image, ax=axes)
        figure.suptitle(f"{maps.model} · {maps.mode} attention", fontsize=9)
        axes.set_title(panel.title, fontsize=9)
        figure.savefig(folder / f"naive-{number}.png", dpi=Style().dpi)
        plt.close(figure)
    return len(jobs) / (time.perf_counter() - started)


def batch_rate(inputs: Path, folder: Path, jobs: int, heatmaps: int) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "attnviz", "batch", str(inputs), "-o", str(folder),
         "-f", "png", "--jobs", str(jobs), "--quiet"],
        check=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    written = len(list(folder.glob("*.png")))
    assert written == heatmaps, f"expected {heatmaps} pictures, found {written}"
    return heatmaps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=120)
    parser.add_argument("--sample", type=int, default=80)
    arguments = parser.parse_args()
    import attnviz

    sentences = SAMPLES.read_text().splitlines()
    texts = [f"{sentences[i % len(sentences)]}" for i in range(arguments.inputs)]
    maps_list = [attnviz.extract(text) for text in texts]
    heatmaps = sum(maps.weights.shape[0] * maps.weights.shape[1] for maps in maps_list)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        inputs = root / "inputs.txt"
        inputs.write_text("\n".join(texts) + "\n")
        (root / "naive").mkdir()
        naive = naive_rate(maps_list, arguments.sample, root / "naive")
        one = batch_rate(inputs, root / "jobs1", 1, heatmaps)
        two = batch_rate(inputs, root / "jobs2", 2, heatmaps)
    print(f"{arguments.inputs} inputs, {heatmaps} heatmaps (PNG, builtin stack, view head)")
    print(f"naive matplotlib, a figure per heatmap: {naive:7.1f} heatmaps/s")
    print(f"attnviz batch --jobs 1:                 {one:7.1f} heatmaps/s = {one / naive:5.1f}x")
    print(f"attnviz batch --jobs 2:                 {two:7.1f} heatmaps/s = {two / naive:5.1f}x")
    print("targets: >= 5x with --jobs 1, >= 10x with --jobs 2")
    sys.exit(0 if one >= 5 * naive and two >= 10 * naive else 1)


if __name__ == "__main__":
    main()
