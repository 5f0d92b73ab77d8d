"""The datasets of pairs beside IOI (sample_texts/*_pairs.jsonl): each the file its script
writes, each pair well formed, its answer right by the task's own rule (checked here from
the text, not from the script's tables). Their tokens under SmolLM2's and Gemma 3's
tokenizers are checked in tests/test_smollm2.py and tests/test_gemma3.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from attnviz.circuits.pair_checks import split_pairs
from tests.task_files import SAMPLES, TASK_FILES, pairs_of


def _script():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "task_pairs.py"
    spec = importlib.util.spec_from_file_location("task_pairs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_file_is_what_its_script_writes():
    script = _script()
    assert tuple(script.TASKS) == TASK_FILES
    for name, make in script.TASKS.items():
        assert (SAMPLES / name).read_text(encoding="utf-8") == script.written(make()), name


@pytest.mark.parametrize("name", TASK_FILES)
def test_each_pair_names_a_text_its_twin_and_two_answers(name):
    pairs = pairs_of(name)
    assert len(pairs) == 60 and len({pair["text"] for pair in pairs}) > 30
    for pair in pairs:
        assert set(pair) == {"text", "answer", "versus", "corrupt"}
        assert pair["text"] != pair["corrupt"] and pair["answer"] != pair["versus"]


@pytest.mark.parametrize("name", [*TASK_FILES, "ioi_pairs.jsonl"])
def test_no_pair_is_repeated_so_no_split_has_a_pair_on_both_sides(name):
    """benchmarks/mib.py scores one side of a task's pairs split (attnviz pairs split
    --held-out 0.5) and holds out the other: a pair in both would be "held out" and
    seen, and a repeat would be left out of both."""
    pairs = [tuple(sorted(pair.items())) for pair in pairs_of(name)]
    assert len(set(pairs)) == len(pairs) == 60
    fitted, held, repeats = split_pairs(pairs_of(name), 0.5, 0)
    assert repeats == 0 and len(fitted) == len(held) == 30
    assert not {tuple(sorted(pair.items())) for pair in fitted} & {
        tuple(sorted(pair.items())) for pair in held
    }


def test_an_additions_answer_is_its_sums_first_digit_and_its_twins_the_versus():
    for pair in pairs_of("addition_pairs.jsonl"):
        (a, b), (c, d) = (
            map(int, re.fullmatch(r"(?s).*\n(\d+)\+(\d+)=", pair[side]).groups())
            for side in ("text", "corrupt")
        )
        assert a == c and 10 <= a + b <= 99 and 10 <= c + d <= 99
        assert pair["answer"] == str(a + b)[0] and pair["versus"] == str(c + d)[0]


def test_agreements_answer_agrees_with_its_subject_and_its_twin_with_the_other():
    plural = {True: " are", False: " is"}
    for pair in pairs_of("agreement_pairs.jsonl"):
        subjects = [pair[side].split()[1] for side in ("text", "corrupt")]
        one, many = sorted(subjects, key=len)
        assert many in (one + "s", one + "es") and not one.endswith("s")
        many = [subject == many for subject in subjects]
        assert (pair["answer"], pair["versus"]) == (plural[many[0]], plural[many[1]])


def test_a_capitals_twin_asks_another_country_and_answers_its_capital():
    answers = {}
    for pair in pairs_of("capital_pairs.jsonl"):
        country, other = (pair[side].split()[-2] for side in ("text", "corrupt"))
        assert country != other
        for asked, capital in ((country, pair["answer"]), (other, pair["versus"])):
            assert answers.setdefault(asked, capital) == capital  # one capital a country
    assert len(set(answers.values())) == len(answers)
