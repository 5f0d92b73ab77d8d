"""Writes three datasets of pairs for `attnviz circuit --pairs` beside the IOI pairs of
benchmarks/ioi_pairs.py, each a task the circuit literature compares methods on:

- sample_texts/capital_pairs.jsonl, factual recall: "The capital of France is" answers
  " Paris"; its twin names another country, whose capital is the versus.
- sample_texts/addition_pairs.jsonl, two-digit addition (MIB's arithmetic task, in
  digits): after two worked sums, "23+45=" answers the sum's first digit "6"; its twin
  changes the second number so that the sum's first digit (the versus) is another.
  (Without the worked sums SmolLM2 prefers the answer on 28 of the 60 clean texts, with
  them on 51.)
- sample_texts/agreement_pairs.jsonl, subject-verb agreement (Finlayson et al. 2021;
  Marks et al. 2024): "The keys near the old house" answers " are" versus " is"; its
  twin's subject is the other number (half the pairs begin singular).

Every text and its twin have as many tokens under SmolLM2's and Gemma 3's tokenizers,
and every answer and versus is one token in both: the word lists below are those for
which that holds (``--check`` checks it; so does tests/test_tasks.py). The files are the
same every time.

    python benchmarks/task_pairs.py              # writes the three files
    python benchmarks/task_pairs.py --check      # each pair's tokens, under both models'
    python benchmarks/task_pairs.py --preferred  # on how many clean texts each model
                                                 # gives the answer a larger logit than the
                                                 # versus (needs attnviz[smollm2,gemma3])
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

PAIRS = 60
SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"

# Each country and its capital one token after a space, in both tokenizers; countries
# whose capital a reader (or a small model) commonly gets wrong are left out.
CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Japan": "Tokyo", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens",
    "Austria": "Vienna", "Portugal": "Lisbon", "Ireland": "Dublin", "Poland": "Warsaw",
    "China": "Beijing", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Denmark": "Copenhagen", "Hungary": "Budapest", "Kenya": "Nairobi", "Peru": "Lima",
    "Cuba": "Havana", "Iran": "Tehran", "England": "London", "Belgium": "Brussels",
    "Netherlands": "Amsterdam", "Chile": "Santiago", "Iraq": "Baghdad", "Syria": "Damascus",
    "Korea": "Seoul", "Scotland": "Edinburgh", "Bulgaria": "Sofia", "Afghanistan": "Kabul",
    "Philippines": "Manila", "Tunisia": "Tunis",
}  # fmt: skip
CAPITAL_TEMPLATES = ["The capital of {country} is", "The capital city of {country} is"]

# Each noun and its plural one token after a space, in both tokenizers.
NOUNS = (
    "key dog book car house tree girl boy teacher student door window cat bird friend road "
    "song letter doctor apple flower chair table picture river cup box ship horse lamp plate "
    "bottle coin shoe"
).split()
PLURALS = {"box": "boxes"}
ADDITION_SHOWN = "11+12=23\n35+21=56\n"  # two worked sums before each one asked
AGREEMENT_TEMPLATES = [
    "The {noun} near the old house",
    "The {noun} in the garden",
    "The {noun} behind the school",
    "The {noun} on the left",
]


Pair = dict[str, str]


def _distinct(
    count: int, seed: int, draw: Callable[[int, random.Random], Pair | None]
) -> list[Pair]:
    """``count`` distinct pairs, each ``draw(index, chosen)`` (None: drawn again) for the
    index it would take; a pair drawn before is drawn again, so that no pair is on both
    sides of a split of the file."""
    chosen = random.Random(seed)
    made: list[Pair] = []
    seen: set[tuple[str, ...]] = set()
    while len(made) < count:
        pair = draw(len(made), chosen)
        if pair is None or tuple(pair.values()) in seen:
            continue
        seen.add(tuple(pair.values()))
        made.append(pair)
    return made


def capital_pairs(count: int = PAIRS, seed: int = 0) -> list[Pair]:
    """``count`` pairs, the templates in turn, two countries drawn with ``seed``."""

    def draw(index: int, chosen: random.Random) -> Pair:
        template = CAPITAL_TEMPLATES[index % len(CAPITAL_TEMPLATES)]
        country, other = chosen.sample(sorted(CAPITALS), 2)
        return {
            "text": template.format(country=country),
            "answer": " " + CAPITALS[country],
            "versus": " " + CAPITALS[other],
            "corrupt": template.format(country=other),
        }

    return _distinct(count, seed, draw)


def addition_pairs(count: int = PAIRS, seed: int = 0) -> list[Pair]:
    """``count`` pairs "a+b=" of two-digit numbers whose sum has two digits; the twin's
    second number has two digits too and moves the sum's first digit."""

    def draw(_index: int, chosen: random.Random) -> Pair | None:
        a, b, other = chosen.randint(10, 89), chosen.randint(10, 89), chosen.randint(10, 89)
        clean, corrupt = a + b, a + other
        if not (10 <= clean <= 99 and 10 <= corrupt <= 99) or clean // 10 == corrupt // 10:
            return None
        return {
            "text": f"{ADDITION_SHOWN}{a}+{b}=",
            "answer": str(clean // 10),
            "versus": str(corrupt // 10),
            "corrupt": f"{ADDITION_SHOWN}{a}+{other}=",
        }

    return _distinct(count, seed, draw)


def agreement_pairs(count: int = PAIRS, seed: int = 0) -> list[Pair]:
    """``count`` pairs, the templates in turn, a noun drawn with ``seed``: the even ones
    singular (" is" versus " are"), the odd ones plural, each twin the other number."""

    def draw(index: int, chosen: random.Random) -> Pair:
        template = AGREEMENT_TEMPLATES[index % len(AGREEMENT_TEMPLATES)]
        noun = chosen.choice(NOUNS)
        forms = [(noun, " is"), (PLURALS.get(noun, noun + "s"), " are")]
        (subject, verb), (other, other_verb) = forms if index % 2 == 0 else forms[::-1]
        return {
            "text": template.format(noun=subject),
            "answer": verb,
            "versus": other_verb,
            "corrupt": template.format(noun=other),
        }

    return _distinct(count, seed, draw)


TASKS: dict[str, Callable[[], list[Pair]]] = {
    "capital_pairs.jsonl": capital_pairs,
    "addition_pairs.jsonl": addition_pairs,
    "agreement_pairs.jsonl": agreement_pairs,
}
MODELS = ("smollm2", "gemma3")


def written(pairs: list[Pair]) -> str:
    return "".join(json.dumps(pair) + "\n" for pair in pairs)


def check(tokenizers: dict[str, Callable[[str], list[int]]]) -> list[str]:
    """What fails in the written files: a text and its twin of other lengths, an answer
    or versus not one token, under each tokenizer (text -> its ids, no special tokens)."""
    failed = []
    for name in TASKS:
        lines = (SAMPLES / name).read_text(encoding="utf-8").splitlines()
        for number, pair in enumerate(map(json.loads, lines), 1):
            for model, ids in tokenizers.items():
                if len(ids(pair["text"])) != len(ids(pair["corrupt"])):
                    failed.append(f"{name} line {number}: the twins' lengths differ ({model})")
                for word in ("answer", "versus"):
                    if len(ids(pair[word])) != 1:
                        failed.append(f"{name} line {number}: {word} is not one token ({model})")
    return failed


def preferred() -> None:
    """On how many clean texts each model's next-token logit of the answer is above the
    versus's (the text tokenized as attnviz reads it)."""
    import torch

    import attnviz

    for model_name in MODELS:
        loaded = attnviz.load(model_name).loaded
        model, tokenizer = loaded.model, loaded.tokenizer
        for name in TASKS:
            lines = (SAMPLES / name).read_text(encoding="utf-8").splitlines()
            pairs = [json.loads(line) for line in lines]
            right = 0
            for pair in pairs:
                ids = tokenizer(pair["text"], return_tensors="pt")["input_ids"]
                with torch.inference_mode():
                    last = model(input_ids=ids).logits[0, -1]
                answer, versus = (tokenizer(pair[word], add_special_tokens=False)["input_ids"][0]
                                  for word in ("answer", "versus"))  # fmt: skip
                right += bool(last[answer] > last[versus])
            print(f"{model_name}\t{name}\t{right} of {len(pairs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the tokens only")
    parser.add_argument("--preferred", action="store_true", help="count what each model prefers")
    arguments = parser.parse_args()
    if arguments.preferred:
        preferred()
        return
    if arguments.check:
        import attnviz

        tokenizers = {}
        for model_name in MODELS:
            tokenizer = attnviz.load(model_name).loaded.tokenizer
            tokenizers[model_name] = lambda text, t=tokenizer: t(text, add_special_tokens=False)[
                "input_ids"
            ]
        failed = check(tokenizers)
        print("\n".join(failed) or "every pair holds under both tokenizers")
        raise SystemExit(1 if failed else 0)
    for name, make in TASKS.items():
        (SAMPLES / name).write_text(written(make()), encoding="utf-8")
        print(f"wrote {PAIRS} pairs to {SAMPLES / name}")


if __name__ == "__main__":
    main()
