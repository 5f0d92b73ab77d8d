"""The built-in multi-head attention stack (PyTorch, seeded, no download).

``BuiltinConfig`` is plain data and imports no torch; the modules that do are
imported when first named.
"""

from typing import Any

from attnviz.builtin.config import BuiltinConfig

_LAZY = {
    "MultiHeadAttention": "attnviz.builtin.attention",
    "scaled_dot_product_attention": "attnviz.builtin.attention",
    "BuiltinTransformer": "attnviz.builtin.model",
    "BuiltinExtractor": "attnviz.builtin.extractor",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnviz.builtin' has no attribute {name!r}")


__all__ = [
    "BuiltinConfig",
    "BuiltinExtractor",
    "BuiltinTransformer",
    "MultiHeadAttention",
    "scaled_dot_product_attention",
]
