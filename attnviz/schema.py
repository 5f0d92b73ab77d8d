"""The envelope of every JSON document attnviz writes, and the package's version.

One schema version covers every document (maps, head statistics, top keys,
diffs, explanations, the model list). Version 2 added ``query_special`` and
``key_special`` to maps and stores an aggregate by its option value
(``"mean"``); version-1 maps documents still read.
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum
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


def fields_document(record: Any, **given: Any) -> dict[str, Any]:
    """A dataclass as a JSON document (:func:`envelope`): each field by name, in order (an
    enum by its value, an array as :func:`json_numbers`), a field ``given`` as given, then
    the rest of ``given``."""
    body = {}
    for field in fields(record):
        value = given.pop(field.name) if field.name in given else getattr(record, field.name)
        if isinstance(value, Enum):
            value = value.value
        elif hasattr(value, "ndim"):
            value = json_numbers(value)
        body[field.name] = value
    return envelope(body | given)


def json_numbers(values: Any) -> Any:
    """An array as nested lists of floats; −∞ (hidden by a mask), which JSON lacks, as null."""
    if values.ndim > 1:
        return [json_numbers(row) for row in values]
    return [None if value == float("-inf") else float(value) for value in values]
