"""Circuits (`Extractor.circuit`): every edge's score, exact, EAP and EAP-IG, and a
circuit's faithfulness, held to tests/circuit_references.py (plain hooks and autograd)
on the tiny GPT-2, Llama (grouped-query heads) and Gemma 2 and 3 (post-attention norms);
the invariants (every edge kept gives 1, none 0; a dataset's scores the mean of its
pairs')."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.circuits import differences, edges, node_outputs
from attnviz.circuits import estimates as edge_estimates
from attnviz.circuits import faithfulness as faithfulness_pass
from attnviz.circuits import passes as circuit_module
from attnviz.pretrained import backward_pass, sites
from tests import circuit_references as reference
from tests.checks import model_tolerance
from tests.circuit_references import LATE, OTHER, PAIR, THIRD, pair_ids, scores_of
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS, prepared

FAMILIES = ["gpt2-lm", "llama-lm", "gemma2-lm", "gemma3-lm"]


def _setup(generators, language_models, family):
    extractor, model, (ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    return extractor, model, ids, corrupt_ids, answer_id, versus_id


@pytest.mark.parametrize("family", FAMILIES)
def test_the_graph_is_every_writer_before_every_reader(generators, language_models, family):
    extractor, model, *_ = _setup(generators, language_models, family)
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=0)
    upstream, downstream, edges = reference.nodes(model)
    assert circuit.graph.upstream == upstream
    assert circuit.graph.downstream == downstream
    assert set(scores_of(circuit)) == set(edges)
    assert circuit.graph.count == len(edges)


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_scores_equal_the_edge_carried_by_plain_hooks(generators, language_models, family):
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="exact")
    found = scores_of(circuit)
    edges = sorted(found)[::3]  # every third edge: each is a forward pass of the reference
    expected = reference.exact_scores(model, ids, corrupt_ids, answer_id, versus_id, edges)
    tolerance = model_tolerance(model.config)
    worst = max(abs(found[edge] - expected[edge]) for edge in edges)
    assert worst <= tolerance, (worst, tolerance)
    assert max(abs(value) for value in expected.values()) > 100 * tolerance  # not all ~0


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("steps", [None, 3])
def test_eap_and_eap_ig_equal_autograd_through_plain_hooks(
    generators, language_models, family, steps
):
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    method = "gradient" if steps is None else "ig"
    circuit = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, method=method, steps=steps, edges=0
    )
    found = scores_of(circuit)
    expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id, steps)
    tolerance = model_tolerance(model.config)
    worst = max(abs(found[edge] - expected[edge]) for edge in expected)
    assert worst <= tolerance, (worst, tolerance)
    assert max(abs(value) for value in expected.values()) > 100 * tolerance


@pytest.mark.parametrize("family", ["llama-lm", "gemma3-lm"])
def test_eap_igs_key_and_value_copies_a_query_head_each_sum_to_the_grouped_score(
    generators, language_models, family
):
    """EAP-IG's graph gives each query head its own key and value input; their EAP scores,
    taken through the model's own repeat_kv, sum to attnviz's score of the key/value
    head's input (what ``-f eap-ig`` writes and ``--scores`` reads back rest on this)."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="gradient", edges=0)
    graph = circuit.graph
    group = graph.heads // graph.kv_heads
    assert group > 1, "a model whose key/value heads are grouped"
    copies = reference.copied_scores(model, ids, corrupt_ids, answer_id, versus_id)
    tolerance = model_tolerance(model.config)
    spread = 0.0
    for (first, then), score in scores_of(circuit).items():
        layer, unit, letter = then.split(".") if then.count(".") == 2 else (None,) * 3
        if letter not in ("k", "v"):
            continue
        members = [copies[first, (int(layer[1:]), head, letter)] for head in _members(unit, group)]
        assert abs(sum(members) - score) <= tolerance, (first, then)
        spread = max(spread, max(members) - min(members))
    assert spread > 100 * tolerance  # the copies are not the grouped score split equally


def _members(unit, group):
    first = int(unit.lstrip("kv")) * group
    return range(first, first + group)


