"""The built-in multi-head attention stack (PyTorch, seeded, no download).

``BuiltinConfig`` is plain data and imports no torch; the modules that do are
imported when first named.
"""

from attnviz.builtin.config import BuiltinConfig
from attnviz.lazy_names import lazy_names

_LAZY = {
    "MultiHeadAttention": "attnviz.builtin.attention",
    "scaled_dot_product_attention": "attnviz.builtin.attention",
    "BuiltinTransformer": "attnviz.builtin.model",
    "BuiltinExtractor": "attnviz.builtin.extractor",
}


__getattr__ = lazy_names("attnviz.builtin", _LAZY)

__all__ = [
    "BuiltinConfig",
    "BuiltinExtractor",
    "BuiltinTransformer",
    "MultiHeadAttention",
    "scaled_dot_product_attention",
]
