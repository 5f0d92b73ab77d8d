"""attnviz pairs check: a dataset's pairs checked as circuit reads them, each pair's rank
and metrics held to the model's own logits, its repeats and refusals found."""

from __future__ import annotations

import json

import pytest
import torch

from attnviz.circuits.pair_checks import checked_pairs
from attnviz.cli import app
from attnviz.errors import UsageError
from tests.circuit_references import OTHER, PAIR, THIRD
from tests.hook_references import answer_token_id, token_ids

FAMILY = "gpt2-lm"
LONGER = {**OTHER, "corrupt": "The dog saw the man only because"}  # a token more


def _reference(path, model, pair):
    """The answer's rank and the logit difference after the text, and after its twin,
    from the model's own forward passes."""
    answer = answer_token_id(path, pair["text"], pair["answer"])
    versus = answer_token_id(path, pair["text"], pair["versus"])
    found = []
    for text in (pair["text"], pair["corrupt"]):
        with torch.no_grad():
            logits = model(token_ids(path, text)).logits[0, -1].float()
        rank = int((logits > logits[answer]).sum()) + 1
        found.append((rank, float(logits[answer] - logits[versus])))
    return found


def test_each_pair_is_read_as_the_model_reads_it_its_repeats_and_refusals_found(
    generators, language_models
):
    extractor, path = language_models[FAMILY], generators[FAMILY]
    pairs = [PAIR, OTHER, LONGER, PAIR, THIRD, OTHER]
    checked = checked_pairs(extractor, pairs)
    assert [each.line for each in checked.pairs] == [1, 2, 3, 4, 5, 6]
    assert [each.repeats for each in checked.pairs] == [None, None, None, 1, None, 2]
    with pytest.raises(UsageError) as refused:  # circuit's own words for that pair
        extractor.circuit(pairs=[PAIR, LONGER], progress=False)
    (third,) = checked.refused
    assert third.line == 3 and third.refused == str(refused.value).replace("pair 2:", "pair 3:")
    ranks = []
    for pair, each in zip(pairs, checked.pairs, strict=True):
        if each.refused is not None:
            continue
        (rank, clean), (_, corrupt) = _reference(path, extractor.loaded.model, pair)
        assert each.measured is not None and each.tokens is not None
        assert each.measured.rank == rank
        assert each.measured.clean == pytest.approx(clean, abs=1e-4)
        assert each.measured.corrupt == pytest.approx(corrupt, abs=1e-4)
        assert each.tokens.text == each.tokens.corrupt == token_ids(path, pair["text"]).shape[1]
        assert each.tokens.answer == each.tokens.versus == 1
        ranks.append(rank)
        assert each.prefers == (clean > 0)
    assert checked.answered == ranks.count(1) and checked.metric == "logit_difference"
    assert len(set(ranks)) > 1 or ranks[0] != 1  # the tiny model does not answer every pair


def test_pairs_check_lists_each_pair_and_exits_1_naming_a_refused_line(
    runner, generators, tmp_path
):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(pair) + "\n" for pair in (PAIR, LONGER, PAIR)))
    arguments = ["pairs", "check", str(source), "--model", generators[FAMILY]]
    result = runner.invoke(app, [*arguments, "-f", "json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["pairs"], document["refused"], document["repeated"]) == (3, 1, 1)
    assert f"{source}, line 2: the corrupted text is" in result.stderr
    table = runner.invoke(app, arguments)
    assert table.exit_code == 1 and "repeats line 1" in table.stdout
    assert "1 of 3 pairs would be refused by circuit" in table.stderr


def test_pairs_check_refuses_a_file_that_is_not_jsonl_in_one_line(runner, generators, tmp_path):
    source = tmp_path / "pairs.txt"
    source.write_text("The man walked the dog because\n")
    result = runner.invoke(app, ["pairs", "check", str(source), "--model", generators[FAMILY]])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "one JSON object per line" in result.stderr


def test_a_split_holds_out_a_share_of_the_distinct_pairs_none_on_both_sides():
    from attnviz.circuits.pair_checks import split_pairs

    pairs = [{**PAIR, "text": f"{PAIR['text']} {n}"} for n in range(11)]
    given = [*pairs, pairs[3], pairs[7], pairs[3]]  # three repeats
    fitted, held, repeats = split_pairs(given, 0.3, seed=4)
    assert repeats == 3 and len(held) == round(11 * 0.3) and len(fitted) == 11 - len(held)
    texts = [pair["text"] for pair in fitted], [pair["text"] for pair in held]
    assert not set(texts[0]) & set(texts[1])
    assert sorted(texts[0] + texts[1]) == sorted(pair["text"] for pair in pairs)
    order = [pair["text"] for pair in pairs]
    assert all(sorted(side, key=order.index) == side for side in texts)  # the file's order
    assert split_pairs(given, 0.3, seed=4)[1] == held
    assert any(split_pairs(given, 0.3, seed=seed)[1] != held for seed in range(5, 10))


@pytest.mark.parametrize("share", ["0", "1", "0.01"])
def test_a_split_that_leaves_a_side_empty_is_refused_and_writes_nothing(runner, tmp_path, share):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({**PAIR, "text": f"a {n}"}) + "\n" for n in range(4)))
    result = runner.invoke(app, ["pairs", "split", str(source), "--held-out", share])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--held-out" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pairs.jsonl"]


