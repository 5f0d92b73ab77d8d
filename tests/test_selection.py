from __future__ import annotations

import pytest

from attnviz.errors import UsageError
from attnviz.selection import resolve


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("all", [0, 1, 2, 3]),
        ("2", [2]),
        (2, [2]),
        ("-1", [3]),
        ("0,2", [0, 2]),
        ("2,0,2", [2, 0]),
        ("1-3", [1, 2, 3]),
        ("-2--1", [2, 3]),
        ("0, 3", [0, 3]),
        ([3, -4], [3, 0]),
    ],
)
def test_valid_selections(spec, expected):
    assert resolve(spec, 4, "head") == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("4", "head 4 is out of range: there are 4 heads (0 to 3, or -4 to -1 from the end)"),
        ("-5", "head -5 is out of range"),
        ("3-1", "runs backwards"),
        ("x", "is not an index"),
        ("1-", "is not an index"),
        ("", "is not an index"),
    ],
)
def test_invalid_selections_say_why(spec, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(spec, 4, "head")
