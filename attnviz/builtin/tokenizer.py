"""Tokenising text for the built-in stack, and making token labels safe to show.

The built-in tokenizer splits words and punctuation, the way a person would
point at them. Scripts written without spaces (Chinese, Japanese) give one
token per character; any other symbol, emoji sequences included, is one token
per user-perceived character (grapheme cluster). Every token keeps the span of
the original text it came from.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import regex

_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}"
_TOKEN = regex.compile(
    rf"[{_UNSPACED}]"  # one character of a script written without spaces
    rf"|(?:(?![{_UNSPACED}])[\w\p{{M}}])+"  # a word: letters, digits, marks, underscore
    r"|(?!\s)\X"  # anything else visible: punctuation, symbols, emoji, control characters
)


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character that spells each byte -> the byte.

    Printable bytes spell themselves; the others (space, control bytes, …) are
    moved to code points from 256 up, which is how a space becomes ``Ġ``.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    spelled = {byte: chr(byte) for byte in printable}
    moved = (byte for byte in range(256) if byte not in spelled)
    spelled.update({byte: chr(256 + offset) for offset, byte in enumerate(moved)})
    return {character: byte for byte, character in spelled.items()}


_BYTE_ALPHABET = _byte_alphabet()


def decoded_piece(piece: str, *, byte_level: bool = False) -> str:
    """A sub-word piece as the tokenizer decodes it: ``##ing`` -> ``ing`` (a word's
    continuation), ``▁the`` -> `` the``, ``low</w>`` -> ``low``, and byte-level ``Ġlove``
    -> `` love``: a word's leading space is the token's, kept (views show it as ``␣``).

    A byte-level piece that holds only part of a character decodes to ``\ufffd``.
    """
    if byte_level and all(character in _BYTE_ALPHABET for character in piece):
        raw = bytes(_BYTE_ALPHABET[character] for character in piece)
        return raw.decode("utf-8", errors="replace")
    piece = piece.removesuffix("</w>").removeprefix("##")
    if piece.startswith("Ġ"):  # a byte-level space marker in a piece that is not all bytes
        piece = " " + piece[1:]
    return piece.replace("▁", " ")


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    start: int
    end: int


def tokenize(text: str, *, lowercase: bool = True, limit: int | None = None) -> list[Token]:
    """Split ``text`` into word and punctuation tokens with their character spans: its
    first ``limit`` of them, where given (a long text is not split past them)."""
    tokens = []
    for match in itertools.islice(_TOKEN.finditer(text), limit):
        piece = match.group()
        tokens.append(Token(piece.casefold() if lowercase else piece, match.start(), match.end()))
    return tokens


def count_tokens(text: str) -> int:
    """How many tokens :func:`tokenize` splits ``text`` into (some ten times faster)."""
    return len(_TOKEN.findall(text))
