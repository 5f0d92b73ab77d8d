from __future__ import annotations

import json

import numpy as np
import pytest

import attnviz
from attnviz.cli import app
from attnviz.errors import SchemaError
from attnviz.maps import AttentionMaps
from attnviz.maps_files import read_maps
from attnviz.schema import SCHEMA_VERSION

KEYS = {
    "schema_version",
    "attnviz_version",
    "model",
    "mode",
    "text",
    "target",
    "query_tokens",
    "key_tokens",
    "layers",
    "heads",
    "weights",
}


@pytest.mark.parametrize("mode", ["self", "masked", "cross"])
def test_json_round_trip_is_exact(mode):
    target = "je t'aime" if mode == "cross" else None
    maps = attnviz.extract("Hello I love you", mode=mode, target=target, layers="-1", heads="1,3")
    document = json.loads(json.dumps(maps.to_dict()))
    assert set(document) == KEYS
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["layers"] == [1] and document["heads"] == [1, 3]
    assert np.asarray(document["weights"]).shape == (1, 2, len(maps.query_tokens), 4)
    again = AttentionMaps.from_dict(document)
    assert np.array_equal(again.weights, maps.weights)
    assert again.weights.dtype == np.float32
    for name in ("query_tokens", "key_tokens", "layers", "heads", "mode", "model", "text"):
        assert getattr(again, name) == getattr(maps, name)
    assert again.target == target


def test_extract_public_api_shape_and_selection():
    maps = attnviz.extract("The man walked the dog", layers=[0, 1], heads="0-2")
    assert maps.weights.shape == (2, 3, 5, 5)
    assert maps.query_tokens == maps.key_tokens == ["the", "man", "walked", "the", "dog"]
    np.testing.assert_array_equal(maps.head(1, 2), maps.weights[1, 2])
    only = maps.select(layers=[1], heads=[2])
    np.testing.assert_array_equal(only.weights[0, 0], maps.head(1, 2))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 3}, "schema_version 3 is not supported"),
        ({"query_special": [True]}, "query_special has 1 flags for 2 tokens"),
        ({"key_special": ["yes", "no"]}, "lists of true and false"),
        ({"aggregate": "median"}, "'median' is not a valid Aggregate"),
        ({"weights": [[[[0.5]]]]}, "weights have shape"),
        ({"weights": [[1, [2]]]}, "malformed document"),
        ({"layers": None}, ""),
    ],
)
def test_bad_documents_are_refused(change, message):
    document = attnviz.extract("a b").to_dict()
    document.update(change)
    if change.get("layers", 0) is None:
        del document["layers"]
        message = "missing layers"
    with pytest.raises(SchemaError, match=message):
        AttentionMaps.from_dict(document)


def test_a_document_must_be_an_object():
    with pytest.raises(SchemaError, match="JSON object"):
        AttentionMaps.from_dict([1, 2])


def test_schema_1_documents_still_read():
    """Version 1 wrote an aggregate by its description and knew no special flags."""
    maps = attnviz.extract("a b c", layers=0)
    document = maps.to_dict()
    document.update(
        schema_version=1, aggregate="mean over heads", weights=maps.weights[:, :1].tolist()
    )
    again = AttentionMaps.from_dict(document)
    assert again.aggregate is attnviz.Aggregate.MEAN
    assert again.query_special is None and again.key_special is None
    np.testing.assert_array_equal(again.weights, maps.weights[:, :1])


def test_special_flags_round_trip():
    maps = attnviz.extract("a b").replace(query_special=[True, False], key_special=[False, True])
    document = json.loads(json.dumps(maps.to_dict()))
    assert document["query_special"] == [True, False]
    again = AttentionMaps.from_dict(document)
    assert again.query_special == [True, False] and again.key_special == [False, True]


def test_repr_says_what_the_maps_are_in_one_short_line():
    text = "The animal did not cross the street because it was too tired " * 20
    maps = attnviz.extract(text, mode="masked", layers="-1")
    shown = repr(maps)
    tokens = len(maps.query_tokens)
    assert shown.startswith(f"AttentionMaps('{maps.model}', masked, layers 1 × heads 0–3, ")
    assert f"{tokens} query × {tokens} key tokens, float32" in shown
    assert "\n" not in shown and len(shown) < 200  # not the weights, not every token
    assert "rollout of layers 0,1" in repr(attnviz.extract("a b c").aggregated("rollout"))


def test_aggregated_and_head_statistics_equal_the_commands(runner):

    text = "The man walked the dog"
    maps = attnviz.extract(text)
    shown = runner.invoke(app, ["show", text, "-a", "rollout", "-f", "json"])
    assert shown.exit_code == 0, shown.stderr
    rollout = AttentionMaps.from_dict(json.loads(shown.stdout))
    np.testing.assert_array_equal(maps.aggregated("rollout").weights, rollout.weights)
    listed = runner.invoke(app, ["heads", text, "-f", "json"])
    assert listed.exit_code == 0, listed.stderr
    rows = [row.as_dict() for row in maps.head_statistics()]
    assert all(row.pop("span") is None for row in rows)  # listed only with --span
    assert rows == json.loads(listed.stdout)["heads"]
    with pytest.raises(attnviz.UsageError, match="unknown aggregate 'median'"):
        maps.aggregated("median")


