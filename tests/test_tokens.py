from __future__ import annotations

import numpy as np
import pytest

import attnviz
from attnviz.builtin.tokenizer import tokenize
from attnviz.cli import app
from attnviz.safe_text import display_label


def texts(tokens):
    return [token.text for token in tokens]


def test_words_and_punctuation_are_case_folded_with_spans():
    text = "Hello, I love you!"
    tokens = tokenize(text)
    assert texts(tokens) == ["hello", ",", "i", "love", "you", "!"]
    for token in tokens:
        assert text[token.start : token.end].casefold() == token.text


def test_keep_case():
    assert texts(tokenize("Hello World", lowercase=False)) == ["Hello", "World"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我爱你", ["我", "爱", "你"]),  # no spaces: a token per character
        ("東京へ行く", ["東", "京", "へ", "行", "く"]),
        ("אני אוהב אותך", ["אני", "אוהב", "אותך"]),  # right to left
        ("مرحبا بالعالم", ["مرحبا", "بالعالم"]),
        ("love 👨‍👩‍👧 you 👍🏽", ["love", "👨‍👩‍👧", "you", "👍🏽"]),  # emoji sequences stay whole
        ("café naïve", ["café", "naïve"]),
        ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),  # combining marks stay in their word
    ],
)
def test_any_script(text, expected):
    tokens = tokenize(text)
    assert texts(tokens) == expected
    assert all(text[token.start : token.end] == token.text for token in tokens)


def test_whitespace_only_gives_no_tokens():
    assert tokenize(" \t\n ") == []


def test_control_characters_become_visible_labels():
    tokens = texts(tokenize("\x1b[31m red\x00"))
    assert tokens[0] == "\x1b"
    labels = [display_label(token) for token in tokens]
    assert labels == ["␛", "[", "31m", "red", "␀"]
    assert display_label("a\u202eb") == "a\\u202eb"  # a bidi override cannot reorder the line
    assert display_label("\x9b") == "\\x9b"
    assert display_label("👨\u200d👩") == "👨\u200d👩"  # joiners are kept


def test_no_special_keeps_unknown_word_tokens(tiny):
    maps = attnviz.load(tiny["bert"]).extract("hello ☃ dog", special=False)
    assert maps.query_tokens == ["hello", "[UNK]", "dog"]
    np.testing.assert_allclose(maps.weights.sum(-1), 1, rtol=1e-5)


def test_label_positions_tell_repeated_tokens_apart(runner):
    maps = attnviz.extract("the man saw the dog").with_positions()
    assert maps.query_tokens == ["the·0", "man", "saw", "the·3", "dog"]
    shown = runner.invoke(app, ["show", "the man saw the dog", "--label-positions", "-l", "0",
                                "--head", "0", "--color", "never"])  # fmt: skip
    assert "the·0" in shown.stdout and "the·3" in shown.stdout
    table = runner.invoke(app, ["show", "the man saw the dog", "--label-positions", "-f", "csv"])
    assert ",the·3," in table.stdout


def test_raw_pieces_keep_the_tokenizers_spelling(tiny):
    extractor = attnviz.load(str(tiny["bert"]))
    cleaned = extractor.extract("unbelievable tokenization", layers=0)
    raw = extractor.extract("unbelievable tokenization", layers=0, raw_pieces=True)
    assert any(token.startswith("##") for token in raw.query_tokens)
    assert not any(token.startswith("##") for token in cleaned.query_tokens)
    np.testing.assert_array_equal(raw.weights, cleaned.weights)
