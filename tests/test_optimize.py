"""Circuits optimised for faithfulness (``--method optimize``,
:mod:`attnviz.circuits.optimized`): the masked pass and its gradient held to plain hooks
(tests/circuit_references.masked_metric) at a mask of any values; the training lowers its
loss, and its circuit is at least as faithful as EAP-IG's top edges of the same size."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnviz.circuits import passes as circuit_module
from attnviz.circuits.eap_ig import eap_ig_document, read_scores
from attnviz.circuits.faithfulness import masked_metric
from attnviz.circuits.files import read_circuit
from attnviz.circuits.options import CircuitOptions
from attnviz.inputs import Input
from attnviz.pretrained.backward_pass import weights_without_gradients
from attnviz.request import Request
from tests import circuit_references as reference
from tests.checks import model_tolerance
from tests.circuit_references import LATE, OTHER, PAIR, THIRD, pair_ids


@pytest.mark.parametrize(
    ("family", "pair"),
    [("gpt2-lm", PAIR), ("llama-lm", LATE), ("gemma3-lm", PAIR), ("gemma2-lm", LATE)],
)
def test_the_masked_pass_and_its_gradient_equal_plain_hooks(
    generators, language_models, family, pair
):
    """Each edge carrying m × its value + (1 − m) × the corrupted, m anywhere in (0, 1):
    the metric, and its gradient in every edge's m, as autograd through plain hooks."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, pair, family
    )
    request = Request(maps=False, circuit=CircuitOptions())
    twins = circuit_module.PairRuns(extractor, request, 1, None).twins(0, Input(**pair))
    graph = twins.wiring.graph
    generator = torch.Generator().manual_seed(0)
    values = 0.05 + 0.9 * torch.rand(graph.edges.shape, generator=generator)
    found_mask = values.clone().requires_grad_(True)
    expected_mask = values.clone().requires_grad_(True)
    with weights_without_gradients(model):
        found = masked_metric(twins, found_mask)
        found.backward()
        upstream, downstream, _ = reference.nodes(model)
        weights = {
            (upstream[u], downstream[d]): expected_mask[u, d]
            for u, d in zip(*np.nonzero(graph.edges), strict=True)
        }
        _, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
        expected = reference.masked_metric(model, ids, corrupt, answer_id, versus_id, weights)
        expected.backward()
    tolerance = model_tolerance(model.config)
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    assert abs(float(found.detach()) - float(expected.detach())) <= tolerance
    assert abs(float(expected.detach()) - clean) > 100 * tolerance  # the mask changed the metric
    gradient, wanted = found_mask.grad.numpy(), expected_mask.grad.numpy()
    assert (gradient[~graph.edges] == 0).all()  # no weight where there is no edge
    largest = np.abs(wanted).max()
    assert largest > 100 * tolerance
    np.testing.assert_allclose(gradient, wanted, atol=1e-4 * largest)


@pytest.mark.parametrize("family", ["llama-lm", "gemma3-lm"])
def test_optimize_lowers_its_loss_and_its_circuit_is_the_masks_top(
    language_models, family, tmp_path
):
    extractor = language_models[family]
    optimised = extractor.circuit(
        pairs=[PAIR, OTHER, THIRD], method="optimize", edges=15, train_steps=45, progress=False
    )
    training = optimised.training
    assert training is not None and len(training.losses) == 45
    assert np.mean(training.losses[-3:]) < 0.5 * np.mean(training.losses[:3])
    assert optimised.method == "optimize" and optimised.steps == 5  # EAP-IG's, to start
    scores = optimised.scores[optimised.graph.edges]
    assert ((scores > 0) & (scores < 1)).all()  # a mask: each edge's share of its value
    assert (optimised.scores[~optimised.graph.edges] == 0).all()
    # its circuit is the top of the learned mask, chosen as any circuit's edges are
    reference.circuits_measured(extractor.loaded.model, optimised)
    path = tmp_path / "optimised.json"
    path.write_text(json.dumps(optimised.document()), encoding="utf-8")
    read = read_circuit(path)
    assert read.training == training and read.method == "optimize"
    # for MIB, a mask's ranking is written as it is (the kept first in its signed order
    # too), not negated as a change of the metric is; read back as it was
    written = eap_ig_document(optimised)
    assert written["cfg"]["score_sign"] == "mask"
    assert min(each["score"] for each in written["edges"].values()) > 0
    path.write_text(json.dumps(written), encoding="utf-8")
    scores, kept = read_scores(path).on(optimised.graph)
    np.testing.assert_allclose(scores, optimised.scores, rtol=1e-12)  # group copies summed
    assert np.array_equal(kept, optimised.in_graph)


