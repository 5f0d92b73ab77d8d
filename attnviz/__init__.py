"""attnviz: see what every attention head attends to.

>>> import attnviz
>>> extractor = attnviz.load()          # once: the built-in stack, or load("minilm")
>>> maps = extractor.extract("Hello I love you", mode="masked", layers=0)
>>> maps.weights.shape                   # (layers, heads, query tokens, key tokens)
(1, 4, 4, 4)

Names are imported when first used, so that ``import attnviz`` (and the
command line's ``--help``) costs neither numpy nor torch.
"""

from typing import TYPE_CHECKING

from attnviz.choices import Aggregate, Dtype, Mode, Output, View
from attnviz.errors import AttnvizError, AttnvizWarning, ExitCode, UsageError
from attnviz.lazy_names import lazy_names
from attnviz.schema import SCHEMA_VERSION, package_version

if TYPE_CHECKING:
    from attnviz.builtin.config import BuiltinConfig
    from attnviz.extractor import Extractor
    from attnviz.loading import ExtractorSpec, extract, load
    from attnviz.maps import AttentionMaps
    from attnviz.maps_files import read_maps
    from attnviz.pretrained.loading import LoadOptions
    from attnviz.render.page import show_html
    from attnviz.request import Request

_LAZY = {
    "load": "attnviz.loading",
    "extract": "attnviz.loading",
    "Extractor": "attnviz.extractor",
    "ExtractorSpec": "attnviz.loading",
    "Request": "attnviz.request",
    "AttentionMaps": "attnviz.maps",
    "BuiltinConfig": "attnviz.builtin.config",
    "LoadOptions": "attnviz.pretrained.loading",
    "show_html": "attnviz.render.page",
    "read_maps": "attnviz.maps_files",
}


__getattr__ = lazy_names("attnviz", _LAZY, __version__=package_version)

__all__ = [
    "SCHEMA_VERSION",
    "Aggregate",
    "AttentionMaps",
    "AttnvizError",
    "AttnvizWarning",
    "BuiltinConfig",
    "Dtype",
    "ExitCode",
    "Extractor",
    "ExtractorSpec",
    "LoadOptions",
    "Mode",
    "Output",
    "Request",
    "UsageError",
    "View",
    "__version__",
    "extract",
    "load",
    "read_maps",
    "show_html",
]
