"""Pairs made from a template (``attnviz pairs make``): a text, its answer, versus answer
and corrupted twin written with named slots, each pair filled with rows drawn from the
template's list, none twice in a pair; a pair kept only where ``circuit`` reads it as
made (its text and twin of as many tokens under the model's tokenizer) and its answer
and versus answer are one token each after the text, the others left out and counted.

A template (JSON)::

    {"text": "When {A} and {B} went to the store, {B} gave a drink to",
     "answer": " {A}", "versus": " {B}",
     "corrupt": "When {A} and {B} went to the store, {C} gave a drink to",
     "rows": ["Eric", "Kate", "Max", "Anna"]}

draws three distinct names as A, B and C (the slots the fields name); a row may be an
object of fields instead, each read as ``{A.country}``.
"""

from __future__ import annotations

import itertools
import re
import string
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from attnviz.asked import no_next_token
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.pair_checks import PAIR_FIELDS, as_pair, tokens_after
from attnviz.errors import UsageError
from attnviz.inputs import Input
from attnviz.request import Request

if TYPE_CHECKING:
    from attnviz.extractor import Extractor

_SLOT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MOST_DRAWS = 1_000_000  # orders of rows a template may give: more is refused, not drawn


@dataclass(frozen=True)
class Made:
    """The pairs made (JSONL lines' fields), and how many drawn were left out: their
    text and twin of other lengths (or refused otherwise by circuit), an answer of more
    than one token, or a repeat of a pair made already."""

    pairs: tuple[dict[str, str], ...]
    other_lengths: int
    long_answers: int
    repeats: int


def made_pairs(extractor: Extractor, template: Any, count: int, seed: int) -> Made:
    """Up to ``count`` pairs of ``template`` (a JSON document, checked), its draws taken in
    an order shuffled by ``seed``."""
    import numpy as np  # the shuffle

    # the pretrained passes: a model is loaded
    from attnviz.pretrained.answered import answered
    from attnviz.pretrained.extractor import PretrainedExtractor

    if not isinstance(extractor, PretrainedExtractor):
        raise no_next_token(extractor.name, "pairs make")
    written, slots, rows = checked_template(template)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UsageError(f"--count is a number of pairs, at least 1, not {count!r}")
    draws = list(itertools.permutations(range(len(rows)), len(slots)))
    if len(draws) > MOST_DRAWS:
        raise UsageError(f"the template draws {len(draws):,} orders of rows: give fewer rows")
    request = Request(maps=False, circuit=CircuitOptions())
    seen: set[Input] = set()
    found: list[dict[str, str]] = []
    other = long = repeats = 0
    for place in np.random.default_rng(seed).permutation(len(draws)).tolist():
        if len(found) == count:
            break
        filled = dict(zip(slots, (rows[index] for index in draws[place]), strict=True))
        pair = {name: text.format(**filled) for name, text in written.items()}
        given = as_pair(pair)
        if given in seen:
            repeats += 1
            continue
        seen.add(given)
        try:
            asked = answered(extractor, given, request)
        except UsageError:
            other += 1
            continue
        answers = [pair["answer"], *([pair["versus"]] if "versus" in pair else [])]
        if any(tokens_after(extractor, asked.side.text, each) != 1 for each in answers):
            long += 1
            continue
        found.append(pair)
    return Made(tuple(found), other, long, repeats)


def checked_template(template: Any) -> tuple[dict[str, str], list[str], list[Any]]:
    """A template's fields, the slots they name (in order of first use) and its rows,
    each checked: one line for what is wrong."""
    if not isinstance(template, dict):
        raise UsageError("a template is a JSON object: text, answer, corrupt (versus), rows")
    unknown = sorted(set(template) - {*PAIR_FIELDS, "rows"})
    if unknown:
        holds = ", ".join([*PAIR_FIELDS, "rows"])
        raise UsageError(f"a template has no field {unknown[0]!r}: it holds {holds}")
    written = {name: template[name] for name in PAIR_FIELDS if template.get(name) is not None}
    for name in ("text", "answer", "corrupt"):
        if not isinstance(written.get(name), str) or not written[name].strip():
            raise UsageError(f'the template has no "{name}": a text with {{SLOT}}s')
    rows = template.get("rows")
    if not isinstance(rows, list) or not rows:
        raise UsageError('the template\'s "rows" is empty: give the values its slots take')
    if not all(isinstance(row, str | dict) for row in rows):
        raise UsageError('each of the template\'s "rows" is a text or an object of texts')
    slots: list[str] = []
    for name, text in written.items():
        for _, field, _, _ in string.Formatter().parse(text):
            if field is None:
                continue
            slot = field.split(".")[0]
            if not _SLOT.fullmatch(slot):
                raise UsageError(f"the template's {name} names {{{field}}}: a slot is a name")
            if "." not in field and any(isinstance(row, dict) for row in rows):
                raise UsageError(
                    f"the template cannot be filled from its rows: its {name} names {{{field}}} "
                    f"and its rows are objects (name a field of them: {{{field}.NAME}})"
                )
            if slot not in slots:
                slots.append(slot)
    if len(slots) > len(rows):
        raise UsageError(
            f"the template fills {len(slots)} slots ({', '.join(slots)}) with distinct rows "
            f"of {len(rows)}: give more rows"
        )
    filled = [row if isinstance(row, str) else SimpleNamespace(**row) for row in rows]
    try:  # each field of each row the template names is there
        for row in filled:
            for text in written.values():
                text.format(**dict.fromkeys(slots, row))
    except (AttributeError, KeyError, IndexError, ValueError) as error:
        raise UsageError(f"the template cannot be filled from its rows: {error}") from None
    return written, slots, filled