@pytest.mark.parametrize("family", ["llama-lm", "gemma3-lm"])
def test_eap_ig_of_a_long_text_recomputing_layers_a_position_at_a_time_equals_autograd(
    generators, language_models, family, monkeypatch
):
    """As a long text runs: each layer computed again in the backward pass (its residuals
    read there), each group's gradient taken a block of positions at a time."""
    monkeypatch.setattr(backward_pass, "KEPT_FOR_BACKWARD", 0)
    monkeypatch.setattr(edge_estimates, "_ELEMENTS_AT_ONCE", 1)
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="ig", steps=2, edges=0)
    found = scores_of(circuit)
    expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id, 2)
    worst = max(abs(found[edge] - expected[edge]) for edge in expected)
    assert worst <= model_tolerance(model.config), worst


def test_a_group_whose_gradient_never_comes_scores_0_beside_its_points_others(
    generators, language_models, monkeypatch
):
    """The groups reading one residual are scored together once their gradients have come;
    one that gets none (as if the metric did not depend on it) is scored 0 after the pass."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, "llama-lm"
    )
    arrive = edge_estimates._PointScores.arrive

    def none_for_layer_0s_keys(self, group, gradient):
        if group != 1:  # layer 0's key group: (q, k, v, m) per layer
            arrive(self, group, gradient)

    monkeypatch.setattr(edge_estimates._PointScores, "arrive", none_for_layer_0s_keys)
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=0)
    _, _, first, size, _ = circuit.graph.groups()[1]
    keys = set(circuit.graph.downstream[first : first + size])
    found = scores_of(circuit)
    expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id)
    assert all(found[edge] == 0 for edge in expected if edge[1] in keys)
    others = [edge for edge in expected if edge[1] not in keys]
    worst = max(abs(found[edge] - expected[edge]) for edge in others)
    assert worst <= model_tolerance(model.config)
    assert any(abs(expected[edge]) > 0 for edge in expected if edge[1] in keys)


def test_a_long_records_passes_give_the_freed_pages_back_at_each_layer(
    generators, language_models, monkeypatch
):

    given_back = []
    monkeypatch.setattr(sites, "_GIVEN_BACK_FROM", 0)  # every record counts as long
    monkeypatch.setattr(edges, "_TWINS_TOGETHER_BELOW", 0)  # the twins read apart
    monkeypatch.setattr(sites, "give_back_freed", lambda: given_back.append(True))
    extractor, model, *_ = _setup(generators, language_models, "llama-lm")
    extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=5)
    # both runs read to score, the circuit's pass (the corrupted run its row 0)
    assert len(given_back) == 3 * model.config.num_hidden_layers


def test_a_narrow_dtypes_differences_contract_widened_a_part_at_a_time(monkeypatch):
    import torch

    monkeypatch.setattr(edge_estimates, "_ELEMENTS_AT_ONCE", 2 * 3 * 4)  # 2 nodes a part
    generator = torch.Generator().manual_seed(0)
    difference = torch.randn(5, 3, 4, generator=generator).to(torch.bfloat16)  # (U, S, D)
    gradient = torch.randn(3, 2, 4, generator=generator)  # (S, n, D)
    found = edge_estimates._contracted(difference, gradient)
    expected = torch.einsum("usd,snd->un", difference.double(), gradient.double())
    assert found.dtype == torch.float32
    torch.testing.assert_close(found.double(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_compact_record_scores_as_the_references(
    generators, language_models, family, monkeypatch
):
    """Where one (U, S, D) block would be large: the heads' differences kept as their output
    projection's inputs (over the run's scale before a post norm), widened a position at a
    time for EAP and a node at a time for the exact passes."""
    monkeypatch.setattr(differences, "_FULL_AT_MOST", 0)
    monkeypatch.setattr(edge_estimates, "_ELEMENTS_AT_ONCE", 1)
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    tolerance = model_tolerance(model.config)
    found = scores_of(extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=0))
    expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id)
    assert max(abs(found[edge] - expected[edge]) for edge in expected) <= tolerance
    exact = scores_of(extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="exact"))
    edges = sorted(exact)[::7]
    assert any(first.startswith("a") for first, _ in edges)  # heads' edges among them
    carried = reference.exact_scores(model, ids, corrupt_ids, answer_id, versus_id, edges)
    assert max(abs(exact[edge] - carried[edge]) for edge in edges) <= tolerance


@pytest.mark.parametrize("family", ["llama-lm", "gemma3-lm"])
def test_an_estimate_read_in_parts_of_the_positions_equals_autograd(
    generators, language_models, family, monkeypatch
):
    """Where even the compact record is large, the estimate reads its twins a part of the
    positions at a time (a read of both runs and a gradient pass each): the scores add up
    to the whole's, the metrics and the last position's outputs (the nodes' labels) are
    the whole's."""
    monkeypatch.setattr(edges, "_TWINS_TOGETHER_BELOW", 0)  # as a long text's: read apart
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    whole = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="ig", steps=2, edges=0)
    reads = []
    read_twins = circuit_module.read_twins
    monkeypatch.setattr(
        circuit_module,
        "read_twins",
        lambda *args, **kwargs: reads.append(kwargs["part"]) or read_twins(*args, **kwargs),
    )
    monkeypatch.setattr(differences, "_PART_AT_MOST", 1)  # a part a position
    parted = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="ig", steps=2, edges=0)
    start = int((ids[0] != corrupt_ids[0]).nonzero()[0, 0])
    assert reads == [slice(at, at + 1) for at in reversed(range(start, ids.shape[1]))]
    expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id, 2)
    found = scores_of(parted)
    assert max(abs(found[edge] - expected[edge]) for edge in expected) <= model_tolerance(
        model.config
    )
    metrics = (parted.clean_metric, parted.corrupt_metric)
    assert metrics == (whole.clean_metric, whole.corrupt_metric)
    assert parted.promoted == whole.promoted and len(whole.promoted) == len(whole.graph.upstream)


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm", "gemma2-lm"])
def test_ig_of_one_step_is_eap(generators, language_models, family):
    extractor, model, *_ = _setup(generators, language_models, family)
    eap = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=0)
    ig = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="ig", steps=1, edges=0)
    tolerance = model_tolerance(model.config)
    np.testing.assert_allclose(ig.scores, eap.scores, atol=tolerance)
    assert np.abs(eap.scores).max() > 100 * tolerance  # scores to compare, not zeros


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("compact", [False, True])
def test_faithfulness_equals_the_circuit_run_by_plain_hooks(
    generators, language_models, family, compact, monkeypatch
):
    """With ``compact``, as on a long text: a head carried back is held as its slice of
    the output projection's input and widened where a group reads it."""
    if compact:
        monkeypatch.setattr(node_outputs, "_CARRIED_COMPACT_FROM", 0)
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    circuit = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, method="exact", edges=7, curve=[0, 3, 20]
    )
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    _, _, every_edge = reference.nodes(model)
    tolerance = model_tolerance(model.config)
    assert abs(circuit.clean_metric - clean) <= tolerance
    assert abs(circuit.corrupt_metric - corrupt_metric) <= tolerance
    for kept, faithfulness in reference.circuits_measured(model, circuit):
        outside = [edge for edge in every_edge if edge not in kept]
        metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
        expected = (metric - corrupt_metric) / (clean - corrupt_metric)
        assert abs(faithfulness - expected) <= tolerance / abs(clean - corrupt_metric), len(kept)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_layers_reads_change_together_leaving_those_whose_every_edge_is_kept(
    generators, language_models, family
):
    """A pass changes a layer's query, key and value inputs together (one norm, one
    product): here layer 0's keys alone, then layer 1's queries and values with its keys'
    edges all kept (left as computed), and the logits' input."""
    from attnviz.circuits.options import CircuitOptions
    from attnviz.inputs import Input
    from attnviz.request import Request

    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    request = Request(maps=False, circuit=CircuitOptions())
    pair = Input(TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT)
    twins = circuit_module.PairRuns(extractor, request, 1, None).twins(0, pair)
    graph = twins.wiring.graph
    upstream, downstream, _ = reference.nodes(model)
    outside = [
        ("input", name) for name in downstream if name.startswith("a0.") and name.endswith(".k")
    ]
    outside += [
        (first, name)
        for first in upstream[:2]
        for name in downstream
        if name.startswith("a1.") and not name.endswith(".k")
    ]
    outside.append((upstream[-1], "logits"))
    kept = graph.edges.copy()
    for first, then in outside:
        kept[upstream.index(first), downstream.index(then)] = False
    groups = faithfulness_pass._changed(graph, graph.edges & kept)
    found_groups = [(group.layer, group.letters) for group in groups]
    assert found_groups == [(0, "k"), (1, "qv"), (graph.layers, "logits")]
    (found,) = faithfulness_pass.circuit_metrics(twins, kept[None])
    corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)[1]
    expected = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
    assert abs(found - expected) <= model_tolerance(model.config)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_edge_kept_gives_one_and_none_gives_zero(generators, language_models, family):
    extractor, model, *_ = _setup(generators, language_models, family)
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges="all", curve=[0])
    assert circuit.kept == circuit.graph.count
    assert circuit.faithfulness == 1.0  # nothing changed: the clean run itself
    ((size, kept, none, fraction, select),) = circuit.curve
    taken = abs(circuit.clean_metric - circuit.corrupt_metric)
    assert size == kept == fraction == 0 and select == "top"
    assert abs(none) <= model_tolerance(model.config) / taken


