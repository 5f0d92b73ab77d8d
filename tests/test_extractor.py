"""One door to models: attnviz.load() gives an Extractor that loads once and extracts many."""

from __future__ import annotations

import multiprocessing
import pickle
import re

import numpy as np
import pytest

import attnviz
from attnviz.builtin import BuiltinConfig
from attnviz.errors import UsageError
from attnviz.loading import ExtractorSpec

TEXTS = ["Hello I love you", "The man walked the dog", "a b"]


def test_the_builtin_stack_is_built_once_for_many_texts(monkeypatch):
    from attnviz.builtin import model

    built = []
    original = model.BuiltinTransformer.__init__

    def counting(self, config):
        built.append(config)
        original(self, config)

    monkeypatch.setattr(model.BuiltinTransformer, "__init__", counting)
    extractor = attnviz.load(config=BuiltinConfig(seed=3))
    maps = [extractor.extract(text) for text in TEXTS]
    maps += [found.maps for found in extractor.run(TEXTS, mode="masked")]
    assert len(built) == 1 and len(maps) == 6
    assert maps[0].model == "builtin:layers=2,heads=4,d_model=64,seed=3"


def test_run_equals_extract_one_by_one_for_the_builtin_stack():
    extractor = attnviz.load()
    items = [("a b c", "x y"), ("the cat sat", "le chat")]
    together = [found.maps for found in extractor.run(items, mode="cross", layers=1, heads="0,2")]
    for (text, target), maps in zip(items, together, strict=True):
        alone = attnviz.extract(text, mode="cross", target=target, layers=1, heads="0,2")
        np.testing.assert_array_equal(maps.weights, alone.weights)
        assert maps.query_tokens == alone.query_tokens and maps.target == target


def test_run_batches_a_pretrained_model_and_equals_extract(tiny):
    extractor = attnviz.load(tiny["bert"])
    together = [found.maps for found in extractor.run(TEXTS, layers="0-1", batch_size=2)]
    assert [maps.text for maps in together] == TEXTS
    for text, maps in zip(TEXTS, together, strict=True):
        alone = extractor.extract(text, layers="0-1")
        np.testing.assert_allclose(maps.weights, alone.weights, atol=1e-6, rtol=0)
        assert maps.query_special == alone.query_special


def test_a_bad_request_is_refused_before_any_work():
    extractor = attnviz.load()
    with pytest.raises(UsageError, match="unknown mode 'sideways'"):
        extractor.run(TEXTS, mode="sideways")
    with pytest.raises(UsageError, match="layer 9 is out of range"):
        extractor.run(TEXTS, layers=9)
    with pytest.raises(UsageError, match="exist only in pretrained models"):
        extractor.extract("a b", words=True)
    with pytest.raises(UsageError, match="the target is empty"):
        extractor.extract("a b", mode="cross", target=" ")
    assert extractor._stack is None  # nothing was built for a request that was wrong


def test_special_tokens_are_marked_where_the_tokenizer_knows_them(tiny):
    maps = attnviz.load(tiny["bert"]).extract("Hello I love you")
    assert maps.query_special[0] and maps.query_special[-1]
    assert not any(maps.query_special[1:-1])
    assert attnviz.extract("[CLS] hello").query_special is None  # the built-in stack has none


def test_a_spec_is_small_picklable_and_rebuilds_the_same_extractor():
    spec = attnviz.load(config=BuiltinConfig(num_heads=2, d_model=8, seed=7)).spec
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and len(pickle.dumps(spec)) < 1000
    np.testing.assert_array_equal(
        again.load().extract("a b c").weights, spec.load().extract("a b c").weights
    )


def _extract_in_worker(spec: ExtractorSpec) -> np.ndarray:
    return spec.load().extract("Hello I love you", layers=0).weights


@pytest.mark.system
@pytest.mark.slow
def test_a_worker_process_builds_its_own_extractor_from_the_spec(tiny):
    specs = [attnviz.load(config=BuiltinConfig(seed=5)).spec, ExtractorSpec(tiny["gpt2"])]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        results = pool.map(_extract_in_worker, specs)
    for spec, weights in zip(specs, results, strict=True):
        np.testing.assert_allclose(weights, _extract_in_worker(spec), atol=1e-6, rtol=0)


def test_load_refuses_a_config_for_a_pretrained_model(tiny):
    with pytest.raises(UsageError, match="do not apply to a pretrained model"):
        attnviz.load(tiny["bert"], config=BuiltinConfig())


def test_the_name_that_maps_record_loads_the_same_stack():
    config = BuiltinConfig(num_layers=3, num_heads=2, d_model=8, seed=7, positions=False)
    recorded = attnviz.extract("a b c", config=config)
    again = attnviz.load(recorded.model).extract("a b c")
    assert again.model == recorded.model
    np.testing.assert_array_equal(again.weights, recorded.weights)
    seeded = attnviz.load("builtin:seed=7").extract("a b c")
    assert seeded.model == BuiltinConfig(seed=7).name
    with pytest.raises(UsageError, match="builtin:seed=7 names the built-in stack's settings"):
        attnviz.load("builtin:seed=7", config=config)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("builtin:size=3", "has no setting 'size=3'; it takes layers=, heads="),
        ("builtin:seed=-1", "seed takes a whole number, not '-1'"),
        ("builtin:projections=random", "projections must be one of learned, identity"),
        ("builtin:heads=3", "d_model (64) must be a multiple of num_heads (3)"),
    ],
)
def test_a_builtin_name_that_describes_no_stack_is_refused(name, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        attnviz.load(name)


def test_attnviz_extract_is_load_then_extract():
    np.testing.assert_array_equal(
        attnviz.extract("a b c", mode="masked", layers=1).weights,
        attnviz.load().extract("a b c", mode="masked", layers=1).weights,
    )


def test_the_python_api_example_runs(monkeypatch, tmp_path):
    """The example that opens the manual's Python API page is run as written, in a
    folder of its own (it saves a picture) that sees the sample texts."""
    from pathlib import Path

    root = Path(__file__).parent.parent
    page = (root / "docs" / "python.md").read_text(encoding="utf-8")
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "sample_texts").symlink_to(root / "sample_texts")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/python.md", "exec"), namespace)
    assert namespace["maps"].weights.ndim == 4
    assert namespace["same"].to_dict() == namespace["document"]
    assert namespace["small"].config.num_layers == 4
    assert len(list(namespace["cross"])) == 1
    assert (tmp_path / "fig2.pdf").read_bytes().startswith(b"%PDF")
    again = namespace["again"]  # read back: the first example's maps (the loop reuses the name)
    assert (again.text, again.mode, again.weights.shape) == (
        "Hello I love you",
        "masked",
        (1, 2, 4, 4),
    )
