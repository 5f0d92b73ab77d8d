"""What effects are measured by: --metric's measures (declared once in choices.MEASURES and
pretrained/metrics.py) and a caller's Python function of the last position's logits (or
of those and the clean run's). The probability, the probability difference and the KL
divergence from the clean run are held to references (the log-probability's effects
through exp; plain hooks and autograd for KL), and the table's refusals (a versus where
none is read, attribution patching of a metric flat at the clean run, dla of one not
linear in the logits) said in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.pretrained.metrics import Metric
from tests import circuit_references as reference
from tests.checks import failed_in_process
from tests.hook_references import (
    ANSWER,
    CORRUPT,
    TEXT,
    VERSUS,
    answer_token_id,
    prepared,
    reference_trace,
)


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


def test_prob_effects_are_the_log_probability_effects_through_exp(language_models):
    extractor = language_models["llama-lm"]
    logs = extractor.head_effects(TEXT, ANSWER, corrupt=CORRUPT)
    probs = extractor.head_effects(TEXT, ANSWER, corrupt=CORRUPT, metric="prob")
    clean = logs.on.log_prob
    np.testing.assert_allclose(
        probs.ablation, np.exp(clean + logs.ablation) - np.exp(clean), atol=1e-6
    )
    corrupt = logs.on.corrupt_metric
    np.testing.assert_allclose(
        probs.patch, np.exp(corrupt + logs.patch) - np.exp(corrupt), atol=1e-6
    )
    assert probs.on.metric_label == f"p({probs.on.answer_token!r})"
    assert probs.on.fields()["metric"] == "prob"
    assert probs.dla is None  # not linear in the logits: no direction


@pytest.mark.parametrize("site", ["resid", "z"])
def test_a_prob_trace_is_the_log_probability_trace_through_exp(language_models, site):
    extractor = language_models["gemma2-lm"]
    logs = extractor.trace(TEXT, ANSWER, CORRUPT, site=site)
    probs = extractor.trace(TEXT, ANSWER, CORRUPT, site=site, metric="prob")
    corrupt = logs.on.corrupt_metric
    expected = np.exp(corrupt + logs.effect) - np.exp(corrupt)
    np.testing.assert_allclose(probs.effect, expected, atol=1e-6)
    assert np.abs(expected).max() > 1e-4  # the trace moves the probability


@pytest.mark.parametrize("site", ["resid", "z"])
def test_a_kl_trace_equals_the_hooks(generators, language_models, site):
    extractor, model, (ids, corrupt_ids), _, _ = prepared(generators, language_models, "gemma3-lm")
    traced = extractor.trace(TEXT, ANSWER, CORRUPT, site=site, metric="kl")
    kl = reference.kl_from(model, ids)
    expected = reference_trace(model, ids, corrupt_ids, kl, None, site)
    np.testing.assert_allclose(traced.effect, expected, atol=KL_TOLERANCE)
    assert np.abs(expected).max() > 100 * KL_TOLERANCE


def test_a_probability_difference_is_the_two_answers_probabilities_apart(language_models):
    extractor = language_models["gpt2-lm"]
    apart = [extractor.head_effects(TEXT, answer) for answer in (ANSWER, VERSUS)]
    both = extractor.head_effects(TEXT, ANSWER, versus=VERSUS, metric="prob_difference")
    clean = [effects.on.log_prob for effects in apart]
    after = [np.exp(c + effects.ablation) for c, effects in zip(clean, apart, strict=True)]
    expected = (after[0] - after[1]) - (np.exp(clean[0]) - np.exp(clean[1]))
    np.testing.assert_allclose(both.ablation, expected, atol=1e-6)


# KL of two float32 runs' next-token distributions, against the reference's float64: the
# exact scores differ by up to 3e-7 on the tiny models (whose KLs reach 1e-4 to 1e-3).
KL_TOLERANCE = 1e-6


@pytest.mark.parametrize("family", ["gemma2-lm", "gemma3-lm"])
def test_kl_circuits_exact_scores_ig_scores_and_faithfulness_equal_the_hooks(
    generators, language_models, family
):
    """KL(clean ‖ run): exact edge scores, EAP-IG's (the gradient is 0 at the clean run,
    not along the path from the corrupted one) and faithfulness, against plain hooks (on
    the tiny Gemmas, whose corruption moves the distribution most)."""
    extractor, model, (ids, corrupt_ids), _, _ = prepared(generators, language_models, family)
    kl = reference.kl_from(model, ids)
    tolerance = KL_TOLERANCE
    exact = extractor.circuit(TEXT, ANSWER, CORRUPT, method="exact", metric="kl", edges=12)
    found = {(first, then): score for first, then, score in exact.edges()}
    edges = sorted(found)[::4]
    expected = reference.exact_scores(model, ids, corrupt_ids, kl, None, edges)
    assert max(abs(found[edge] - expected[edge]) for edge in edges) <= tolerance
    assert max(abs(value) for value in expected.values()) > 100 * tolerance
    assert abs(exact.clean_metric) <= tolerance  # KL of the clean run from itself
    clean_metric, _ = reference.run(model, ids, kl, None)
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, kl, None)
    assert abs(exact.corrupt_metric - corrupt_metric) <= tolerance
    (kept, faithfulness), *_ = reference.circuits_measured(model, exact)
    _, _, every_edge = reference.nodes(model)
    outside = [edge for edge in every_edge if edge not in kept]
    metric = reference.carried_metric(model, ids, corrupt, kl, None, outside)
    taken = clean_metric - corrupt_metric
    assert abs(faithfulness - (metric - corrupt_metric) / taken) <= tolerance / abs(taken)
    ig = extractor.circuit(TEXT, ANSWER, CORRUPT, method="ig", steps=3, metric="kl", edges=0)
    found = {(first, then): score for first, then, score in ig.edges()}
    expected = reference.estimated_scores(model, ids, corrupt_ids, kl, None, 3)
    assert max(abs(found[edge] - expected[edge]) for edge in expected) <= tolerance
    assert max(abs(value) for value in expected.values()) > 100 * tolerance


# In float64 a KL's error is first order in the logits' float32 rounding (about 1e-7 of a
# logit) times how far the two distributions are apart: 1e-11 to 1e-9 on the tiny models;
# summed in float32 it was 2e-7 to 5e-7, more than gpt2's largest score (2e-7).
KL_FLOAT64 = 1e-8


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm", "gemma2-lm", "gemma3-lm"])
def test_kl_exact_scores_are_those_of_float64(generators, language_models, family):
    """KL of nearly equal distributions: every exact edge score against the reference's
    float64 KL of the same float32 logits, to a hundredth of the float32 sum's error."""
    extractor, model, (ids, corrupt_ids), _, _ = prepared(generators, language_models, family)
    exact = extractor.circuit(TEXT, ANSWER, CORRUPT, method="exact", metric="kl", edges=0)
    found = {(first, then): score for first, then, score in exact.edges()}
    expected = reference.exact_scores(
        model, ids, corrupt_ids, reference.kl_from(model, ids), None, sorted(found)
    )
    largest = max(abs(value) for value in expected.values())
    assert largest > 0
    assert max(abs(found[edge] - expected[edge]) for edge in found) <= KL_FLOAT64 + 1e-4 * largest


