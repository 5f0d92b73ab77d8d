"""Checks several test modules make the same way: a usage error's one line, a batch
folder's records, a page opened in the browser."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def failed_in_process(result, code: int, message: str) -> None:
    """A CliRunner result: the code, one error line on stderr, nothing on stdout."""
    assert result.exit_code == code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), result.stderr
    assert message in lines[0]


def manifest(folder: Path, name: str = "manifest.jsonl") -> list[dict]:
    """The records (an interrupted run's manifest begins with its claim, no record)."""
    lines = (json.loads(line) for line in (folder / name).read_text().splitlines())
    return [line for line in lines if "index" in line]


def unrecorded(folder: Path) -> set[str]:
    """The files in a batch's folder that none of its manifests records: none, always."""
    records = [
        record for path in folder.glob("manifest*.jsonl") for record in manifest(folder, path.name)
    ]
    recorded = {name for record in records for name in record["files"]}
    manifests = {path.name for path in folder.glob("manifest*.jsonl")}
    return {path.name for path in folder.iterdir()} - recorded - manifests


def open_page(browser, path):
    browser.get(path.as_uri())
    assert browser.execute_script("return document.body.dataset.ready") == "true"
    return browser


def page_errors(browser) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


# float32 keeps 24 bits. Two computations of one value that add the same products in
# another order (another kernel, thread count or vector width: AVX2 on one CPU, AVX-512
# on another) differ by rounding alone, which grows like the square root of a sum's
# length when the errors are random (Higham, Accuracy and Stability of Numerical
# Algorithms, ch. 4) and adds up through the layers that feed the value.
FLOAT32_EPSILON = float(np.finfo(np.float32).eps)


def float32_tolerance(terms: int, layers: int = 1) -> float:
    """The absolute difference two float32 computations of a value of order one may show
    when each layer of the ``layers`` feeding it sums up to ``terms`` products: an
    attention weight of a model whose longest sum (its MLP's width) is ``terms``. On
    MiniLM (1,536 terms, 6 layers) it is 2.8e-5, twenty times the largest difference
    seen (1.25e-6, one thread, AMD EPYC); a wrong mask or scale moves weights by 1e-2
    and more."""
    return FLOAT32_EPSILON * math.sqrt(terms) * layers


def model_tolerance(config) -> float:
    """:func:`float32_tolerance` for a transformers model's configuration: its widest sum
    (the MLP's inner width; GPT-2 leaves it unset for four times the hidden width)
    through every layer, an encoder's and a decoder's together."""

    def largest(*names: str) -> int:
        return max(getattr(config, name, None) or 0 for name in names)

    hidden = largest("hidden_size", "n_embd", "d_model")
    inner = largest("intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim") or 4 * hidden
    layers = largest("num_hidden_layers", "n_layer", "num_layers", "encoder_layers")
    if getattr(config, "is_encoder_decoder", False):
        layers += largest("num_decoder_layers", "decoder_layers")
    return float32_tolerance(max(hidden, inner), layers)
