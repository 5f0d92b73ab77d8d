"""SmolLM2-135M-Instruct, a real language model, offline: attnviz's maps equal a plain
transformers script's on the same GGUF file, and its induction heads are found.

One worker runs them all (one conversion and one plain load per session).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz.cli import app
from tests.docs_commands import ROOT, assert_printed, output_of, shown_runs
from tests.hook_references import transformer_lens_score

pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.slow,
    pytest.mark.xdist_group("smollm2"),
    pytest.mark.filterwarnings("ignore:converting:attnviz.errors.AttnvizWarning"),
]

PROMPT = "The capital of France is"


@pytest.fixture(scope="session")
def plain():
    """The model and tokenizer as a plain script loads the GGUF file, eager attention."""
    import transformers

    from attnviz.pretrained.loading import ALIASES

    gguf = ALIASES["smollm2"].packaged.located()
    options = {"gguf_file": gguf.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, **options)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, attn_implementation="eager", dtype=torch.float32, **options
    ).eval()
    return model, tokenizer


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """Converted into the tests' Hugging Face home (the one conftest's offline_hub names),
    so that the CLI's tests load the same conversion."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "hf-home"))
        yield attnviz.load("smollm2")


def plain_attentions(plain, ids):
    model, _ = plain
    with torch.no_grad():
        output = model(torch.tensor([ids]), output_attentions=True)
    return torch.stack([layer[0] for layer in output.attentions]).numpy()  # (L, H, T, T)


def test_maps_equal_the_plain_scripts(smollm2, plain):
    maps = smollm2.extract(PROMPT)
    ids = plain[1](PROMPT)["input_ids"]
    expected = plain_attentions(plain, ids)
    assert maps.weights.shape == (30, 9, len(ids), len(ids)) == expected.shape
    np.testing.assert_allclose(maps.weights, expected, atol=1e-5)