@pytest.mark.parametrize("method", ["gradient", "exact"])
def test_bootstrapped_scores_are_the_resamples_of_each_pairs_own_scores(
    generators, language_models, method
):
    """--bootstrap B: B resamples of the pairs, drawn as circuits/bootstrap documents
    (numpy's default_rng(0) multinomial); each edge the mean of the resamples' means
    where every resample gives it one sign, else 0; the circuit chosen from those."""
    extractor, model, *_ = _setup(generators, language_models, "llama-lm")
    pairs = [PAIR, OTHER, THIRD]
    circuit = extractor.circuit(pairs=pairs, method=method, bootstrap=7, edges=10)
    alone = np.stack(
        [extractor.circuit(pairs=[pair], method=method, edges=0).scores for pair in pairs]
    )
    draws = np.random.default_rng(0).multinomial(3, [1 / 3] * 3, size=7)  # (B, pairs)
    means = np.einsum("bi,iun->bun", draws, alone) / 3
    held = (means > 0).all(0) | (means < 0).all(0)
    edges = circuit.graph.edges
    assert held[edges].any() and not held[edges].all()  # some signs turn with the draws
    expected = np.where(held, means.mean(0), 0.0)
    np.testing.assert_allclose(circuit.scores, expected, atol=model_tolerance(model.config))
    assert circuit.bootstrap == 7
    reference.circuits_measured(model, circuit)  # its circuit chosen from those scores


