"""The one request object: checked once when made, read as it is by every extractor,
recorded by a batch's manifest in the form earlier releases wrote."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import attnviz
from attnviz import Request
from attnviz.cli import app
from attnviz.errors import UsageError


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"layers": True}, "not True"),
        ({"heads": False}, "not False"),
        ({"layers": []}, "the layer list is empty"),
        ({"layers": [0, "1"]}, "integer indexes"),
        ({"heads": 1.0}, "not 1.0"),
        ({"layers": "0-x"}, "'0-x' is not an index"),
        ({"mode": "sideways"}, "unknown mode 'sideways'"),
        ({"special": "no"}, "special is True or False"),
        ({"system": "be brief"}, "add --chat"),
        ({"chat": True, "system": 3}, "system is a text"),
    ],
)
def test_a_request_is_checked_when_made(options, message):
    with pytest.raises(UsageError, match=message):
        Request(**options)


def test_a_request_keeps_a_list_selection_as_a_tuple_and_is_hashable():
    request = Request(mode="masked", layers=[1, 0])
    assert request.layers == (1, 0) and request.mode is attnviz.Mode.MASKED
    assert hash(request) == hash(Request(mode="masked", layers=(1, 0)))
    assert request.fingerprint()["layers"] == [1, 0]  # JSON, as a manifest reads it back


def test_every_extractor_method_takes_the_request_or_its_fields():
    extractor = attnviz.load()
    request = Request(mode="masked", layers=1, heads="0,2")
    given = extractor.extract("a b c", request)
    spelled = extractor.extract("a b c", mode="masked", layers=1, heads="0,2")
    np.testing.assert_array_equal(given.weights, spelled.weights)
    assert (given.layers, given.heads, given.mode) == ([1], [0, 2], attnviz.Mode.MASKED)
    many = list(extractor.extract_many(["a b c", "d e"], request))
    np.testing.assert_array_equal(many[0].weights, given.weights)


def test_a_request_and_its_fields_together_or_an_unknown_field_are_refused():
    extractor = attnviz.load()
    with pytest.raises(UsageError, match="not both"):
        extractor.extract("a b", Request(), mode="masked")
    with pytest.raises(UsageError, match="unknown option 'layer'"):
        extractor.extract("a b", layer=0)
    with pytest.raises(UsageError, match="an attnviz Request, not dict"):
        extractor.extract("a b", {"mode": "masked"})


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ("abc", "reads a list of texts; for one text use extract"),
        ([(b"a b",)], "the text is a str, not bytes"),
        ([b"a b"], "an input is a text"),
        ([("a", "b", "c", "d")], "an input is a text, or a tuple"),
        ([None], "an input is a text"),
    ],
)
def test_extract_many_refuses_what_is_not_a_list_of_inputs(items, message):
    with pytest.raises(UsageError, match=message):
        list(attnviz.load().extract_many(items))


def test_extract_many_refuses_a_batch_size_that_is_not_a_count():
    for size in (0, True, 2.5):
        with pytest.raises(UsageError, match="batch_size is a whole number"):
            attnviz.load().extract_many(["a b"], batch_size=size)


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"temperature": math.nan}, "temperature must be a finite number"),
        ({"top_p": math.inf}, "top_p must be a finite number"),
        ({"max_new_tokens": 2.0}, "max_new_tokens is a whole number"),
        ({"sample": "yes"}, "sample is True or False"),
    ],
)
def test_generation_settings_are_checked_before_the_model_runs(generators, sampling, message):
    extractor = attnviz.load(generators["gpt2-lm"])
    with pytest.raises(UsageError, match=message):
        extractor.generate("Once upon", **sampling)


def test_generate_takes_the_request_of_extract(generators):
    extractor = attnviz.load(generators["gpt2-lm"])
    request = Request(layers=0, heads=[1])
    generation = extractor.generate("Once upon a time", request, max_new_tokens=3)
    assert (generation.maps.layers, generation.maps.heads) == ([0], [1])
    with pytest.raises(UsageError, match="generated tokens have no words"):
        extractor.generate("Once upon a time", dataclasses.replace(request, words=True))


# What release 0.1.0 recorded as the request of `batch in.txt -f json --layer 0`: a
# manifest written then must still resume (the keys come from the request object now).
RELEASE_0_1_REQUEST = {
    "model": "builtin",
    "model_dtype": None,
    "config": None,
    "mode": None,
    "layers": "0",
    "heads": "all",
    "special": True,
    "words": False,
    "raw_pieces": False,
    "chat": False,
    "system": None,
    "formats": ["json"],
    "view": "head",
    "style": {
        "cmap": "viridis",
        "dpi": 100,
        "values": False,
        "vmax": 1.0,
        "figsize": None,
        "font_size": None,
        "title": None,
    },
    "aggregate": None,
    "top": None,
    "label_positions": False,
    "dtype": "float32",
}


def test_a_manifest_of_release_0_1_still_resumes(runner, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("Hello I love you\nthe cat sat\n")
    out = tmp_path / "out"
    command = ["batch", str(source), "-o", str(out), "-f", "json", "--layer", "0"]
    first = runner.invoke(app, command)
    assert first.exit_code == 0, first.stderr
    manifest = out / "manifest.jsonl"
    records = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert [record["request"] for record in records] == [RELEASE_0_1_REQUEST] * 2
    again = runner.invoke(app, [*command, "--resume"])
    assert again.exit_code == 0, again.stderr
    assert "2 skipped" in again.stderr


def test_the_command_line_gives_every_request_field_by_its_name():
    """A request field is an option of the bundle that holds a field of the same name,
    and reaches the request by that name alone (cli.bundles.request_fields)."""
    from dataclasses import fields

    from attnviz.cli.bundles import request_fields
    from attnviz.cli.settings import MapProducts, ModelSettings

    settings = ModelSettings(special=False, chat=True, system="be brief")
    products = MapProducts(rows="last", span="2-3")
    given = {**request_fields(settings), **request_fields(products)}
    bundled = {field.name for field in fields(Request)} - {"mode", "layers", "heads"}
    assert set(given) == bundled
    assert (given["special"], given["system"], given["rows"]) == (False, "be brief", "last")
