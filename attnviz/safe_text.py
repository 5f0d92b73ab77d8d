"""Text made safe for a terminal: every control or format character shown, never
obeyed. Labels, texts, options and paths all pass through :func:`display_label` before
they reach a terminal. Standard library only: the error path uses it."""

from __future__ import annotations

import unicodedata

# Joiners hold emoji sequences together; every other format character (bidi
# overrides above all) could reorder or hide what the terminal shows.
_KEPT_FORMAT_CHARACTERS = {"\u200c", "\u200d"}


def _visible(character: str) -> str:
    category = unicodedata.category(character)
    if category == "Cc":
        code = ord(character)
        if code < 0x20:
            return chr(0x2400 + code)  # the Control Pictures block: ␀ … ␟
        if code == 0x7F:
            return "\u2421"  # ␡
        return f"\\x{code:02x}"
    if category in {"Cf", "Cs", "Co", "Cn", "Zl", "Zp"} and (
        character not in _KEPT_FORMAT_CHARACTERS
    ):
        return f"\\u{ord(character):04x}"
    return character


VISIBLE_SPACE = "␣"  # a space where a label must show it: a lone space, or a token's own


def space_visible(text: str) -> str:
    """``text`` with each space shown as ``␣``, and nothing else changed: a token as a page
    shows it, as text (a browser runs none of it; a terminal needs :func:`spaces_shown`)."""
    return text.replace(" ", VISIBLE_SPACE)


def spaces_shown(text: str) -> str:
    """``text`` as a label shows a token's decoded text: :func:`display_label`, each
    space a visible one (a token's leading space is part of it)."""
    return display_label(text).replace(" ", VISIBLE_SPACE)


def display_label(token: str) -> str:
    """Return ``token`` with every control or format character made visible.

    Labels are data, never instructions to the terminal: an escape character
    shows as ``␛``, a right-to-left override as ``\\u202e``.
    """
    return "".join(_visible(character) for character in token)