def test_pairs_split_writes_both_sides_beside_the_file(runner, tmp_path):
    source = tmp_path / "pairs.jsonl"
    lines = [json.dumps({**PAIR, "text": f"a {n}"}) for n in range(6)]
    source.write_text("".join(f"{line}\n" for line in [*lines, lines[0]]))
    result = runner.invoke(app, ["pairs", "split", str(source), "--seed", "2"])
    assert result.exit_code == 0 and result.stdout == ""
    assert "6 distinct pairs (1 repeated pair left out): 3 to" in result.stderr
    train = (tmp_path / "pairs.train.jsonl").read_text().splitlines()
    held = (tmp_path / "pairs.held-out.jsonl").read_text().splitlines()
    assert len(train) == len(held) == 3
    read = sorted((json.loads(line) for line in train + held), key=lambda pair: pair["text"])
    assert read == [json.loads(line) for line in lines]


TEMPLATE = {
    "text": "The {A} saw the {B} because",
    "answer": " it",
    "versus": " the",
    "corrupt": "The {C} saw the {B} because",
    "rows": ["man", "dog", "cat", "girl", "zqxvw"],  # the last more than one token
}


def test_made_pairs_are_every_draw_circuit_reads_as_made(generators, language_models):
    from itertools import permutations

    from attnviz.circuits.pair_templates import made_pairs

    extractor, path = language_models[FAMILY], generators[FAMILY]
    made = made_pairs(extractor, TEMPLATE, count=1000, seed=0)
    expected, other = set(), 0
    for a, b, c in permutations(TEMPLATE["rows"], 3):  # every draw, by hand
        text, corrupt = f"The {a} saw the {b} because", f"The {c} saw the {b} because"
        if token_ids(path, text).shape != token_ids(path, corrupt).shape:
            other += 1
        else:
            expected.add((text, corrupt))
    assert 0 < other < 60 and expected  # both kinds are drawn
    assert {(pair["text"], pair["corrupt"]) for pair in made.pairs} == expected
    assert (made.other_lengths, made.long_answers, made.repeats) == (other, 0, 0)
    assert all(pair["answer"] == " it" and pair["versus"] == " the" for pair in made.pairs)
    fewer = made_pairs(extractor, TEMPLATE, count=5, seed=3)
    assert len(fewer.pairs) == 5 and all(pair in made.pairs for pair in fewer.pairs)
    assert made_pairs(extractor, TEMPLATE, count=5, seed=3) == fewer  # the seed's draws


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({**TEMPLATE, "rows": []}, '"rows" is empty'),
        ({**TEMPLATE, "rows": ["man", "dog"]}, "fills 3 slots (A, B, C) with distinct rows of 2"),
        ({**TEMPLATE, "text": "The {0} saw"}, "a slot is a name"),
        ({**TEMPLATE, "corrupt": None}, 'no "corrupt"'),
        ({**TEMPLATE, "rows": [{"name": "man"}] * 3}, "cannot be filled from its rows"),
    ],
)
def test_a_template_that_cannot_be_filled_is_refused_in_one_line(
    runner, generators, tmp_path, template, message
):
    source = tmp_path / "template.json"
    source.write_text(json.dumps(template))
    made = tmp_path / "made.jsonl"
    arguments = ["pairs", "make", str(source), "--model", generators[FAMILY], "-o", str(made)]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2 and result.stdout == "" and not made.exists()
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_bare_pairs_shows_its_commands_and_succeeds(runner):
    result = runner.invoke(app, ["pairs"])
    assert result.exit_code == 0 and result.stderr == ""
    commands = result.stdout.split("Commands:")[1].split()
    assert [word for word in commands if word in ("make", "check", "split")][:3] == [
        "make",
        "check",
        "split",
    ]


def test_pairs_split_never_overwrites_a_file_it_was_not_told_to_write(runner, tmp_path):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({**PAIR, "text": f"a {n}"}) + "\n" for n in range(4)))
    theirs = tmp_path / "pairs.held-out.jsonl"
    theirs.write_text("the user's own\n")
    result = runner.invoke(app, ["pairs", "split", str(source)])
    assert result.exit_code == 2 and "exists already: give --output STEM" in result.stderr
    assert theirs.read_text() == "the user's own\n"
    assert not (tmp_path / "pairs.train.jsonl").exists()
    named = runner.invoke(app, ["pairs", "split", str(source), "-o", str(tmp_path / "mine")])
    assert named.exit_code == 0 and (tmp_path / "mine.train.jsonl").exists()
