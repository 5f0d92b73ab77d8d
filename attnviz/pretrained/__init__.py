"""Pretrained transformers models: loading them safely and reading their attention.

- ``loading``: aliases, folders and the Hub cache; safety checks; ``load_model``.
- ``streams``: model families, which modules give which attention, ``stream_for``.
- ``encoding``: tokenising, padding, the inputs each mode needs, hooks, checks.
- ``labels``: piece labels, special tokens, word groups.
- ``extractor``: ``PretrainedExtractor``, the Extractor for these models.
- ``explain``: one query row, from dot products to weights.

Importing this package imports neither torch nor transformers.
"""

from attnviz.pretrained.attention_modules import Family, Stream, stream_for
from attnviz.pretrained.loading import ALIASES, LoadOptions, available_models

__all__ = ["ALIASES", "Family", "LoadOptions", "Stream", "available_models", "stream_for"]