def test_a_python_metric_may_take_the_clean_logits_too(language_models):
    extractor = language_models["llama-lm"]

    def kl(logits, clean):  # as the built-in reads it: the clean run's last logits too
        wide, run = clean.double(), logits.double()  # and sums it, in float64
        found = (wide.softmax(-1) * (wide.log_softmax(-1) - run.log_softmax(-1))).sum(-1)
        return found.float()

    given = extractor.circuit(TEXT, ANSWER, CORRUPT, method="exact", metric=kl, edges=5)
    built_in = extractor.circuit(TEXT, ANSWER, CORRUPT, method="exact", metric="kl", edges=5)
    np.testing.assert_allclose(given.scores, built_in.scores, atol=1e-7)
    # a fraction of KLs of about 4e-5: the same computation, up to float32's reductions
    assert given.faithfulness == pytest.approx(built_in.faithfulness, abs=1e-4)


def test_a_metric_whose_second_argument_has_a_default_gets_the_logits_alone():
    seen = []

    def top(logits, k=1):  # a caller's own option, not the clean run's logits
        seen.append(k)
        return logits.topk(k, dim=-1).values.sum(-1)

    metric = Metric(0, None, top)
    assert not metric.reads_clean
    assert metric.of(torch.zeros(2, 5)).shape == (2,) and seen == [1]
    assert Metric(0, None, lambda logits, clean: logits[:, 0]).reads_clean


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["circuit", "--metric", "kl", "--corrupt", CORRUPT], "give --method ig or exact"),
        (["heads", "--metric", "kl", "--method", "gradient"], "give --method exact"),
        (["trace", "--metric", "kl", "--method", "gradient", "--corrupt", CORRUPT], "exact"),
        (["heads", "--metric", "prob", "--versus", VERSUS], "reads the answer alone"),
        (["heads", "--metric", "prob_difference"], "reads a second answer: give --versus"),
        (["heads", "--metric", "kl", "--picture", "x.png", "--sort", "dla"], "have no dla"),
        (["heads", "--metric", "prob", "--ablate", "none"], "give --corrupt (patch) or an"),
    ],
)
def test_the_measures_table_refuses_in_one_line(runner, generators, arguments, message):
    command, *rest = arguments
    result = runner.invoke(
        app, [command, TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER, *rest]
    )
    failed_in_process(result, 2, message)


def test_kl_takes_a_versus_or_none_and_is_recorded(runner, generators):
    common = ["heads", TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER]
    for versus in ([], ["--versus", VERSUS]):
        found = runner.invoke(app, [*common, *versus, "--metric", "kl", "-f", "json"])
        assert found.exit_code == 0, found.stderr
        document = json.loads(found.stdout)
        assert document["metric"] == "kl"
