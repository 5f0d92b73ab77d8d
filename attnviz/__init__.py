"""attnviz: see what every attention head attends to.

>>> import attnviz
>>> maps = attnviz.extract("Hello I love you", mode="masked", layers=0)
>>> maps.weights.shape    # (layers, heads, query tokens, key tokens)
(1, 4, 4, 4)
"""

from attnviz.core import Mode, extract
from attnviz.errors import AttnvizError, AttnvizWarning, ExitCode, UsageError
from attnviz.maps import SCHEMA_VERSION, AttentionMaps


def __getattr__(name: str) -> str:
    # importlib.metadata costs ~25 ms; only --version and saved documents need it.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("attnviz")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")


__all__ = [
    "SCHEMA_VERSION",
    "AttentionMaps",
    "AttnvizError",
    "AttnvizWarning",
    "ExitCode",
    "Mode",
    "UsageError",
    "__version__",
    "extract",
]
