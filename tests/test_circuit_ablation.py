"""``circuit --ablation zero`` and ``mean``: every edge outside the circuit (or the edge
scored) carries zero, or its upstream node's mean output over the pairs (every position of
every clean text, each text weighed alike), every node's output replaced in the clean
text's run; exact scores, EAP, EAP-IG (over each group of nodes' outputs in turn), the
all-ablated metric and faithfulness held to tests/circuit_references.py's plain hooks
given those values as the corrupted outputs, on the tiny GPT-2, Llama and Gemma 3 (mean:
GPT-2 and Llama; Gemma's is refused)."""

from __future__ import annotations

import json

import pytest

from attnviz.circuits.files import read_circuit
from attnviz.cli import app
from tests import circuit_references as reference
from tests.checks import failed_in_process, model_tolerance
from tests.circuit_references import OTHER, PAIR, pair_ids, scores_of
from tests.hook_references import ANSWER, TEXT, VERSUS

FAMILIES = ["gpt2-lm", "llama-lm", "gemma3-lm"]
ZEROED = {**PAIR, "corrupt": None}  # no corrupted text is read


@pytest.mark.parametrize("family", FAMILIES)
def test_zero_ablations_exact_eap_and_eap_ig_equal_plain_hooks(generators, language_models, family):
    extractor, model, ids, _, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    zeros = reference.zeroed(model, ids, answer_id, versus_id)
    tolerance = model_tolerance(model.config)
    exact = extractor.circuit(**ZEROED, method="exact", ablation="zero", edges=0)
    found = scores_of(exact)
    edges = sorted(found)[::3]
    expected = reference.exact_scores(model, ids, None, answer_id, versus_id, edges, zeros)
    assert max(abs(found[edge] - expected[edge]) for edge in edges) <= tolerance
    assert max(abs(value) for value in expected.values()) > 100 * tolerance
    estimate = scores_of(extractor.circuit(**ZEROED, ablation="zero", edges=0))
    wanted = reference.estimated_scores(model, ids, None, answer_id, versus_id, corrupt=zeros)
    assert max(abs(estimate[edge] - wanted[edge]) for edge in wanted) <= tolerance
    # not patching's scores: the corrupted twin's are others
    patched = scores_of(extractor.circuit(**PAIR, edges=0))
    assert max(abs(patched[edge] - estimate[edge]) for edge in wanted) > 100 * tolerance
    # EAP-IG: each group of nodes' outputs moved from zero to their clean values in turn
    ig = scores_of(extractor.circuit(**ZEROED, method="ig", steps=3, ablation="zero", edges=0))
    wanted = reference.interpolated_scores(model, ids, answer_id, versus_id, zeros, steps=3)
    assert max(abs(ig[edge] - wanted[edge]) for edge in wanted) <= tolerance
    assert max(abs(estimate[edge] - ig[edge]) for edge in wanted) > 100 * tolerance


def test_optimize_under_zero_ablation_starts_from_eap_ig_where_steps_are_given(language_models):
    """The edges the learned mask leaves out (below one half) keep their start's order: EAP-IG's
    over activations with --steps, EAP's without."""
    extractor = language_models["llama-lm"]
    asked = {**ZEROED, "ablation": "zero", "edges": 6, "progress": False}

    def order(scores, edges):
        return sorted(edges, key=lambda edge: -abs(scores[edge]))

    learned = scores_of(extractor.circuit(**asked, method="optimize", steps=2, train_steps=2))
    left_out = [edge for edge, value in learned.items() if value < 0.5]
    ig = scores_of(extractor.circuit(**asked, method="ig", steps=2))
    eap = scores_of(extractor.circuit(**asked, method="gradient"))
    assert order(learned, left_out) == order(ig, left_out)
    assert order(eap, left_out) != order(ig, left_out)


@pytest.mark.parametrize("family", FAMILIES)
def test_zero_ablations_faithfulness_is_measured_against_every_edge_zeroed(
    generators, language_models, family
):
    extractor, model, ids, _, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    zeros = reference.zeroed(model, ids, answer_id, versus_id)
    circuit = extractor.circuit(**ZEROED, ablation="zero", edges=12, prune=False)
    _, _, edges = reference.nodes(model)
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    nothing = reference.carried_metric(model, ids, zeros, answer_id, versus_id, edges)
    tolerance = model_tolerance(model.config)
    assert abs(circuit.clean_metric - clean) <= tolerance
    assert abs(circuit.corrupt_metric - nothing) <= tolerance
    kept = {(first, then) for first, then, _ in circuit.kept_edges()}
    outside = [edge for edge in edges if edge not in kept]
    metric = reference.carried_metric(model, ids, zeros, answer_id, versus_id, outside)
    expected = (metric - nothing) / (clean - nothing)
    assert abs(circuit.faithfulness - expected) <= tolerance / abs(clean - nothing)
    assert circuit.ablation == "zero"


