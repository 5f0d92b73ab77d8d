"""The envelope of every JSON document attnviz writes, and the package's version.

One schema version covers every document (maps, head statistics, top keys,
diffs, explanations, the model list). Version 2 added ``query_special`` and
``key_special`` to maps and stores an aggregate by its option value
(``"mean"``); version-1 maps documents still read.
"""

from __future__ import annotations

from functools import cache
from typing import Any

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


@cache  # the installed metadata does not change while the process runs
def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnviz")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def envelope(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` stamped with the schema version and the attnviz version that wrote it."""
    return {"schema_version": SCHEMA_VERSION, "attnviz_version": package_version(), **body}


def json_numbers(values: Any) -> Any:
    """An array as nested lists of floats; −∞ (hidden by a mask), which JSON lacks, as null."""
    if values.ndim > 1:
        return [json_numbers(row) for row in values]
    return [None if value == float("-inf") else float(value) for value in values]