@pytest.mark.parametrize("size", [4, 15])
def test_the_optimised_circuit_is_more_faithful_than_eap_igs_top_edges_of_its_size(
    language_models, size
):
    """On the tiny Llama (82 edges), 5% and 18% of its edges."""
    extractor = language_models["llama-lm"]
    pairs = [PAIR, OTHER, THIRD]
    started = extractor.circuit(pairs=pairs, method="ig", edges=size, progress=False)
    optimised = extractor.circuit(
        pairs=pairs, method="optimize", edges=size, train_steps=45, progress=False
    )
    assert optimised.kept <= size
    assert abs(1 - optimised.faithfulness) < abs(1 - started.faithfulness) - 0.05
    # the edges the mask keeps (above one half) first, then the others in EAP-IG's order
    ranked = optimised.edges()
    kept = [(first, then) for first, then, score in ranked if score > 0.5]
    others = [(first, then) for first, then, score in ranked if score <= 0.5]
    assert ranked[: len(kept)] == [edge for edge in ranked if edge[2] > 0.5]
    eap_ig = [(first, then) for first, then, _ in started.edges()]
    assert others == [edge for edge in eap_ig if edge not in kept]
    assert kept != eap_ig[: len(kept)]  # the training chose others than EAP-IG's top


def test_a_sized_training_passes_the_circuit_of_its_size_whole(generators, language_models):
    """A training of one size (--train-each's): its step's loss is the circuit of the
    largest logits, that many edges, measured whole by plain hooks (the others carrying the
    corrupted value), and Adam's first step moves each logit by the gradient of that loss
    in the edge's mask, reaching the logit through the sigmoid (straight-through)."""
    from attnviz.circuits.optimized import optimized
    from attnviz.circuits.training import Training

    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, LATE, "llama-lm"
    )
    request = Request(maps=False, circuit=CircuitOptions())
    twins = circuit_module.PairRuns(extractor, request, 1, None).twins(0, Input(**LATE))
    graph = twins.wiring.graph
    # logits near 0, where a soft mask's circuit is far from the whole one's; 40 of the 82
    # edges, a circuit that reaches the logits (one of 9 reaches none: no gradient)
    start = np.random.default_rng(0).normal(size=graph.edges.shape) * graph.edges
    size, gap, rate = 40, 0.5, 0.1
    with weights_without_gradients(model):
        learned, training = optimized(
            lambda _: twins, 1, start, gap, Training(1, rate, None, sizes=(size,))
        )
        places = np.argwhere(graph.edges)
        kept = places[np.argsort(-start[graph.edges], kind="stable")[:size]]
        whole = torch.zeros(len(places), requires_grad=True)
        upstream, downstream, _ = reference.nodes(model)
        on = {(int(u), int(d)) for u, d in kept}
        weights = {
            (upstream[u], downstream[d]): whole[place] + (1.0 if (u, d) in on else 0.0)
            for place, (u, d) in enumerate(places)
        }
        _, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
        clean = reference.run(model, ids, answer_id, versus_id)[0]
        metric = reference.masked_metric(model, ids, corrupt, answer_id, versus_id, weights)
        loss = ((metric - clean) / gap) ** 2
        loss.backward()
    tolerance = model_tolerance(model.config)
    assert len(training.losses) == 1
    found = np.sqrt(training.losses[0]) * gap  # |metric − clean|
    # two metrics, each within the tolerance of its reference
    assert abs(found - abs(float(metric.detach()) - clean)) <= 2 * tolerance
    assert abs(float(metric.detach()) - clean) > 100 * tolerance  # the circuit lost some
    sigmoid = 1 / (1 + np.exp(-start[graph.edges]))
    gradient = whole.grad.numpy() * sigmoid * (1 - sigmoid)
    mask = learned[graph.edges]
    moved = np.log(mask / (1 - mask)) - start[graph.edges]
    # Adam's first step, rate × g / (|g| + 1e-8) against the gradient g, where g stands
    # clear of float32's rounding (tests above hold the masked gradient to 1e-4 of its
    # largest) and of Adam's epsilon; no step is longer
    clear = np.abs(gradient) > np.maximum(1e-3 * np.abs(gradient).max(), 1e-5)
    assert clear.sum() >= 10
    adam = -rate * gradient / (np.abs(gradient) + 1e-8)
    np.testing.assert_allclose(moved[clear], adam[clear], atol=1e-4)
    assert (np.abs(moved) <= rate + 1e-5).all()