def test_a_datasets_scores_and_faithfulness_are_the_means_of_its_pairs(generators, language_models):
    extractor, model, *_ = _setup(generators, language_models, "llama-lm")
    pairs = [PAIR, OTHER]  # the second of another length, not the first's twins swapped
    both = extractor.circuit(pairs=pairs, method="exact", edges=5)
    alone = [extractor.circuit(**pair, method="exact", edges=0) for pair in pairs]
    tolerance = model_tolerance(model.config)
    np.testing.assert_allclose(both.scores, (alone[0].scores + alone[1].scores) / 2, atol=tolerance)
    assert both.pairs == 2
    clean = np.mean([each.clean_metric for each in alone])
    corrupt = np.mean([each.corrupt_metric for each in alone])
    assert abs(both.clean_metric - clean) <= tolerance
    # the same circuit measured on each pair: the means' fraction
    kept = [(first, then) for first, then, _ in both.kept_edges()]
    measured = []
    for pair in pairs:
        _, model_, ids, corrupt_ids, answer_id, versus_id = pair_ids(
            generators, language_models, pair
        )
        _, corrupt_outputs = reference.run(model_, corrupt_ids, answer_id, versus_id)
        outside = [edge for edge in reference.nodes(model_)[2] if edge not in kept]
        measured.append(
            reference.carried_metric(model_, ids, corrupt_outputs, answer_id, versus_id, outside)
        )
    expected = (np.mean(measured) - corrupt) / (clean - corrupt)
    assert abs(both.faithfulness - expected) <= tolerance / abs(clean - corrupt)


