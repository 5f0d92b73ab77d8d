"""Writes sample_texts/ioi_pairs.jsonl: indirect-object identification (Wang et al. 2022)
pairs for `attnviz circuit --pairs`. Each text names two people and then one of them again
(the subject); the answer is the other (the indirect object), versus the subject. Its
corrupted twin names a third person in the subject's second place, so that nothing in it
says which of the first two is the answer. Every name is one token of SmolLM2's tokenizer
after a space, so each text and its twin have as many tokens.

    python benchmarks/ioi_pairs.py          # writes the file (the same every time)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TEMPLATES = [
    "When {a} and {b} went to the store, {s} gave a drink to",
    "When {a} and {b} got a snack at the cafe, {s} decided to give it to",
    "Then, {a} and {b} had a long argument. Afterwards {s} said to",
    "After {a} and {b} went to the park, {s} gave a ball to",
    "While {a} and {b} were working at the office, {s} handed a report to",
    "Friends {a} and {b} found a cat at the beach. {s} gave the cat to",
]
NAMES = (
    "Mary John Tom James Anna Paul Sarah Mark Lisa David Emma Peter Kate Mike Laura Jack "
    "Alice Bob Sam Tim Ben Dan Amy Joe Max Ryan Adam Eric Jane Rose"
).split()
PAIRS = 60
OUT = Path(__file__).resolve().parent.parent / "sample_texts" / "ioi_pairs.jsonl"


def pairs(count: int = PAIRS, seed: int = 0) -> list[dict[str, str]]:
    """``count`` pairs, the templates in turn, the names drawn with ``seed``; the subject
    is the first-named person in half of them, the second in the other half."""
    chosen = random.Random(seed)
    made = []
    for index in range(count):
        template = TEMPLATES[index % len(TEMPLATES)]
        answer, subject, third = chosen.sample(NAMES, 3)
        first, second = (answer, subject) if index % 2 == 0 else (subject, answer)
        made.append({
            "text": template.format(a=first, b=second, s=subject),
            "answer": " " + answer,
            "versus": " " + subject,
            "corrupt": template.format(a=first, b=second, s=third),
        })  # fmt: skip
    return made


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(pair) + "\n" for pair in pairs()), encoding="utf-8")
    print(f"wrote {PAIRS} pairs to {OUT}")