@pytest.mark.parametrize("view", ["head", "layer", "model"])
def test_to_html_opens_the_view_that_export_opens(runner, tmp_path, view):

    path = tmp_path / "page.html"
    arguments = ["export", "a b c", "--layer", "1", "--head", "2", "--view", view, "-o", str(path)]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    maps = attnviz.extract("a b c", layers=1, heads=2)
    assert maps.to_html(view) == path.read_text()


def test_to_html_refuses_a_view_it_does_not_know():
    with pytest.raises(attnviz.UsageError, match="unknown view 'map': choose one of head"):
        attnviz.extract("a b").to_html("map")


def test_notebook_html_is_bounded_and_says_what_it_left_out():
    words = " ".join(f"w{i}" for i in range(300))
    config = attnviz.BuiltinConfig(num_layers=4, num_heads=8)
    page = attnviz.extract(words, config=config)._repr_html_()
    assert len(page) < 2_000_000
    assert "are pooled by 2 to keep the page small" in page
    small = attnviz.extract("a b c")._repr_html_()
    assert "pooled" not in small


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda maps: maps.head(0, 99), "head 99 is not held"),
        (lambda maps: maps.select(layers=[7]), "layer 7 is not held"),
        (lambda maps: maps.reduced(rows=[0]).reduced(rows=[0]), "chosen rows or pooled bins"),
        (lambda maps: maps.between_sentences("a-b"), "needs the maps of a sentence pair"),
        (lambda maps: maps.reduced(pool=1), "at least 2, not 1"),
        (lambda maps: maps.reduced(pool=2).head_statistics(), "not of pooled bins"),
        (lambda maps: maps.aggregated("mean").head_statistics(), "not aggregated"),
    ],
)
def test_the_python_api_refuses_with_a_usage_error(call, message):
    """What the docs promise: attnviz.UsageError (a ValueError too), never a bare
    ValueError or IndexError from inside."""
    with pytest.raises(attnviz.UsageError, match=message):
        call(attnviz.extract("a b c"))


def test_a_stack_of_no_layers_is_a_usage_error():
    from attnviz.builtin.config import BuiltinConfig

    with pytest.raises(attnviz.UsageError, match="at least 1"):
        BuiltinConfig(num_layers=0)


@pytest.mark.parametrize("made", [["--pool", "2"], ["-a", "mean"]])
def test_heads_of_saved_maps_that_are_no_heads_rows_is_a_usage_error(runner, tmp_path, made):
    saved = tmp_path / "maps.json"
    saved.write_text(runner.invoke(app, ["show", "a b c d e", *made, "-f", "json"]).stdout)
    result = runner.invoke(app, ["heads", "--from", str(saved)])
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("attnviz: error: ") and "a bug" not in result.stderr


def test_diff_of_different_rows_is_refused(runner, tmp_path):
    """Rows 0 and 3 of one text are both 'the': the same labels, not the same rows."""
    paths = []
    for row in ("0", "3"):
        path = tmp_path / f"row{row}.json"
        shown = runner.invoke(app, ["show", "the man walked the dog", "--rows", row, "-f", "json"])
        path.write_text(shown.stdout)
        paths.append(str(path))
    result = runner.invoke(app, ["diff", *paths])
    assert result.exit_code == 2
    assert "different query rows (rows 0 and rows 3)" in result.stderr


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"d_model": "x"}, "d_model is a whole number, not str"),
        ({"num_layers": 2.0}, "num_layers is a whole number, not float"),
        ({"num_heads": True}, "num_heads is a whole number, not bool"),
        ({"seed": None}, "seed is a whole number, not NoneType"),
        ({"positions": "yes"}, "positions is True or False, not 'yes'"),
    ],
)
def test_a_builtin_config_of_the_wrong_types_is_a_usage_error(fields, message):
    """d_model="x" raised a bare TypeError from inside."""
    with pytest.raises(attnviz.UsageError, match=message):
        attnviz.load(config=attnviz.BuiltinConfig(**fields))


def test_what_maps_record_of_their_request_is_saved_and_read_back_by_its_declaration(tmp_path):
    """Each field of Recorded, at a value other than its default, through json and npz:
    the data formats name none of them."""
    import dataclasses
    import typing
    from enum import Enum

    from attnviz.request import Recorded

    hints = typing.get_type_hints(Recorded)
    values = {}
    for field in dataclasses.fields(Recorded):
        kinds = typing.get_args(hints[field.name]) or (hints[field.name],)
        kind = next(k for k in kinds if k is not type(None))
        values[field.name] = (
            next(iter(kind)) if issubclass(kind, Enum) else True if kind is bool else "a text"
        )
    recorded = Recorded(**values)
    maps = attnviz.extract("a b c").replace(recorded=recorded)
    assert AttentionMaps.from_dict(maps.to_dict()).recorded == recorded
    for suffix in ("json", "npz"):
        path = tmp_path / f"maps.{suffix}"
        maps.save(path)
        (read,) = read_maps(str(path))
        assert read.recorded == recorded
    assert attnviz.extract("a b c").to_dict().keys().isdisjoint(values)  # defaults: not written