def test_train_each_trains_each_size_holding_the_circuit_before_it(
    language_models, monkeypatch, tmp_path
):
    """--train-each: a training a size, smallest first, each holding the circuit before it
    (+inf logits: mask 1, no gradient) and passing exactly its size's edges; each size's
    circuit the top of its training's mask."""
    from attnviz.choices import Select
    from attnviz.circuits.scored import ScoredGraph
    from attnviz.circuits.selections import selected

    extractor = language_models["llama-lm"]
    common = {"pairs": [PAIR, OTHER, THIRD], "method": "optimize", "train_steps": 20}
    common |= {"prune": False, "progress": False}
    trainings = []  # (start, its training as asked, learned) of each training
    train = circuit_module.Here.optimized

    def watched(self, start, gap, training):
        learned, done = train(self, start, gap, training)
        trainings.append((start.copy(), training, learned))
        return learned, done

    monkeypatch.setattr(circuit_module.Here, "optimized", watched)
    each = extractor.circuit(**common, edges=4, curve=[9], train_each=True)
    graph = each.graph

    def top(circuit, size):
        return {(first, then) for first, then, _ in circuit.edges(size)}

    def named(mask):
        return {(graph.upstream[u], graph.downstream[d]) for u, d in np.argwhere(mask)}

    assert each.training.steps == 40 and len(each.training.losses) == 40
    assert each.training.sizes == (4, 9) and each.training.sparsity is None
    (first, asked_first, smallest), (second, asked_second, learned) = trainings
    assert asked_first.sizes == (4,) and asked_second.sizes == (9,)
    assert not np.isposinf(first).any()
    assert top(each, 4) == named(
        selected(ScoredGraph(graph, smallest), Select.TOP, 4, False).circuit
    )
    assert named(np.isposinf(second)) == top(each, 4)
    assert (learned[np.isposinf(second)] == 1).all()  # held: never trained down
    assert top(each, 9) == named(
        selected(ScoredGraph(graph, learned), Select.TOP, 9, False).circuit
    )
    path = tmp_path / "each.json"
    path.write_text(json.dumps(each.document()), encoding="utf-8")
    assert read_circuit(path).training == each.training


def test_the_command_says_what_the_scores_are_and_how_the_mask_was_trained(runner, generators):
    from attnviz.cli import app
    from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS

    twins = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", CORRUPT]
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *twins]
    asked = ["--method", "optimize", "--train-steps", "4", "--learning-rate", "0.2"]
    result = runner.invoke(app, [*common, *asked])
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stdout.split())  # lines wrapped at the terminal's width
    assert "score: the edge's learned mask" in said
    assert "trained: 4 steps at learning rate 0.2, sparsity 1; loss " in said
    assert "by optimize (from EAP-IG at 5 steps, 4 training steps)" in said
    document = json.loads(runner.invoke(app, [*common, *asked, "-f", "json"]).stdout)
    assert document["method"] == "optimize" and document["steps"] == 5
    assert document["training"]["steps"] == 4 and len(document["training"]["losses"]) == 4
    each = ["--method", "optimize", "--train-steps", "2", "--edges", "4", "--curve", "9"]
    result = runner.invoke(app, [*common, *each, "--train-each"])
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "trained: 4 steps at learning rate 0.1, 2 sizes held, each pass keeping " in said
