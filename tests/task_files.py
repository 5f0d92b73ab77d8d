"""The datasets of pairs shipped beside the IOI pairs (benchmarks/task_pairs.py writes
them), read, and what a tokenizer makes of them: written apart from the script."""

from __future__ import annotations

import json
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"
TASK_FILES = ("capital_pairs.jsonl", "addition_pairs.jsonl", "agreement_pairs.jsonl")


def pairs_of(name):
    lines = (SAMPLES / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def token_failures(tokenizer):
    """Each pair of each file whose text and twin differ in length, or whose answer or
    versus is not one token after its text, under ``tokenizer`` (a transformers one)."""

    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    failed = []
    for name in TASK_FILES:
        for number, pair in enumerate(pairs_of(name), 1):
            if len(ids(pair["text"])) != len(ids(pair["corrupt"])):
                failed.append((name, number, "lengths"))
            for word in ("answer", "versus"):
                whole, text = ids(pair["text"] + pair[word]), ids(pair["text"])
                if len(whole) != len(text) + 1 or whole[: len(text)] != text:
                    failed.append((name, number, word))
    return failed
