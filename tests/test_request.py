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
from attnviz.inputs import Input
from attnviz.request import PRODUCED


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
    many = [found.maps for found in extractor.run(["a b c", "d e"], request)]
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
def test_run_refuses_what_is_not_a_list_of_inputs(items, message):
    with pytest.raises(UsageError, match=message):
        list(attnviz.load().run(items))


def test_run_refuses_a_batch_size_that_is_not_a_count():
    for size in (0, True, 2.5):
        with pytest.raises(UsageError, match="batch_size is a whole number"):
            attnviz.load().run(["a b"], batch_size=size)


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
    bundled = {field.name for field in fields(Request)} - {"mode", "layers", "heads", *PRODUCED}
    assert set(given) == bundled
    assert (given["special"], given["system"], given["rows"]) == (False, "be brief", "last")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"maps": False}, "nothing is asked"),
        ({"knockout": ("last", "0")}, "a knockout lists layers, not maps"),
        ({"maps": False, "statistics": True, "knockout": (-1, 0)}, "not statistics"),
        ({"maps": False, "knockout": "last:0"}, r"knockout is \(rows, span\)"),
        ({"maps": False, "knockout": ("last", " ")}, "not an empty one"),
        ({"maps": False, "knockout": (-1, 0), "window": 0}, "--window is a number of layers"),
        ({"window": 3}, "--window is the knockout's"),
        ({"ablate": "mean"}, "--ablate says how a head's effect is read"),
        ({"effects": True, "ablate": "median"}, "ablation"),
        ({"statistics": True, "pool": 8}, "--pool does not apply"),
        ({"statistics": True, "weigh": "value"}, "--weigh does not apply"),
        ({"effects": "yes"}, "effects is True or False"),
    ],
)
def test_a_request_refuses_what_cannot_be_asked_together(fields, message):
    with pytest.raises(UsageError, match=message):
        Request(**fields)


def test_what_is_asked_of_the_maps_is_not_what_decides_them():
    """A batch's manifest records what decides the maps: asking statistics or effects of
    them leaves its fingerprint as it was, so earlier batches still resume."""
    asked = Request(layers=0, statistics=True, effects=True, ablate="mean")
    assert asked.fingerprint() == Request(layers=0).fingerprint()
    assert set(asked.fingerprint()).isdisjoint(PRODUCED)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"text": " "}, "the text is empty"),
        ({"text": "a", "target": ""}, "the target is empty"),
        ({"text": "a", "pair": "\t"}, "the pair is empty"),
        ({"text": "a", "answer": " "}, "the answer is empty"),
        ({"text": "a", "answer": 3}, "the answer is a text, not int"),
        ({"text": "a\udc80"}, "not UTF-8 text: byte 0x80"),
    ],
)
def test_an_input_is_checked_when_made(parts, message):
    with pytest.raises(UsageError, match=message):
        Input(**parts)


def test_the_built_in_stack_reads_no_answer_but_runs_inputs_without_one():
    extractor = attnviz.load()
    asked = Request(maps=False, statistics=True, effects=True)
    (found,) = extractor.run(["the cat sat"], asked)
    assert found.maps is None and found.effects is None
    assert found.statistics.rows == extractor.head_statistics("the cat sat").rows
    with pytest.raises(UsageError, match="has no next token to read"):
        list(extractor.run([Input("the cat", answer=" sat")], asked))


def test_a_request_is_checked_before_any_input_is_read():
    def inputs():
        raise AssertionError("an input was read")
        yield "never"

    with pytest.raises(UsageError, match="layer 9 is out of range"):
        attnviz.load().run(inputs(), layers=9)
