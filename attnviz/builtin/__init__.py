"""The built-in multi-head attention stack (PyTorch, seeded, no download)."""

from attnviz.builtin.attention import MultiHeadAttention, scaled_dot_product_attention
from attnviz.builtin.model import BuiltinConfig, BuiltinTransformer

__all__ = [
    "BuiltinConfig",
    "BuiltinTransformer",
    "MultiHeadAttention",
    "scaled_dot_product_attention",
]