@pytest.mark.parametrize("family", ["llama-lm", "gemma3-lm"])
def test_twins_differing_late_score_and_measure_as_the_references_of_every_position(
    generators, language_models, family, monkeypatch
):
    """As a long text runs besides: a kept edge's carried value one node at a time."""
    monkeypatch.setattr(faithfulness_pass, "_ELEMENTS_AT_ONCE", 1)
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, LATE, family
    )
    shared = int((ids[0] == corrupt_ids[0]).long().cumprod(0).sum())
    assert 4 <= shared < ids.shape[1]  # "The man walked the" at least
    tolerance = model_tolerance(model.config)
    estimate = scores_of(extractor.circuit(**LATE, method="ig", steps=2, edges=0))
    expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id, 2)
    assert max(abs(estimate[edge] - expected[edge]) for edge in expected) <= tolerance
    assert max(abs(value) for value in expected.values()) > 100 * tolerance
    circuit = extractor.circuit(**LATE, method="exact", edges=9, curve=[40])
    found = scores_of(circuit)
    edges = sorted(found)[::5]
    exact = reference.exact_scores(model, ids, corrupt_ids, answer_id, versus_id, edges)
    assert max(abs(found[edge] - exact[edge]) for edge in edges) <= tolerance
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    taken = circuit.clean_metric - corrupt_metric
    for kept, faithfulness in reference.circuits_measured(model, circuit):
        outside = [edge for edge in found if edge not in kept]
        metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
        assert abs(faithfulness - (metric - corrupt_metric) / taken) <= tolerance / abs(taken)


def test_refine_computes_the_estimates_top_edges_exactly(generators, language_models, monkeypatch):
    # an exact pass starts from the clean run read alone; the estimate reads it so too,
    # so that the edges left unrefined keep the very scores of the estimate alone
    monkeypatch.setattr(edges, "_TWINS_TOGETHER_BELOW", 0)
    extractor, model, *_ = _setup(generators, language_models, "gemma2-lm")
    estimate = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=0)
    exact = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, method="exact", edges=0)
    refined = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, refine=6, edges=0)
    top = [(first, then) for first, then, _ in estimate.edges(6)]
    found, exact_scores, estimated = scores_of(refined), scores_of(exact), scores_of(estimate)
    tolerance = model_tolerance(model.config)
    assert all(abs(found[edge] - exact_scores[edge]) <= tolerance for edge in top)
    rest = [edge for edge in estimated if edge not in top]
    assert all(found[edge] == estimated[edge] for edge in rest)
    assert refined.scored.exact is not None and int(refined.scored.exact.sum()) == 6
    assert any(abs(found[edge] - estimated[edge]) > 10 * tolerance for edge in top)


def test_a_metric_given_as_a_function_of_the_logits_scores_as_its_measure(
    generators, language_models
):
    extractor, model, _, _, answer_id, versus_id = _setup(generators, language_models, "llama-lm")

    def difference(logits):  # as TransformerLens users write theirs: (B, V) -> (B,)
        return logits[:, answer_id] - logits[:, versus_id]

    by_function = extractor.circuit(TEXT, ANSWER, CORRUPT, metric=difference, edges=10)
    by_versus = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=10)
    tolerance = model_tolerance(model.config)
    np.testing.assert_allclose(by_function.scores, by_versus.scores, atol=tolerance)
    assert by_function.faithfulness == pytest.approx(by_versus.faithfulness, abs=1e-4)
    assert by_function.answer.metric_name == "difference"


