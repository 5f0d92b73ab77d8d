"""``circuit --method relp``: relevance patching, EAP's passes with relevance propagation's
backward, held to tests/relp_references.py (RelP's rules as forwards whose autograd
backward is theirs, then the plain hooks' EAP) on the tiny GPT-2 (LayerNorm, no gate),
Llama (grouped heads, a gated MLP) and Gemma 2 and 3 (sandwich norms, Gemma 3's query and
key norms), patched and zero-ablated; the rules change the gradient alone."""

from __future__ import annotations

import pytest
import torch

from attnviz.choices import CircuitMethod
from attnviz.circuits import estimates
from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.pretrained import relevance
from tests import circuit_references as reference
from tests.checks import model_tolerance
from tests.circuit_references import PAIR, pair_ids, scores_of
from tests.relp_references import relp_rules

FAMILIES = ["gpt2-lm", "llama-lm", "gemma2-lm", "gemma3-lm"]


@pytest.mark.parametrize("family", FAMILIES)
def test_relp_equals_eap_through_relevance_propagations_rules(generators, language_models, family):
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    relp = extractor.circuit(**PAIR, method="relp", edges=0)
    found = scores_of(relp)
    with relp_rules(model):
        expected = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id)
    eap = reference.estimated_scores(model, ids, corrupt_ids, answer_id, versus_id)
    tolerance = model_tolerance(model.config)
    worst = max(abs(found[edge] - expected[edge]) for edge in expected)
    assert worst <= tolerance, (worst, tolerance)
    assert max(abs(value) for value in expected.values()) > 100 * tolerance
    # not EAP's: the rules change the gradient
    assert max(abs(eap[edge] - expected[edge]) for edge in expected) > 100 * tolerance
    # the forward is the model's own: the same metrics as EAP's run
    plain = extractor.circuit(**PAIR, edges=0)
    assert relp.clean_metric == pytest.approx(plain.clean_metric, abs=tolerance)
    assert relp.corrupt_metric == pytest.approx(plain.corrupt_metric, abs=tolerance)
    # the attention weights held: no query or key edge carries a gradient
    into_weights = [edge for edge in found if edge[1].endswith((".q", ".k"))]
    assert into_weights and all(found[edge] == 0 for edge in into_weights)
    assert max(abs(eap[edge]) for edge in into_weights) > tolerance  # EAP's are not 0


@pytest.mark.parametrize("family", ["gpt2-lm", "gemma3-lm"])
def test_relp_under_zero_ablation_equals_the_rules_given_zeros(generators, language_models, family):
    extractor, model, ids, _, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    zeros = reference.zeroed(model, ids, answer_id, versus_id)
    found = scores_of(
        extractor.circuit(**{**PAIR, "corrupt": None}, method="relp", ablation="zero", edges=0)
    )
    with relp_rules(model):
        expected = reference.estimated_scores(model, ids, None, answer_id, versus_id, corrupt=zeros)
    tolerance = model_tolerance(model.config)
    assert max(abs(found[edge] - expected[edge]) for edge in expected) <= tolerance
    assert max(abs(value) for value in expected.values()) > 100 * tolerance


@pytest.mark.parametrize("rule", list(relevance.Rule))
def test_each_rule_alone_moves_the_gated_models_scores(
    generators, language_models, rule, monkeypatch
):
    """Every rule of RelP's table is in effect where it applies: alone, it gives scores
    other than EAP's (the equality above would hold of a rule never put on whose effect
    were small)."""
    extractor, model, *_ = pair_ids(generators, language_models, PAIR, "gemma3-lm")
    monkeypatch.setitem(estimates._RULES, CircuitMethod.RELP, frozenset({rule}))
    alone = extractor.circuit(**PAIR, method="relp", edges=0)
    eap = extractor.circuit(**PAIR, edges=0)
    assert abs(alone.scores - eap.scores).max() > 100 * model_tolerance(model.config)


def test_a_gate_laid_out_otherwise_is_refused_in_one_line():
    class Fused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up_proj = torch.nn.Linear(2, 4)
            self.down_proj = torch.nn.Linear(2, 2)
            self.act_fn = torch.nn.SiLU()

    with pytest.raises(UsageError, match="gate_up_proj") as raised:
        relevance._gate_output(Fused(), 3)
    assert "\n" not in str(raised.value) and "layer 3" in str(raised.value)


def test_circuit_method_relp_names_its_rules_in_the_table(runner, generators):
    result = runner.invoke(
        app,
        [
            "circuit",
            PAIR["text"],
            "--answer",
            PAIR["answer"],
            "--versus",
            PAIR["versus"],
            "--corrupt",
            PAIR["corrupt"],
            "--model",
            str(generators["llama-lm"]),
            "--method",
            "relp",
            "--edges",
            "5",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "by relp" in result.stdout
    assert "relevance patching, RelP" in result.stdout
