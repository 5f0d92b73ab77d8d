"""A model whose numbers are not finite (a NaN weight): every command that reads it says
so in one line, naming where the NaN first appears, exit 1; nothing writes NaN as JSON."""

from __future__ import annotations

import math
import shutil

import pytest

from attnviz.cli import app
from attnviz.data_formats import dump_json
from attnviz.errors import AttnvizError
from tests.checks import failed_in_process
from tests.hook_references import ANSWER, CORRUPT, TEXT

BROKEN = "transformer.h.1.mlp.c_fc"  # the module whose weight gets a NaN


@pytest.fixture(scope="module")
def broken_model(generators, tmp_path_factory):
    """The tiny GPT-2 with one NaN in its second layer's MLP: the attention of the layers
    above it and the answer's metric are NaN, the first layer's maps are not."""
    import torch
    import transformers

    source = generators["gpt2-lm"]
    folder = tmp_path_factory.mktemp("broken")
    model = transformers.AutoModelForCausalLM.from_pretrained(source)
    with torch.no_grad():
        model.get_submodule(BROKEN).weight[0, 0] = math.nan
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{source}/{name}", folder / name)
    return str(folder)


ANSWERED = ["--answer", ANSWER]
CORRUPTED = [*ANSWERED, "--corrupt", CORRUPT]


@pytest.mark.parametrize(
    "arguments",
    [
        ["heads", *ANSWERED],
        ["heads", *ANSWERED, "--method", "gradient"],
        ["heads", *CORRUPTED],
        ["heads", *CORRUPTED, "--method", "gradient"],
        ["heads", *ANSWERED, "--knockout", "last:dog"],
        ["trace", *CORRUPTED],
        ["trace", *CORRUPTED, "-f", "json"],
        ["trace", *CORRUPTED, "--method", "gradient", "-f", "csv"],
    ],
    ids=" ".join,
)
def test_an_answer_on_a_model_with_a_nan_weight_is_refused_naming_where(
    runner, broken_model, arguments
):
    result = runner.invoke(app, [arguments[0], TEXT, "--model", broken_model, *arguments[1:]])
    failed_in_process(result, 1, "the answer's metric on the clean run is nan")
    assert f"first appears in the output of {BROKEN} (its weight holds NaN" in result.stderr


@pytest.mark.parametrize(
    "arguments",
    [
        ["heads"],
        ["heads", "-f", "json"],
        ["heads", "--rows", "last"],
        ["show", "-f", "json"],
        ["trace", *CORRUPTED, "-o", "{tmp}/trace.html"],
        ["heads", *ANSWERED, "--picture", "{tmp}/heads.png"],
        ["export", *CORRUPTED, "-o", "{tmp}/page.html"],
    ],
    ids=" ".join,
)
def test_maps_pictures_and_pages_of_a_model_with_a_nan_weight_are_refused(
    runner, broken_model, tmp_path, arguments
):
    given = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    result = runner.invoke(app, [given[0], TEXT, "--model", broken_model, *given[1:]])
    assert result.exit_code == 1, result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert "not finite" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no picture, no page


def test_no_json_holds_nan_or_infinity():
    for number in (math.nan, math.inf, -math.inf):
        with pytest.raises(AttnvizError, match="not finite"):
            dump_json({"effect": [[0.5, number]]})
    assert dump_json({"effect": [[0.5, 1e308]]}) == '{"effect":[[0.5,1e+308]]}\n'