@pytest.mark.parametrize("shape", [(2, 4, 2), (3, 6, 3), (1, 3, 1), (4, 2, 2)])
def test_selections_equal_eap_igs_definitions_on_graphs_of_unusual_sizes(shape):
    """top, greedy, threshold and signed, pruned or not, on random scores: the masks
    equal the reference's edges, chosen a node at a time from EAP-IG's and MIB's
    definitions."""
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.scored import ScoredGraph, nodes_of
    from attnviz.circuits.selections import selected

    graph = Graph(*shape)
    generator = np.random.default_rng(sum(shape))
    scores = np.where(graph.edges, generator.normal(size=graph.edges.shape), 0.0)
    named = {
        (graph.upstream[u], graph.downstream[d]): float(scores[u, d])
        for u, d in zip(*graph.edge_list(), strict=True)
    }
    magnitudes = sorted(abs(value) for value in named.values())
    for select, values in (
        ("top", [0, 1, 5, graph.count // 3, graph.count]),
        ("greedy", [1, 5, graph.count // 3, graph.count]),
        ("threshold", [magnitudes[-1], magnitudes[len(magnitudes) // 2], 0.0]),
        ("signed", [1, 5, graph.count // 3, graph.count]),
    ):
        for asked in values:
            for pruned in (True, False):
                mask = selected(ScoredGraph(graph, scores), select, asked, pruned).circuit
                upstream, downstream = np.nonzero(mask)
                found = {
                    (graph.upstream[u], graph.downstream[d])
                    for u, d in zip(upstream, downstream, strict=True)
                }
                expected = reference.chosen(shape, named, select, asked, pruned)
                assert found == expected, (select, asked, pruned)
                if pruned:  # every node left has an edge out of it, and each edge's stays
                    held = {graph.upstream[u] for u in np.nonzero(nodes_of(graph, mask))[0]}
                    assert held == {first for first, _ in found}
    node_scores = generator.normal(size=len(graph.upstream))
    named_nodes = dict(zip(graph.upstream, node_scores, strict=True))
    for select, values in (
        ("top", [0, 1, 3, len(graph.upstream)]),
        ("threshold", [float(np.median(np.abs(node_scores))), 0.0]),
        ("signed", [1, 3, len(graph.upstream)]),
    ):
        for asked in values:
            for pruned in (True, False):
                given = ScoredGraph(graph, scores)
                mask = selected(given, select, asked, pruned, node_scores).circuit
                upstream, downstream = np.nonzero(mask)
                found = {
                    (graph.upstream[u], graph.downstream[d])
                    for u, d in zip(upstream, downstream, strict=True)
                }
                expected = reference.node_circuit(shape, named_nodes, select, asked, pruned)
                assert found == expected, ("node", select, asked, pruned)
    owned = reference.owners(*shape)
    for d, name in enumerate(graph.downstream):
        assert {graph.upstream[u] for u in np.nonzero(graph.inputs[:, d])[0]} == owned[name]


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_and_unpruned_circuits_are_measured_as_the_hooks_measure_them(
    generators, language_models, family
):
    """What --select greedy and --no-prune keep, their faithfulness at each size equal to
    the circuit run by plain hooks (on Gemma 2 and 3 pruning changes it: a head's output
    is its share at the post-attention norm's scale)."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    _, _, every_edge = reference.nodes(model)
    tolerance = model_tolerance(model.config) / abs(clean - corrupt_metric)
    for select, prune in (("greedy", True), ("greedy", False), ("top", False)):
        circuit = extractor.circuit(
            TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=12, curve=[4, 30], select=select,
            prune=prune,
        )  # fmt: skip
        assert circuit.select == select and circuit.prune == prune and circuit.asked == 12
        for kept, faithfulness in reference.circuits_measured(model, circuit):
            outside = [edge for edge in every_edge if edge not in kept]
            metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
            expected = (metric - corrupt_metric) / (clean - corrupt_metric)
            assert abs(faithfulness - expected) <= tolerance, (select, prune, len(kept))


@pytest.mark.parametrize(
    ("family", "level"), [("llama-lm", "edge"), ("gemma3-lm", "edge"), ("gpt2-lm", "node")]
)
def test_mibs_curve_is_its_ten_fractions_measured_as_the_hooks_measure_them(
    generators, language_models, family, level
):
    """--curve mib: circuits at each of MIB's fractions of the edges (of the nodes at the
    node level), once by the circuit's own selection (top: largest |score|) and once by
    signed (largest score in MIB's sign), each chosen and pruned as the reference chooses
    it, its faithfulness the hooks'; CPR and CMD as MIB reports them over the hooks'
    faithfulness: CPR from the signed curve, CMD from the |score| one."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, curve=["mib"], level=level)
    count = len(circuit.graph.upstream) if level == "node" else circuit.graph.count
    assert circuit.asked == int(0.01 * count)  # the circuit itself: MIB's 1%
    fractions = reference.mib_fractions()
    assert [(point.fraction, point.select) for point in circuit.curve] == [
        *((fraction, "top") for fraction in fractions),
        *((fraction, "signed") for fraction in fractions),
    ]
    assert [point.asked for point in circuit.curve] == [int(f * count) for f in fractions] * 2
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    _, _, every_edge = reference.nodes(model)
    # each input the reference's run patches sums a difference from every upstream node
    # (U terms), so its float32 error grows as √U beyond the model's own
    summed = model_tolerance(model.config) * len(circuit.graph.upstream) ** 0.5
    tolerance = summed / abs(clean - corrupt_metric)
    expected, circuits = [], []
    for kept, faithfulness in reference.circuits_measured(model, circuit)[1:]:
        outside = [edge for edge in every_edge if edge not in kept]
        metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
        expected.append((metric - corrupt_metric) / (clean - corrupt_metric))
        circuits.append(kept)
        assert abs(faithfulness - expected[-1]) <= tolerance, len(kept)
    absolute, signed = expected[:10], expected[10:]
    assert len({round(value, 6) for value in absolute}) > 2  # the points differ
    assert circuits[:10] != circuits[10:]  # the two selections chose other circuits
    cpr, cmd = reference.mib_reported(absolute, signed)
    assert (
        abs(cpr - reference.mib_areas(absolute)[0]) > 10 * tolerance
    )  # the curve CPR reads matters
    assert circuit.areas == pytest.approx((cpr, cmd, "signed", "top"), abs=tolerance)


@pytest.mark.parametrize(("family", "moves"), [("gemma3-lm", True), ("llama-lm", False)])
def test_where_pruning_moves_the_faithfulness_it_is_said_in_one_line(
    language_models, family, moves
):
    """Gemma 3's heads share the norm after attention: the 20 edges chosen and the 12 left
    after pruning are measured apart, both said. Llama's dead ends carry the corrupted
    value either way: pruning takes some out, and nothing is measured twice or said."""
    import warnings

    extractor = language_models[family]
    asked = {"edges": 20, "versus": VERSUS}
    unpruned = extractor.circuit(TEXT, ANSWER, CORRUPT, prune=False, **asked)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        pruned = extractor.circuit(TEXT, ANSWER, CORRUPT, **asked)
    assert pruned.kept < unpruned.kept == 20
    if not moves:
        assert said == [] and pruned.faithfulness == pytest.approx(unpruned.faithfulness)
        return
    (line,) = [str(each.message) for each in said]
    assert line.startswith(
        f"pruning took {20 - pruned.kept} dead-end edges out of the circuit (20 → "
        f"{pruned.kept}) and moved its faithfulness from {unpruned.faithfulness:.3f} to "
        f"{pruned.faithfulness:.3f}: "
    )
    assert abs(pruned.faithfulness - unpruned.faithfulness) > 0.01


@pytest.mark.parametrize("compact", [False, True])
def test_a_graph_of_unusual_sizes_goes_through_every_pass_as_the_hooks_do(
    tmp_path_factory, monkeypatch, compact
):
    """Three layers of eight query heads sharing two key/value heads (groups of four) and a
    post-attention norm (Gemma 2): the graph's layout (slots, groups, reads) is the one
    every pass asks; EAP, EAP-IG, exact scores and a circuit's faithfulness equal the
    plain-hook references, with the record whole and compact."""
    import transformers

    import attnviz
    from tests import tiny_models
    from tests.hook_references import answer_token_id, token_ids

    if compact:
        monkeypatch.setattr(differences, "_FULL_AT_MOST", 0)
        monkeypatch.setattr(node_outputs, "_CARRIED_COMPACT_FROM", 0)
    path = str(tiny_models._metaspace_decoder(
        transformers.Gemma2ForCausalLM, transformers.Gemma2Config,
        tmp_path_factory.mktemp("unusual"), num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=2, attn_logit_softcapping=1.0, sliding_window=4,
    ))  # fmt: skip
    extractor = attnviz.load(path)
    model = extractor.loaded.model
    assert reference.shape_of(model)[:3] == (3, 8, 2)
    ids, corrupt_ids = token_ids(path, TEXT), token_ids(path, CORRUPT)
    answer_id, versus_id = answer_token_id(path, TEXT, ANSWER), answer_token_id(path, TEXT, VERSUS)
    tolerance = model_tolerance(model.config)
    for steps in (None, 2):
        method = "gradient" if steps is None else "ig"
        found = scores_of(extractor.circuit(
            TEXT, ANSWER, CORRUPT, versus=VERSUS, method=method, steps=steps, edges=0
        ))  # fmt: skip
        expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id, steps)
        assert max(abs(found[edge] - expected[edge]) for edge in expected) <= tolerance
    circuit = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, method="exact", edges=15, curve=[60]
    )
    found = scores_of(circuit)
    sample = sorted(found)[::11]
    exact = reference.exact_scores(model, ids, corrupt_ids, answer_id, versus_id, sample)
    assert max(abs(found[edge] - exact[edge]) for edge in sample) <= tolerance
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    for kept, faithfulness in reference.circuits_measured(model, circuit):
        outside = [edge for edge in found if edge not in kept]
        metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
        expected_faithfulness = (metric - corrupt_metric) / (clean - corrupt_metric)
        assert abs(faithfulness - expected_faithfulness) <= tolerance / abs(clean - corrupt_metric)


@pytest.mark.parametrize("family", FAMILIES)
def test_node_circuits_equal_eap_igs_definitions_and_the_hooks(generators, language_models, family):
    """--level node: exact node scores are the metric with the node's output carrying its
    corrupted value into all it reaches (plain hooks), an estimate's the sum of the node's
    edges'; the circuit is every edge between the top nodes, as EAP-IG's node-level top-n
    and prune keep it, measured as the hooks measure it."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = _setup(
        generators, language_models, family
    )
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    _, _, every_edge = reference.nodes(model)
    tolerance = model_tolerance(model.config)
    exact = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, method="exact", level="node", nodes=4,
        curve=[7],
    )  # fmt: skip
    for name, score in zip(exact.graph.upstream, exact.node_scores, strict=True):
        outside = [edge for edge in every_edge if edge[0] == name]
        metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
        assert abs(score - (metric - clean)) <= tolerance, name
    estimate = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, level="node", nodes=6)
    rows = {name: 0.0 for name in estimate.graph.upstream}
    for first, _, score in estimate.edges():
        rows[first] += score
    found = dict(zip(estimate.graph.upstream, estimate.node_scores, strict=True))
    assert max(abs(found[name] - rows[name]) for name in rows) <= 1e-9
    for circuit in (exact, estimate):
        for kept, faithfulness in reference.circuits_measured(model, circuit):
            outside = [edge for edge in every_edge if edge not in kept]
            metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
            expected = (metric - corrupt_metric) / (clean - corrupt_metric)
            assert abs(faithfulness - expected) <= tolerance / abs(clean - corrupt_metric)


def test_a_circuit_is_asked_through_run_as_every_product(language_models):
    """run is the one door: a request with circuit options reads its inputs together as
    the pairs and gives one result, its circuit the one Extractor.circuit gives; a pair
    is named in an error as given; a model without a next token refuses the request."""
    import attnviz
    from attnviz.circuits.options import CircuitOptions
    from attnviz.errors import UsageError
    from attnviz.inputs import Input
    from attnviz.request import Request

    extractor = language_models["gpt2-lm"]
    pairs = [Input(**PAIR), Input(**OTHER)]
    request = Request(maps=False, circuit=CircuitOptions(edges=5))
    (found,) = extractor.run(pairs, request)
    assert found.input == pairs[0] and found.maps is None and found.effects is None
    expected = extractor.circuit(pairs=pairs, edges=5, progress=False)
    assert np.abs(expected.scores).max() > 0  # scores to compare, not zeros
    np.testing.assert_array_equal(found.circuit.scores, expected.scores)
    assert found.circuit.faithfulness == expected.faithfulness
    unanswered = [pairs[0], Input(PAIR["text"])]
    with pytest.raises(UsageError, match=r"^line 9: "):
        extractor.run(unanswered, request, names=["line 3", "line 9"])
    with pytest.raises(UsageError, match="has no next token to read"):
        next(attnviz.load().run(pairs, request))  # the built-in stack


@pytest.mark.parametrize(
    ("asked", "selections"),
    [
        ({}, ("top", "signed")),
        ({"select": "greedy"}, ("greedy", "signed")),
        ({"select": "signed"}, ("signed",)),  # both areas from its one curve, as MIB's
        ({"method": "optimize"}, ("top",)),  # a mask's ranking: signed would take it last
        ({"level": "node"}, ("top", "signed")),
    ],
)
def test_mibs_curve_measures_the_signed_circuits_beside_the_selections_own(
    language_models, asked, selections
):
    """The curves --curve mib measures: the circuit's own selection's and, where its
    scores are signed changes of the metric and it is not signed already, signed's (the
    circuits MIB reads CPR from); the areas say which each came from."""
    trained = {"train_steps": 2} if asked.get("method") == "optimize" else {}
    circuit = language_models["llama-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, curve=["mib"], **asked, **trained
    )
    assert tuple(dict.fromkeys(point.select for point in circuit.curve)) == selections
    assert len(circuit.curve) == 10 * len(selections)
    assert (circuit.areas.cpr_select, circuit.areas.cmd_select) == (selections[-1], selections[0])
