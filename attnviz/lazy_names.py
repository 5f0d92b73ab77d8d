"""Names a package gives when first used (a module ``__getattr__``, PEP 562), so that
importing the package costs none of the heavy modules behind them."""

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, homes: Mapping[str, str], **made: Callable[[], Any]
) -> Callable[[str], Any]:
    """A package's ``__getattr__``: each name of ``homes`` imported from its module when
    first asked for, each of ``made`` the value its function makes."""

    def attribute(name: str) -> Any:
        if name in made:
            return made[name]()
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return attribute
