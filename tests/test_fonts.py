"""The pictures' font stack (attnviz.render.fonts): what it cannot draw is escaped."""

from __future__ import annotations

from attnviz.render.fonts import FONT_STACK, Fonts


def test_a_character_no_font_of_the_stack_has_is_written_as_its_escape():
    fonts = Fonts(("DejaVu Sans",), frozenset(map(ord, "ab")))
    text = "a\u241e\u2421\x07\u3042\U0001f600\n b"  # ␞ and ␡: safe_text's control pictures
    assert fonts.text(text) == "a\\x1e\\x7f\\x07\\u3042\\U0001f600\n b"


def test_the_installed_stack_begins_with_the_font_matplotlib_ships():
    fonts = Fonts.installed()
    assert fonts.families[0] == FONT_STACK[0] == "DejaVu Sans"
    assert set(fonts.families) <= set(FONT_STACK)
    assert {ord(character) for character in "abc␣→"} <= fonts.characters
    assert fonts.text("a dog␣→") == "a dog␣→"
