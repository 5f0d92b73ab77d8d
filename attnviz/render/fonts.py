"""The fonts every picture draws its text with: one stack, matplotlib's own DejaVu Sans
first, then the wide families below where they are installed (matplotlib takes each
glyph from the first that has it). A character no font of the stack has is written as
its escape (``\\x1e``, ``\\u3042``), never drawn as a box: a token's text stays legible
and matplotlib has no missing glyph to warn of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# DejaVu Sans ships with matplotlib, so the stack is never empty; the rest are the
# families that cover most of what tokenizers hold (CJK, symbols, the Control Pictures
# block that safe_text shows control characters with, emoji).
FONT_STACK = (
    "DejaVu Sans",
    "Noto Sans",
    "Noto Sans CJK JP",
    "Noto Sans Symbols 2",
    "Noto Sans Symbols",
    "Noto Sans Math",
    "Noto Emoji",
)
_LAID_OUT = frozenset("\n ")  # characters a layout places, no glyph drawn


@dataclass(frozen=True)
class Fonts:
    """The installed part of the stack, and every character one of its fonts has."""

    families: tuple[str, ...]
    characters: frozenset[int]

    @classmethod
    def installed(cls) -> Fonts:
        from matplotlib import font_manager
        from matplotlib.ft2font import FT2Font

        families: list[str] = []
        characters: set[int] = set()
        for family in FONT_STACK:
            try:
                path = font_manager.findfont(
                    font_manager.FontProperties(family=family), fallback_to_default=False
                )
            except ValueError:  # not installed
                continue
            families.append(family)
            characters.update(FT2Font(path).get_charmap())
        return cls(tuple(families), frozenset(characters))

    def text(self, text: str) -> str:
        """``text`` as a picture can draw it: each character no font has, escaped."""
        return "".join(
            character
            if character in _LAID_OUT or ord(character) in self.characters
            else _escaped(character)
            for character in text
        )

    def dress(self, figure: Any) -> None:
        """Give every text of ``figure`` the stack and the characters the stack can draw,
        tick labels given as texts among them (their axis keeps them apart, to format
        each tick again as it draws)."""
        from matplotlib.text import Text
        from matplotlib.ticker import FixedLocator

        for axes in figure.axes:
            for axis in (axes.xaxis, axes.yaxis):
                if isinstance(axis.get_major_locator(), FixedLocator):  # labels given by hand
                    labels = [self.text(label.get_text()) for label in axis.get_majorticklabels()]
                    axis.set_ticks(axis.get_majorticklocs(), labels)
        for artist in figure.findobj(Text):
            artist.set_fontfamily(self.families)
            artist.set_text(self.text(artist.get_text()))


def _escaped(character: str) -> str:
    """A character as Python writes it escaped; a control picture (safe_text's ␞ for
    the control character 0x1e) as the control character it stands for."""
    code = ord(character)
    if 0x2400 <= code <= 0x241F:
        code -= 0x2400
    elif code == 0x2421:  # ␡
        code = 0x7F
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
