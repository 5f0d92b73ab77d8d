"""What effects are measured by: --metric's measures (declared once in choices.MEASURES and
pretrained/metrics.py) and a caller's Python function of the last position's logits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.cli import app
from attnviz.errors import UsageError
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS, answer_token_id


def test_a_python_metric_gives_what_the_same_measure_built_in_gives(generators, language_models):
    """A function of the last logits, (B, vocabulary) -> (B,), read by the exact sweeps,
    the patching and the trace as the built-in logit difference is."""
    extractor = language_models["llama-lm"]
    path = generators["llama-lm"]
    answer, versus = answer_token_id(path, TEXT, ANSWER), answer_token_id(path, TEXT, VERSUS)

    def difference(logits):
        return logits[:, answer] - logits[:, versus]

    built_in = extractor.head_effects(TEXT, ANSWER, versus=VERSUS, corrupt=CORRUPT)
    given = extractor.head_effects(TEXT, ANSWER, corrupt=CORRUPT, metric=difference)
    np.testing.assert_allclose(given.ablation, built_in.ablation, atol=1e-6)
    np.testing.assert_allclose(given.patch, built_in.patch, atol=1e-6)
    assert given.on.metric_name == "difference" and given.on.fields()["metric"] == "difference"
    traced = extractor.trace(TEXT, ANSWER, CORRUPT, metric=difference, method="gradient")
    expected = extractor.trace(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="gradient")
    np.testing.assert_allclose(traced.effect, expected.effect, atol=1e-6)
    assert traced.on.clean_metric == pytest.approx(expected.on.clean_metric, abs=1e-6)


def test_a_python_metric_that_gives_no_number_per_row_is_said(language_models):
    extractor = language_models["gpt2-lm"]
    with pytest.raises(UsageError, match=r"gave \(\): it takes the last position's logits"):
        extractor.head_effects(TEXT, ANSWER, metric=lambda logits: logits.sum())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--metric", "logit_difference"], "--metric logit_difference reads a second answer"),
        (["--metric", "log_prob", "--versus", VERSUS], "--metric log_prob reads the answer alone"),
        (["--metric", "entropy"], "is not one of 'log_prob', 'logit_difference'"),
        (["--knockout", "last:0", "--metric", "log_prob"], "--metric"),
        # trace reads --metric too (it once left it out of its request, silently)
        (["trace", "--corrupt", CORRUPT, "--metric", "logit_difference"], "a second answer"),
    ],
)
def test_a_metric_that_does_not_fit_the_answers_is_refused_before_loading(
    runner, arguments, message
):
    command = ["trace"] if arguments[0] == "trace" else ["heads"]
    arguments = arguments[1:] if arguments[0] == "trace" else arguments
    result = runner.invoke(app, [*command, TEXT, "--answer", ANSWER, *arguments])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_metric_asked_for_is_recorded_and_labels_the_table(runner, generators):
    path = generators["gpt2-lm"]
    common = ["heads", TEXT, "--model", path, "--answer", ANSWER, "--versus", VERSUS]
    named = runner.invoke(app, [*common, "--metric", "logit_difference", "-f", "json"])
    default = runner.invoke(app, [*common, "-f", "json"])
    assert named.exit_code == 0, named.stderr
    assert json.loads(named.stdout)["metric"] == json.loads(default.stdout)["metric"]
    assert json.loads(named.stdout)["heads"] == json.loads(default.stdout)["heads"]
