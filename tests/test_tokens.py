from __future__ import annotations

import pytest

from attnviz.tokens import display_label, tokenize


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