def test_a_generated_continuation_equals_the_plain_scripts(smollm2, plain):
    model, tokenizer = plain
    generation = smollm2.generate(PROMPT, max_new_tokens=6, layers=[0, 18])
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        written = model.generate(ids, max_new_tokens=6, do_sample=False)[0].tolist()
    assert generation.maps.prompt_length == ids.shape[1]
    assert generation.text == tokenizer.decode(written[ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in generation.text
    expected = plain_attentions(plain, written)[[0, 18]]
    np.testing.assert_allclose(generation.maps.weights, expected, atol=1e-5)


def test_an_induction_head_is_found_on_the_probe(smollm2, plain):
    probe = smollm2.detection_probe()
    table = smollm2.head_statistics(probe)
    best = max(table.rows, key=lambda row: row.induction)
    assert best.induction > 0.5
    ids = plain[1](probe)["input_ids"]
    assert len(ids) == 41  # the first token, then 20 tokens twice
    attention = plain_attentions(plain, ids)[best.layer, best.head].astype(np.float64)
    tokens = np.asarray(ids)
    assert best.induction == pytest.approx(
        transformer_lens_score(attention, tokens, "induction"), abs=1e-5
    )
    # The first token's column kept, the sink's weight drowns the score.
    kept = float((attention * _induction_pattern(tokens)).sum() / attention.sum())
    assert kept < best.induction


def _induction_pattern(tokens):
    same = np.equal.outer(tokens, tokens).astype(float)
    np.fill_diagonal(same, 0)
    duplicate = np.tril(same)
    return np.tril(np.concatenate([np.zeros((len(tokens), 1)), duplicate[:, :-1]], axis=1))


def test_heads_detect_induction_through_the_cli(runner):
    result = runner.invoke(
        app, ["heads", "--model", "smollm2", "--detect", "induction", "--top", "5", "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["heads"]
    assert len(rows) == 5 and rows[0]["induction"] > 0.5
    assert [row["induction"] for row in rows] == sorted((row["induction"] for row in rows),
                                                        reverse=True)  # fmt: skip


def test_chat_prompts_use_its_own_template(smollm2, plain):
    maps = smollm2.extract("What is attention?", chat=True, layers=0)
    tokenizer = plain[1]
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is attention?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    expected = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert len(maps.key_tokens) == len(expected)
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith("assistant\n")
    assert maps.key_tokens[0] == "<|im_start|>" and maps.key_special[0]
    assert not maps.key_special[maps.key_tokens.index(" attention")]  # the user's word
    # The template's own words are special, and read as words (not Ġare).
    assert maps.key_special[maps.key_tokens.index(" assistant")]
    assert " are" in maps.key_tokens and "Ġare" not in maps.key_tokens


def test_answer_effects_equal_a_hook_rerun_of_the_plain_model(smollm2, plain):
    """heads --answer ' Paris': two layers' heads (the one the answer needs most among
    them), each against the plain model rerun with the head zeroed, and its direct logit
    attribution computed from recorded states."""
    from tests.hook_references import reference_ablation, reference_dla

    effects = smollm2.head_effects(PROMPT, " Paris", layers=[0, 23])
    model, tokenizer = plain
    ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
    (answer_id,) = tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    assert effects.answer_token == " Paris"
    layers, heads = effects.layers, effects.heads
    ablation = reference_ablation(model, ids, answer_id, layers, heads)
    np.testing.assert_allclose(effects.ablation, ablation, atol=1e-4)
    dla = reference_dla(model, ids, answer_id, layers, heads)
    np.testing.assert_allclose(effects.dla, dla, atol=1e-4)
    assert effects.ablation.min() < -1  # a head the answer needs: zeroed, e^-1 of it is left


def test_a_needle_cell_scores_the_heads_the_plain_model_copies_with(smollm2, plain):
    """One cell of a sweep through the chat template: the answer comes back, and each
    head's retrieval score equals the few-line definition applied to the plain model's
    eager attention, step by step over the whole sequence."""
    from attnviz.needle import Sweep
    from attnviz.pretrained.needle import Haystack, default_haystack
    from tests.hook_references import reference_retrieval

    sweep = Sweep((600,), (0.5,), max_new_tokens=24, chat=True)
    (cell,) = smollm2.needle(sweep).cells
    assert cell.answered and cell.tokens == 600
    prompt = Haystack(smollm2.loaded, sweep, default_haystack()).prompt(600, 0.5)
    model, tokenizer = plain
    sequence, top_keys, written = list(prompt.ids), [], []
    low, high = prompt.needle
    spans = []
    with torch.no_grad():
        while not tokenizer.decode(written).strip().endswith("7421"):
            output = model(torch.tensor([sequence]), output_attentions=True)
            rows = torch.stack([layer[0, :, -1] for layer in output.attentions]).numpy()
            top_keys.append(rows.argmax(-1))  # (L, H)
            spans.append(rows[..., low:high].sum(-1))
            written.append(int(output.logits[0, -1].argmax()))
            sequence.append(written[-1])
    assert cell.response == tokenizer.decode(written, skip_special_tokens=True)
    expected = reference_retrieval(np.asarray(top_keys), written, prompt.ids, prompt.answer)
    np.testing.assert_array_equal(cell.retrieval, expected)
    np.testing.assert_allclose(cell.span, np.mean(spans, axis=0), atol=1e-4)
    assert cell.retrieval.max() == 1  # a head copies every token of "7421"


IOI = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def test_patch_and_trace_equal_plain_hooks_on_the_plain_model(smollm2, plain):
    """The indirect-object sentence: each head's patch in two layers and the residual
    trace in three, against the plain model with hooks (tests/hook_references.py), with
    the logit difference of " Mary" over " John"."""
    from tests.hook_references import reference_patch, reference_trace

    model, tokenizer = plain
    clean, corrupt = (torch.tensor([tokenizer(text)["input_ids"]]) for text in (IOI, IOI_CORRUPT))
    (mary,) = tokenizer(" Mary", add_special_tokens=False)["input_ids"]
    (john,) = tokenizer(" John", add_special_tokens=False)["input_ids"]
    layers = [20, 23]
    effects = smollm2.head_effects(IOI, " Mary", versus=" John", corrupt=IOI_CORRUPT, layers=layers)
    corrupt_metric, patch = reference_patch(model, clean, corrupt, mary, john, layers)
    np.testing.assert_allclose(effects.patch, patch[layers], atol=1e-4)
    assert effects.on.corrupt_metric == pytest.approx(corrupt_metric, abs=1e-4)
    assert effects.patch.max() > 5  # layer 23 head 3 brings most of the answer back
    traced = smollm2.trace(IOI, " Mary", IOI_CORRUPT, versus=" John", layers=[0, 12, 29])
    expected = reference_trace(model, clean, corrupt, mary, john, "resid", [0, 12, 29])
    np.testing.assert_allclose(traced.effect, expected[[0, 12, 29]], atol=1e-4)


def test_paris_without_its_space_is_said_with_its_twin(runner):
    """SmolLM2 puts 'Paris' at number 44 of its next tokens after "The capital of France
    is" and ' Paris' at number 1: the answer without its space read -7.57 silently."""
    common = ["heads", "--model", "smollm2", "The capital of France is", "--method", "gradient"]
    result = runner.invoke(app, [*common, "--answer", "Paris", "-f", "json", "--top", "1"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["answer_rank"] > 10
    assert result.stderr.startswith(f"attnviz: warning: the answer 'Paris' is the model's next "
                                    f"token number {document['answer_rank']:,} (")  # fmt: skip
    assert "' Paris', with a space first, is number 1: did you mean --answer ' Paris'?" in (
        result.stderr
    )
    spaced = runner.invoke(app, [*common, "--answer", " Paris", "-f", "json", "--top", "1"])
    assert spaced.stderr == "" and json.loads(spaced.stdout)["answer_rank"] == 1


def test_circuit_scores_and_faithfulness_equal_plain_hooks_on_the_plain_model(smollm2, plain):
    """The indirect-object sentence's circuit: every edge's EAP score, the exact scores of
    its top edges (--refine) and a circuit's faithfulness, against plain hooks on the
    plain model (tests/circuit_references.py), to 1e-4."""
    from tests import circuit_references as reference

    model, tokenizer = plain
    clean, corrupt = (torch.tensor([tokenizer(text)["input_ids"]]) for text in (IOI, IOI_CORRUPT))
    (mary,) = tokenizer(" Mary", add_special_tokens=False)["input_ids"]
    (john,) = tokenizer(" John", add_special_tokens=False)["input_ids"]
    circuit = smollm2.circuit(IOI, " Mary", IOI_CORRUPT, versus=" John", refine=12, edges=300)
    assert circuit.scored.exact is not None
    found = {(first, then): score for first, then, score in circuit.edges()}
    exact = [(first, then) for first, then, _ in circuit.edges() if circuit.scored.exact[
        circuit.graph.upstream.index(first), circuit.graph.downstream.index(then)
    ]]  # fmt: skip
    expected = reference.exact_scores(model, clean, corrupt, mary, john, exact)
    assert max(abs(found[edge] - expected[edge]) for edge in exact) <= 1e-4
    estimated = smollm2.circuit(IOI, " Mary", IOI_CORRUPT, versus=" John", edges=0)
    expected = reference.estimated_scores(model, clean, corrupt, mary, john)
    scores = {(first, then): score for first, then, score in estimated.edges()}
    assert max(abs(scores[edge] - expected[edge]) for edge in expected) <= 1e-4
    _, corrupt_outputs = reference.run(model, corrupt, mary, john)
    kept = {(first, then) for first, then, _ in circuit.kept_edges()}
    outside = [edge for edge in reference.nodes(model)[2] if edge not in kept]
    metric = reference.carried_metric(model, clean, corrupt_outputs, mary, john, outside)
    clean_metric = reference.run(model, clean, mary, john)[0]
    corrupt_metric = reference.run(model, corrupt, mary, john)[0]
    expected_faithfulness = (metric - corrupt_metric) / (clean_metric - corrupt_metric)
    assert circuit.faithfulness == pytest.approx(expected_faithfulness, abs=1e-4)
    assert circuit.clean_metric - circuit.corrupt_metric > 1  # the corruption takes the answer


def test_the_task_pairs_hold_under_its_tokenizer(plain):
    """Each text of sample_texts' task pairs as long as its twin, each answer and versus
    one token after its text."""
    from tests.task_files import token_failures

    assert token_failures(plain[1]) == []


@pytest.mark.parametrize("run", [run for run in shown_runs() if run.model == "smollm2"], ids=str)
def test_a_command_the_docs_print_gives_what_they_print(
    smollm2, run, runner, tmp_path, monkeypatch
):
    """Each SmolLM2 command whose output a page prints gives that output (its numbers to
    the last digit's float32 noise, a measured time any time), run where the files it
    writes (a --picture into docs/) land in a folder of the test's own; the model is
    converted first (``smollm2``), as for the reader, whose terminal it does not show."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "sample_texts").symlink_to(ROOT / "sample_texts")
    monkeypatch.chdir(tmp_path)
    assert_printed(run, output_of(run, runner, tmp_path))


def test_activations_equal_plain_hooks_on_its_own_model(smollm2):
    """Every layer site at three layers, a head's output and an MLP's, bit for bit the
    tensors plain transformers hooks read from the same model; a zeroed head's run the
    same as a plain hook zeroing it."""
    from tests.hook_references import (
        head_size,
        metric_with_hooks,
        output_projection,
        recorded_at,
        restorer,
        site_point,
    )

    model = smollm2.loaded.model
    tokenizer = smollm2.loaded.tokenizer
    ids = torch.tensor([tokenizer(IOI)["input_ids"]])
    sites = ["resid", "attn", "resid_mid", "mlp", "resid_post", "q", "k", "v", "z"]
    layers = [0, 15, 29]
    found = smollm2.activations(IOI, [*sites, "a23.h3", "m0"], layers=layers)
    for site in sites:
        reference = recorded_at(model, ids, site)
        for layer in layers:
            expected = reference[layer][:, site_point(model, site, layer)[2]]
            got = found[f"{site}@{layer}"]
            assert torch.equal(got.reshape(expected.shape), expected), (site, layer)
    size = head_size(model)
    z = recorded_at(model, ids, "z")[23]
    assert torch.equal(found["a23.h3"], z[:, 3 * size : 4 * size])
    (mary,) = tokenizer(" Mary", add_special_tokens=False)["input_ids"]
    (john,) = tokenizer(" John", add_special_tokens=False)["input_ids"]
    zeroed = smollm2.activations(IOI, edits={"a23.h3": "zero"}, answer=" Mary", versus=" John")
    hook = restorer("pre", slice(None), slice(3 * size, 4 * size), 0.0)
    expected = metric_with_hooks(model, ids, mary, john, [(output_projection(model, 23), *hook)])
    assert zeroed.metric == pytest.approx(expected, abs=1e-4)
    unedited = smollm2.activations(IOI, answer=" Mary", versus=" John").metric
    assert unedited - zeroed.metric > 1  # the head the answer needs most
