"""attnviz leaves the global state of the libraries it uses as it found it."""

from __future__ import annotations

import warnings

import pytest

import attnviz
from attnviz.choices import Output, View
from attnviz.cli import app
from attnviz.outputs import PICTURES
from attnviz.render.image import Painter
from attnviz.render.style import Style


def test_pictures_change_no_matplotlib_setting():
    import matplotlib

    backend, settings = matplotlib.get_backend(), dict(matplotlib.rcParams)
    maps = attnviz.extract("a b c", layers=0)
    painter = Painter()
    for picture in PICTURES:
        for view in (View.HEAD, View.MODEL):
            assert all(data for _, data in painter.files(maps, view, picture, Style()))
    assert matplotlib.get_backend() == backend
    assert dict(matplotlib.rcParams) == settings


def test_a_painter_owns_its_canvases():
    maps = attnviz.extract("a b c", layers=0, heads=0)
    first, second = Painter(), Painter()
    list(first.files(maps, View.HEAD, Output.PNG, Style()))
    assert len(first.canvases) == 1 and second.canvases == {}


def test_reading_a_model_leaves_transformers_registries_and_its_attention_as_they_were(tiny):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    registries = (AttentionInterface._global_mapping, AttentionMaskInterface._global_mapping)
    before = [dict(registry) for registry in registries]
    extractor = attnviz.load(tiny["gpt2"])
    own = extractor.loaded.model.config._attn_implementation
    assert own == "sdpa"  # loaded with its own fast attention
    extractor.explain("Hello I love you", layer=1, head=0, query=2)
    extractor.extract("Hello I love you")
    assert [dict(registry) for registry in registries] == before
    assert extractor.loaded.model.config._attn_implementation == own


@pytest.mark.parametrize("bars_on", [True, False])
def test_loading_quietly_puts_transformers_logging_back(tiny, bars_on):
    from transformers.utils import logging as hf_logging

    (hf_logging.enable_progress_bar if bars_on else hf_logging.disable_progress_bar)()
    verbosity = hf_logging.get_verbosity()
    try:
        attnviz.load(tiny["bert"]).extract("Hello")
        assert hf_logging.is_progress_bar_enabled() == bars_on
        assert hf_logging.get_verbosity() == verbosity
    finally:
        hf_logging.enable_progress_bar()


def test_the_cli_puts_pythons_warning_printer_back(runner, tmp_path):
    from tests import tiny_models

    short = tiny_models.gpt2(tmp_path / "short", n_positions=8)
    printer = warnings.showwarning
    result = runner.invoke(app, ["show", "a b " * 8, "--model", str(short), "-f", "json"])
    assert result.exit_code == 0
    assert "attnviz: warning: the text has 32 tokens; the model reads at most 8" in result.stderr
    assert warnings.showwarning is printer