def _means(generators, language_models, pairs, family):
    """Each node's mean output over the pairs' clean texts (each text's mean over its
    positions, averaged), and each pair's ids: (means, [(ids, answer_id, versus_id)])."""
    read, summed = [], {}
    for pair in pairs:
        _, model, ids, _, answer_id, versus_id = pair_ids(generators, language_models, pair, family)
        read.append((ids, answer_id, versus_id))
        _, outputs = reference.run(model, ids, answer_id, versus_id)
        for name, output in outputs.items():
            summed[name] = summed.get(name, 0) + output.mean(0) / len(pairs)
    return model, summed, read


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_mean_ablation_equals_plain_hooks_given_each_nodes_mean_over_the_pairs(
    generators, language_models, family
):
    pairs = [PAIR, OTHER]
    model, means, read = _means(generators, language_models, pairs, family)
    extractor = language_models[family]
    asked = [{**pair, "corrupt": None} for pair in pairs]
    tolerance = model_tolerance(model.config)
    exact = scores_of(extractor.circuit(pairs=asked, method="exact", ablation="mean", edges=0))
    edges = sorted(exact)[::4]
    estimate = scores_of(extractor.circuit(pairs=asked, ablation="mean", edges=0))
    circuit = extractor.circuit(pairs=asked, ablation="mean", edges=10, prune=False)
    kept = {(first, then) for first, then, _ in circuit.kept_edges()}
    _, _, every = reference.nodes(model)
    wanted_exact = dict.fromkeys(edges, 0.0)
    wanted_estimate = {}
    clean = nothing = metric = 0.0
    for ids, answer_id, versus_id in read:
        widened = {name: mean.expand(ids.shape[1], -1) for name, mean in means.items()}
        alone = reference.exact_scores(model, ids, None, answer_id, versus_id, edges, widened)
        for edge in edges:
            wanted_exact[edge] += alone[edge] / len(read)
        eap = reference.estimated_scores(model, ids, None, answer_id, versus_id, corrupt=widened)
        for edge, value in eap.items():
            wanted_estimate[edge] = wanted_estimate.get(edge, 0.0) + value / len(read)
        clean += reference.run(model, ids, answer_id, versus_id)[0] / len(read)
        nothing += reference.carried_metric(model, ids, widened, answer_id, versus_id, every)
        outside = [edge for edge in every if edge not in kept]
        metric += reference.carried_metric(model, ids, widened, answer_id, versus_id, outside)
    nothing, metric = nothing / len(read), metric / len(read)
    assert max(abs(exact[edge] - wanted_exact[edge]) for edge in edges) <= tolerance
    assert max(abs(value) for value in wanted_exact.values()) > 100 * tolerance
    assert max(abs(estimate[edge] - wanted_estimate[edge]) for edge in wanted_estimate) <= tolerance
    assert abs(circuit.corrupt_metric - nothing) <= tolerance
    expected = (metric - nothing) / (clean - nothing)
    assert abs(circuit.faithfulness - expected) <= tolerance / abs(clean - nothing)
    zeroed = scores_of(extractor.circuit(pairs=asked, ablation="zero", edges=0))
    assert max(abs(zeroed[edge] - estimate[edge]) for edge in wanted_estimate) > 100 * tolerance


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_eap_ig_under_mean_ablation_moves_each_group_from_its_mean(
    generators, language_models, family
):
    """Towards each node's mean, not towards zero as EAP-IG's own code does (its corrupted
    activations are never filled under mean ablation: docs/effects.md says so)."""
    pairs = [PAIR, OTHER]
    model, means, read = _means(generators, language_models, pairs, family)
    asked = [{**pair, "corrupt": None} for pair in pairs]
    found = scores_of(
        language_models[family].circuit(
            pairs=asked, method="ig", steps=2, ablation="mean", edges=0, progress=False
        )
    )
    wanted: dict = {}
    for ids, answer_id, versus_id in read:
        widened = {name: mean.expand(ids.shape[1], -1) for name, mean in means.items()}
        alone = reference.interpolated_scores(model, ids, answer_id, versus_id, widened, 2)
        for edge, value in alone.items():
            wanted[edge] = wanted.get(edge, 0.0) + value / len(read)
    tolerance = model_tolerance(model.config)
    assert max(abs(found[edge] - wanted[edge]) for edge in wanted) <= tolerance
    assert max(abs(value) for value in wanted.values()) > 100 * tolerance


def test_zero_ablation_is_written_and_read_back_and_the_command_needs_no_twin(
    runner, generators, tmp_path
):
    twins = ["--answer", ANSWER, "--versus", VERSUS]
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *twins, "--ablation", "zero"]
    result = runner.invoke(app, [*common, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ablation"] == "zero" and document["answer"]["corrupt"] is None
    path = tmp_path / "zeroed.json"
    path.write_text(result.stdout, encoding="utf-8")
    read = read_circuit(path)
    assert read.ablation == "zero"
    assert read.faithfulness == document["circuit"]["faithfulness"]
    said = " ".join(runner.invoke(app, common).stdout.split())
    assert "every edge outside it carrying zero" in said


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--ablation", "zero", "--scores", "c.json"], "not with --ablation zero"),
        (["--ablation", "half"], "--ablation"),
        (["--ablation", "mean"], "give --pairs FILE.jsonl of two or more"),
        ([], "give --answer and --corrupt (or --pairs FILE.jsonl), or --ablation zero"),
    ],
)
def test_ablation_usage_errors_are_one_line(runner, generators, arguments, message):
    common = ["circuit", TEXT, "--model", generators["llama-lm"], "--answer", ANSWER]
    result = runner.invoke(app, [*common, *arguments])
    if "half" in arguments:  # typer's own choice check
        assert result.exit_code == 2 and "--ablation" in result.stderr and result.stdout == ""
        return
    failed_in_process(result, 2, message)


def test_mean_ablation_is_refused_where_heads_share_a_norm_after_attention(language_models):
    from attnviz.errors import UsageError

    pairs = [{**pair, "corrupt": None} for pair in (PAIR, OTHER)]
    with pytest.raises(UsageError, match="share a norm after attention"):
        language_models["gemma3-lm"].circuit(pairs=pairs, ablation="mean", progress=False)
