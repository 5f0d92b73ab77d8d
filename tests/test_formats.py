"""Every data format round-trips; saved files are read safely and bad ones say what is
wrong; outputs are written safely; pipes stream."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnviz
from attnviz.analysis.aggregate import aggregate
from attnviz.choices import Output
from attnviz.cli import app
from attnviz.data_formats import dump_json
from attnviz.errors import SchemaError
from attnviz.maps_files import read_maps, write_json
from attnviz.outputs import OUTPUTS, formats_named
from attnviz.writers import Rendering, pieces, write
from tests.processes import IN_A_SHELL, shell

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\u202e"


def saved(tmp_path, name="maps.json", **changes):
    document = attnviz.extract("Hello I love you", mode="masked", layers=0).to_dict()
    document.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


SENTENCES = Path(__file__).parent.parent / "sample_texts" / "sentences.txt"


def sample_maps():
    return [
        attnviz.extract("Hello I love you", layers=1),
        attnviz.extract("The man walked", mode="cross", target="Der Mann", heads="0,2"),
    ]


@pytest.mark.parametrize("data_format", ["json", "npz"])
def test_single_document_formats_round_trip(tmp_path, data_format):
    original = sample_maps()[1]
    path = tmp_path / f"maps.{data_format}"
    write([original], Output(data_format), path)
    (again,) = read_maps(str(path))
    np.testing.assert_array_equal(again.weights, original.weights)
    for name in ("query_tokens", "key_tokens", "layers", "heads", "mode", "model", "target"):
        assert getattr(again, name) == getattr(original, name)


def test_ndjson_round_trips_a_stream(tmp_path):
    path = tmp_path / "maps.ndjson"
    assert write(sample_maps(), Output.NDJSON, path) == 2
    again = list(read_maps(str(path)))
    assert [maps.text for maps in again] == ["Hello I love you", "The man walked"]
    for before, after in zip(sample_maps(), again, strict=True):
        np.testing.assert_array_equal(before.weights, after.weights)


def test_csv_long_form_holds_every_weight(tmp_path):
    path = tmp_path / "maps.csv"
    write(sample_maps(), Output.CSV, path)
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == [
        "input", "layer", "head", "query_index", "query_token", "key_index", "key_token", "weight"
    ]  # fmt: skip
    for index, maps in enumerate(sample_maps()):
        mine = [row for row in rows if int(row["input"]) == index]
        assert len(mine) == maps.weights.size
        rebuilt = np.zeros_like(maps.weights)
        for row in mine:
            i = maps.layers.index(int(row["layer"]))
            j = maps.heads.index(int(row["head"]))
            rebuilt[i, j, int(row["query_index"]), int(row["key_index"])] = float(row["weight"])
            assert row["query_token"] == maps.query_tokens[int(row["query_index"])]
        np.testing.assert_allclose(rebuilt, maps.weights, rtol=1e-7)


def test_aggregates_survive_json(tmp_path):

    rolled = aggregate(attnviz.extract("a b c"), "rollout")
    path = tmp_path / "rolled.json"
    write([rolled], Output.JSON, path)
    (again,) = read_maps(str(path))
    assert again.aggregate == "rollout" and again.weights.shape == (1, 1, 3, 3)


def test_json_and_npz_hold_one_input():
    from attnviz.errors import UsageError

    streams = formats_named(output for output, spec in OUTPUTS.items() if spec.records)
    assert streams.startswith("ndjson") and "csv" in streams  # the outputs' table says
    with pytest.raises(UsageError, match=f"npz holds one; use --format {streams}$"):
        write(sample_maps(), Output.NPZ, "-")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"schema_version": 3}', "schema_version 3 is not supported"),
        (b"{not json", "is not valid JSON"),
        (b'{"schema_version": 1}\n{broken\n', "line 1: document is missing"),
        (b"PK\x03\x04garbage", "is not a whole npz archive"),
        (b"", "is empty"),
        (b"[]", "is an empty list: it holds no maps"),
        (b'{"weights":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests its JSON too deep"),
        (b"\xff\xfe", "is not UTF-8 text"),
    ],
)
def test_bad_saved_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(Exception, match=message) as caught:
        list(read_maps(str(path)))
    assert isinstance(caught.value, attnviz.AttnvizError)


def _square_grown(document):
    document["key_tokens"].append("x")
    for layer in document["weights"]:
        for head in layer:
            for row in head:
                row.append(0.0)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update(schema_version=True), "schema_version true is not supported"),
        (lambda d: d.update(layers=[0, 0]), "layers lists an index twice"),
        (lambda d: d.update(layers=[0.5]), "layers must be a list of indexes"),
        (lambda d: d.update(heads=[True, 1]), "heads must be a list of indexes"),
        (_square_grown, "self attention maps a text onto itself, but these maps have 2 query "
         "and 3 key tokens"),
    ],
)  # fmt: skip
def test_documents_that_cannot_be_maps_are_refused(runner, tmp_path, damage, message):
    document = attnviz.extract("a b", layers=0, heads=[0, 1]).to_dict()
    damage(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    result = runner.invoke(app, ["heads", "--from", str(path)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"attnviz: error: {path}: {message}")
    assert len(result.stderr.splitlines()) == 1


def _npz_members(maps):
    import zipfile

    from attnviz.maps_files import npz_bytes

    with zipfile.ZipFile(io.BytesIO(npz_bytes(maps))) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _npz(members):
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npy(array_or_header, tail=b""):
    buffer = io.BytesIO()
    if isinstance(array_or_header, dict):
        np.lib.format.write_array_header_1_0(buffer, array_or_header)
    else:
        np.save(buffer, array_or_header, allow_pickle=True)
    return buffer.getvalue() + tail


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.pop("layers.npy"), "is an npz archive without layers: not maps attnviz wrote"),
        (lambda m: m.update({"meta.npy": _npy(np.asarray("[1, 2]"))}),
         "meta member is not a JSON object"),
        (lambda m: m.update({"weights.npy": _npy(
            {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)}, bytes(600))}),
         "weights.npy holds 600 bytes for a float32 array of shape (1000000, 1000000) "
         "(4000000000000 bytes): cut short or damaged"),
        (lambda m: m.update({"layers.npy": m["layers.npy"][:-3]}), "layers.npy holds"),
        (lambda m: m.update({"heads.npy": b"\x80\x04 pickle"}), "heads.npy cannot be read"),
        (lambda m: m.update({"layers.npy": _npy(np.asarray([None], dtype=object))}),
         "layers.npy holds Python objects, which attnviz never writes"),
    ],
)  # fmt: skip
def test_damaged_npz_archives_say_what_is_wrong(runner, tmp_path, change, message):
    members = _npz_members(attnviz.extract("a b", layers=0))
    change(members)
    path = tmp_path / "bad.npz"
    path.write_bytes(_npz(members))
    result = runner.invoke(app, ["heads", "--from", str(path)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"attnviz: error: {path}") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_npz_cut_short_says_so(runner, tmp_path):
    path = tmp_path / "cut.npz"
    attnviz.extract("a b").save(path)
    path.write_bytes(path.read_bytes()[:-100])
    result = runner.invoke(app, ["render", str(path)])
    assert result.exit_code == 1
    assert "is not a whole npz archive (cut short or damaged" in result.stderr


def test_an_npz_piped_where_text_is_read_is_named(runner, tmp_path):
    path = tmp_path / "maps.npz"
    attnviz.extract("a b").save(path)
    result = runner.invoke(app, ["show", "-"], input=path.read_bytes())
    assert result.exit_code == 2
    assert result.stderr.startswith("attnviz: error: standard input holds an npz archive")


def test_a_corrupt_line_names_its_number(tmp_path):
    good = json.dumps(attnviz.extract("a b").to_dict())
    path = tmp_path / "stream.ndjson"
    path.write_text(f"{good}\n{good}\n{{oops\n")
    with pytest.raises(SchemaError, match="line 3 is not valid JSON"):
        list(read_maps(str(path)))


def test_show_writes_each_format_through_the_cli(runner, tmp_path):
    for data_format in ("json", "ndjson", "npz", "csv"):
        path = tmp_path / f"out.{data_format}"
        result = runner.invoke(app, ["show", "a b c", "-f", data_format, "-o", str(path)])
        assert result.exit_code == 0, result.stderr
        assert result.stdout == ""
        if data_format != "csv":
            assert next(read_maps(str(path))).key_tokens == ["a", "b", "c"]


@pytest.mark.slow
def test_ndjson_from_a_file_of_sentences_piped_to_head():
    result = shell(f"{IN_A_SHELL} show - --format ndjson < {SENTENCES} | head -n 2")
    assert result.returncode == 0 and result.stderr == ""
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [record["text"] for record in records] == SENTENCES.read_text().splitlines()[:2]


def test_csv_streams_to_stdout(runner):
    result = runner.invoke(app, ["show", "-", "-f", "csv"], input="a b\nc d e\n")
    assert result.exit_code == 0 and result.stderr == ""
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0][0] == "input" and {row[0] for row in rows[1:]} == {"0", "1"}


@pytest.mark.slow
def test_npz_bytes_are_the_same_for_the_same_maps_and_read_back_whole(tmp_path):
    import time

    from attnviz.maps_files import npz_bytes

    maps = attnviz.extract("The man walked the dog", mode="masked")
    first = npz_bytes(maps)
    time.sleep(2.1)  # zip member dates have a 2-second step: a later write must not differ
    assert npz_bytes(maps) == first
    assert sorted(np.load(io.BytesIO(first)).files) == sorted(
        ["weights", "layers", "heads", "query_tokens", "key_tokens", "meta"]
    )
    path = tmp_path / "m.npz"
    path.write_bytes(first)
    (back,) = read_maps(str(path))
    np.testing.assert_array_equal(back.weights, maps.weights)
    assert (back.query_tokens, back.mode, back.model) == (maps.query_tokens, maps.mode, maps.model)


@pytest.mark.parametrize("suffix", ["json", "ndjson", "npz", "csv", "html"])
def test_maps_save_writes_what_the_command_writes_and_read_gives_them_back(
    runner, tmp_path, suffix
):
    text = "Hello I love you"
    command = ["export", text, "--view", "head"] if suffix == "html" else ["show", text]
    written = tmp_path / f"cli.{suffix}"
    result = runner.invoke(app, [*command, "-l", "1", "--head", "2", "-o", str(written)])
    assert result.exit_code == 0, result.stderr
    saved = tmp_path / f"saved.{suffix}"
    maps = attnviz.extract(text)
    maps.save(saved, "head", layer=1, head=2)
    assert saved.read_bytes() == written.read_bytes()
    if suffix in ("json", "ndjson", "npz"):
        again = attnviz.AttentionMaps.read(saved)
        assert (again.layers, again.heads) == ([1], [2])
        np.testing.assert_array_equal(again.weights[0, 0], maps.head(1, 2))


def test_maps_save_and_read_refuse_what_they_cannot_do(tmp_path):
    maps = attnviz.extract("Hello I love you")
    with pytest.raises(attnviz.UsageError, match=r"cannot tell the format of .*maps\.txt"):
        maps.save(tmp_path / "maps.txt")
    with pytest.raises(attnviz.UsageError, match="cmap: style options are for pictures"):
        maps.save(tmp_path / "maps.json", cmap="magma")
    with pytest.raises(attnviz.UsageError, match=r"head 9 is not held: these maps hold heads"):
        maps.save(tmp_path / "maps.npz", head=9)
    assert not list(tmp_path.iterdir())
    several = tmp_path / "two.ndjson"
    write([maps, maps], Output.NDJSON, several)
    with pytest.raises(attnviz.UsageError, match=r"several inputs: use attnviz\.read_maps"):
        attnviz.AttentionMaps.read(several)
    assert len(list(attnviz.read_maps(str(several)))) == 2


class _CappedPipe:
    """stdout as Linux's pipe and Python's writers make it: one write(2) per call, which
    takes at most ``CAP`` bytes; bytes report the count taken, text claims it all."""

    CAP = 1500

    def __init__(self) -> None:
        self.received = bytearray()
        self.buffer = self

    def write(self, data):
        piece = data.encode() if isinstance(data, str) else bytes(data)
        self.received += piece[: self.CAP]
        return len(data) if isinstance(data, str) else min(len(piece), self.CAP)

    def flush(self):
        pass


@pytest.mark.parametrize("binary", [True, False])
def test_every_write_to_stdout_arrives_whole(monkeypatch, binary):
    from attnviz.atomic_files import WholeWrites, open_output

    # The real caps are 2 GiB - 4 KiB a write and pieces of 1 GiB: the same, scaled down.
    monkeypatch.setattr(WholeWrites, "BYTES", 1000)
    monkeypatch.setattr(WholeWrites, "CHARACTERS", 250)
    pipe = _CappedPipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    document = bytes(range(256)) * 40 if binary else "é" * 4000
    with open_output("-", binary=binary) as out:
        out.write(document)
        out.writelines([document[:3], document[3:7]])
    expected = document + document[:7]
    assert bytes(pipe.received) == (expected if binary else expected.encode())


@pytest.mark.parametrize("colour", ["never", "always"])
def test_a_saved_documents_strings_never_reach_the_terminal_raw(runner, tmp_path, colour):
    path = saved(tmp_path, model=HOSTILE)
    drawn = runner.invoke(app, ["render", str(path), "-l", "0", "--color", colour])
    assert drawn.exit_code == 0, drawn.stderr
    assert "\x07" not in drawn.stdout and "\u202e" not in drawn.stdout
    assert "]0;PWNED" in drawn.stdout  # shown, as visible characters
    if colour == "never":
        assert "\x1b" not in drawn.stdout
    else:  # colour escapes, but never the document's own
        assert "\x1b]" not in drawn.stdout and "\x1b[2J" not in drawn.stdout
    compared = runner.invoke(app, ["diff", str(path), str(path)])
    assert compared.exit_code == 0 and "\x1b" not in compared.stdout


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("nan", "NaN or infinite"),
        ("inf", "NaN or infinite"),
        (5.0, "lie between 0 and 1"),
        (-0.5, "lie between 0 and 1"),
        ("half", "do not sum to 1"),
        ("ahead", "give weight to later tokens"),
    ],
)
def test_saved_weights_that_are_not_attention_are_refused(runner, tmp_path, weights, message):
    maps = attnviz.extract("Hello I love you", mode="masked", layers=0)
    values = maps.weights.astype(np.float64)
    if weights == "half":
        values = values / 2
    elif weights == "ahead":
        values[..., 0, :] = 0.25  # the first token looks at all four
    elif isinstance(weights, float):
        values[0, 0, 1, 0] = weights
    else:
        values[0, 0, 1, 0] = float(weights)
    document = maps.to_dict()
    document["weights"] = values.tolist()
    path = tmp_path / "maps.json"
    path.write_text(json.dumps(document))  # NaN and Infinity as Python's json writes them
    for command in (["render", str(path)], ["diff", str(path), str(path), "-f", "json"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1, result.stdout
        assert result.stdout == "" and message in result.stderr
        assert result.stderr.count("\n") == 1


def test_pretty_printed_json_and_a_byte_order_mark_read(runner, tmp_path):
    document = attnviz.extract("a b c", layers=0).to_dict()
    pretty = tmp_path / "pretty.json"
    pretty.write_text("\ufeff" + json.dumps(document, indent=2), encoding="utf-8")
    result = runner.invoke(app, ["render", str(pretty), "--color", "never"])
    assert result.exit_code == 0, result.stderr
    assert "layer 0 · head 0" in result.stdout
    shown = runner.invoke(app, ["show", "-", "-f", "json"], input="\ufeffhello world\n")
    assert json.loads(shown.stdout)["key_tokens"] == ["hello", "world"]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'\xef\xbb\xbf{"text": "a b"}\n')
    batch = runner.invoke(app, ["batch", str(source), "-o", str(tmp_path / "out"), "-f", "json"])
    assert batch.exit_code == 0, batch.stderr


def test_output_paths_that_are_devices_links_or_kept_files(runner, tmp_path):
    import os
    import stat

    # A character device is written through, never replaced by a regular file.
    if os.access("/dev/null", os.W_OK):
        result = runner.invoke(app, ["show", "a b", "-f", "json", "-o", "/dev/null"])
        assert result.exit_code == 0
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    # A FIFO is written through: a reader gets the document.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading

    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    result = runner.invoke(app, ["show", "a b", "-f", "json", "-o", str(fifo)])
    reader.join(timeout=30)
    assert result.exit_code == 0 and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(received[0])["key_tokens"] == ["a", "b"]
    # A link is followed: its target is replaced, the link stays; permission bits are kept.
    target = tmp_path / "target.json"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    result = runner.invoke(app, ["show", "a b", "-f", "json", "-o", str(link)])
    assert result.exit_code == 0
    assert link.is_symlink() and json.loads(target.read_text())["key_tokens"] == ["a", "b"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_show_picks_the_format_from_the_suffix_of_output(runner, tmp_path):
    npz, png = tmp_path / "maps.npz", tmp_path / "maps.png"
    assert runner.invoke(app, ["show", "a b", "-o", str(npz)]).exit_code == 0
    assert npz.read_bytes().startswith(b"PK")
    assert runner.invoke(app, ["show", "a b", "-o", str(png)]).exit_code == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    clash = runner.invoke(app, ["show", "a b", "-f", "json", "-o", str(tmp_path / "x.csv")])
    assert clash.exit_code == 2 and "disagree" in clash.stderr


def test_float16_data_is_written_with_float16_digits(runner):
    text = " ".join(f"w{i}" for i in range(40))
    sizes = {}
    for dtype in ("float32", "float16"):
        result = runner.invoke(app, ["show", text, "-f", "json", "--dtype", dtype])
        sizes[dtype] = len(result.stdout)
    assert sizes["float16"] < 0.6 * sizes["float32"]
    half = json.loads(runner.invoke(app, ["show", text, "-f", "json", "--dtype", "float16"]).stdout)
    exact = attnviz.extract(text).weights.astype(np.float16)
    np.testing.assert_array_equal(np.asarray(half["weights"], dtype=np.float16), exact)
    rows = runner.invoke(app, ["show", text, "-f", "csv", "--dtype", "float16"]).stdout
    first = rows.splitlines()[1].split(",")[-1]
    assert np.float16(first) == exact[0, 0, 0, 0] and len(first) <= 8


def test_csv_tokens_carry_no_raw_control_characters(runner):
    result = runner.invoke(app, ["show", "a \x1b[2J b\u202e", "-f", "csv"])
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "␛" in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["show", "Hello", "-o", "{tmp}/missing/maps.json"],
        ["export", "Hello", "-o", "{tmp}/missing/maps.png"],
        ["generate", "--model", "some-model", "Hello", "-o", "{tmp}/missing/maps.npz"],
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_a_model_loads(
    runner, tmp_path, monkeypatch, command
):
    from attnviz.cli.settings import Job

    def no_model(*_arguments, **_keywords):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(Job, "open", no_model)
    command = [part.replace("{tmp}", str(tmp_path)) for part in command]
    result = runner.invoke(app, command)
    assert result.exit_code == 1, result.stderr
    assert f"folder {tmp_path}/missing does not exist" in result.stderr


def test_a_temporary_file_is_taken_away_only_once_its_writer_is_gone(tmp_path):
    """What a writer killed mid-write leaves (kill -9 runs no clean-up) is told apart from
    a file still being written by the lock its writer held: the system drops it."""
    from attnviz.atomic_files import remove_if_abandoned, temporaries

    code = (
        "import sys, time\n"
        "from attnviz.atomic_files import open_output\n"
        "with open_output(sys.argv[1]) as out:\n"
        "    out.write('half of it'); out.flush(); print('writing', flush=True); time.sleep(60)\n"
    )
    (tmp_path / ".notes.txt").write_text("a file of the user's, not a temporary one")
    command = [sys.executable, "-c", code, str(tmp_path / "maps.json")]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "writing\n"
        ((temporary, name),) = temporaries(tmp_path)
        assert name == "maps.json"
        assert not remove_if_abandoned(temporary) and temporary.exists()  # still written
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert remove_if_abandoned(temporary) and not temporary.exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == [".notes.txt"]


def test_a_later_run_to_the_same_file_takes_away_what_a_killed_one_left(runner, tmp_path):
    """show -o killed mid-write (kill -9) leaves its temporary file; the next command that
    writes that name removes it, and leaves one whose writer is still at work."""
    from attnviz.atomic_files import temporaries

    code = (
        "import sys, time\n"
        "from attnviz.atomic_files import open_output\n"
        "with open_output(sys.argv[1]) as out:\n"
        "    out.write('half of it'); out.flush(); print('writing', flush=True); time.sleep(60)\n"
    )
    target = tmp_path / "maps.json"

    def writer() -> subprocess.Popen:
        started = subprocess.Popen(
            [sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True
        )
        assert started.stdout.readline() == "writing\n"
        return started

    killed = writer()
    killed.kill()
    killed.wait(timeout=60)
    alive = writer()
    try:
        assert len(list(temporaries(tmp_path))) == 2
        result = runner.invoke(app, ["show", "a b", "-o", str(target)])
        assert result.exit_code == 0, result.stderr
        ((_, name),) = temporaries(tmp_path)  # the live writer's, only
        assert name == "maps.json"
    finally:
        alive.kill()
        alive.wait(timeout=60)
    assert json.loads(target.read_text())["text"] == "a b"


def test_csv_query_index_is_the_token_position_json_records(runner):
    """--rows keeps rows 1 and 3: csv's query_index says 1 and 3, as json's
    query_positions do, not the rows' order among those kept (0, 1)."""
    shown = runner.invoke(app, ["show", "the cat the dog", "--rows", "1,3", "-f", "csv"])
    assert shown.exit_code == 0, shown.stderr
    indexes = {int(row["query_index"]) for row in csv.DictReader(io.StringIO(shown.stdout))}
    document = runner.invoke(app, ["show", "the cat the dog", "--rows", "1,3", "-f", "json"])
    assert indexes == set(json.loads(document.stdout)["query_positions"]) == {1, 3}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layers": [], "weights": np.zeros((0, 4, 2, 2), np.float32)}, "no layers"),
        ({"heads": [], "weights": np.zeros((2, 0, 2, 2), np.float32)}, "no heads"),
        ({"query_positions": [0, 5]}, "past the 2 key tokens"),
    ],
)
def test_saved_maps_with_nothing_to_show_are_one_line(runner, tmp_path, changes, message):
    from attnviz.errors import SchemaError
    from attnviz.maps_files import write_npz

    maps = attnviz.extract("a b")
    with pytest.raises(SchemaError, match=message):
        maps.replace(**changes)
    # As files written by another tool (or an older attnviz): every reader refuses them.
    document = maps.to_dict()
    document.update({k: v.tolist() if hasattr(v, "tolist") else v for k, v in changes.items()})
    (tmp_path / "odd.json").write_text(json.dumps(document))
    unchecked = object.__new__(type(maps))
    unchecked.__dict__.update({**maps.__dict__, **changes})
    with open(tmp_path / "odd.npz", "wb") as out:
        write_npz(unchecked, out)
    for saved in (tmp_path / "odd.json", tmp_path / "odd.npz"):
        for command in (["render", str(saved)], ["heads", "--from", str(saved)]):
            result = runner.invoke(app, command)
            assert result.exit_code == 1, result.stderr
            assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_number_too_long_to_read_is_a_line_naming_the_file(runner, tmp_path):
    saved = tmp_path / "long.json"
    saved.write_text("[1" + "0" * 5000 + "]")
    result = runner.invoke(app, ["render", str(saved)])
    assert result.exit_code == 1
    assert (
        result.stderr
        == f"attnviz: error: {saved} holds a number too long to read: no attention maps\n"
    )


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (lambda w: w.astype(np.complex64), "weights are real numbers, not complex64"),
        (
            lambda w: np.full(w.shape, 1e300),
            "weights hold NaN or infinite values: these are not attention",
        ),
    ],
)
@pytest.mark.slow
def test_weights_that_are_no_real_float32_are_one_line_without_warnings(
    runner, tmp_path, weights, message
):
    """numpy's casts warned on stderr (ComplexWarning, overflow) and kept the real part of
    complex weights: a saved npz of them is refused with one line, and nothing else."""
    from attnviz.maps_files import write_npz

    maps = attnviz.extract("a b")
    unchecked = object.__new__(type(maps))
    unchecked.__dict__.update({**maps.__dict__, "weights": weights(maps.weights)})
    saved = tmp_path / "odd.npz"
    with open(saved, "wb") as out:
        write_npz(unchecked, out)
    result = subprocess.run(
        [sys.executable, "-m", "attnviz", "render", str(saved)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr == f"attnviz: error: {saved}: {message}\n"


class _Discard(io.RawIOBase):
    """A destination that keeps nothing: what a writer itself holds is what is measured."""

    def writable(self):
        return True

    def write(self, data):
        return len(data)


def _maps_of_shape(layers, heads, queries, keys, tokens=None):
    rng = np.random.default_rng(0)
    weights = rng.random((layers, heads, queries, keys)).astype(np.float32)
    weights /= weights.sum(-1, keepdims=True)
    tokens = tokens or [f"t{i}" for i in range(keys)]
    return attnviz.AttentionMaps(
        query_tokens=tokens[:queries] if queries == keys else [f"q{i}" for i in range(queries)],
        key_tokens=tokens,
        weights=weights,
        layers=list(range(layers)),
        heads=list(range(heads)),
        mode="cross" if queries != keys else "self",
        model="random",
        text=" ".join(tokens),
        target=None if queries == keys else "q",
    )


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 4, 4), (1, 2, 3, 5), (3, 1, 2, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_json_written_a_row_at_a_time_is_the_whole_documents_bytes(shape, dtype):
    maps = _maps_of_shape(*shape).astype(dtype)
    written = io.BytesIO()
    write_json(maps, written)
    assert written.getvalue() == dump_json(maps.to_dict()).encode("utf-8")


def test_json_of_aggregated_maps_and_odd_tokens_is_the_whole_documents_bytes():
    tokens = ['"weights":0', "\\", HOSTILE, '],"weights":[']
    for maps in (_maps_of_shape(2, 2, 4, 4, tokens), attnviz.extract("Hello I love you")):
        for combined in (maps, aggregate(maps, "mean"), aggregate(maps, "rollout")):
            written = io.BytesIO()
            write_json(combined, written)
            assert written.getvalue() == dump_json(combined.to_dict()).encode("utf-8")


@pytest.mark.parametrize("output", [Output.JSON, Output.NDJSON, Output.CSV])
def test_text_formats_are_written_in_the_memory_of_a_row(output):
    """Text costs 20 to 90 times the weights it holds: as a whole it would not fit where
    the maps did. Written a row at a time, the writer holds little beyond the maps."""
    import tracemalloc

    maps = _maps_of_shape(2, 2, 200, 200)  # 640 kB of weights; 160,000 floats as lists
    tracemalloc.start()
    try:
        for _, write_file in pieces(maps, output, Rendering()):
            write_file(_Discard())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * maps.weights.nbytes, f"{peak / 1e6:.1f} MB for {output.value}"


def test_a_file_whose_suffix_names_no_format_is_refused_and_nothing_written(runner, tmp_path):
    """show -o x.jpg wrote NDJSON into a file named .jpg."""
    from tests.checks import failed_in_process

    for name in ("x.jpg", "x.GIF", "sheet.xlsx"):
        result = runner.invoke(app, ["show", "Hello", "-o", str(tmp_path / name)])
        failed_in_process(result, 2, f"{tmp_path / name} names a format attnviz does not write")
    assert list(tmp_path.iterdir()) == []
    given = runner.invoke(app, ["show", "Hello", "-o", str(tmp_path / "x.jpg"), "-f", "json"])
    assert given.exit_code == 0 and json.loads((tmp_path / "x.jpg").read_text())["text"]


# Cells a spreadsheet would run as formulas, one that looks like the rule's own output, and
# cells that are none of these.
FORMULAS = ["=cmd|calc", "+1", "-x", "@SUM(A1)", "'=x", "''+y", "'s", "a=b", "x"]


def _read_back(cell: str) -> str:
    """docs/data.md's rule, written out: drop the apostrophe before a cell that is
    apostrophes and then one of = + - @."""
    return cell[1:] if re.match(r"'+[=+\-@]", cell) else cell


def test_csv_text_cells_are_never_formulas_and_read_back(runner, generators, tmp_path):
    maps = attnviz.load().extract(" ".join("abcdefghi"))
    maps = maps.replace(query_tokens=FORMULAS, key_tokens=FORMULAS)
    path = tmp_path / "maps.csv"
    maps.save(path)
    rows = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    for column in ("query_token", "key_token"):
        cells = list(dict.fromkeys(row[column] for row in rows))
        assert not any(cell[0] in "=+-@" for cell in cells), cells
        assert [_read_back(cell) for cell in cells] == FORMULAS
    # every other command's table of data (the lens' here) keeps the same rule
    common = ["lens", "=cmd|calc +1 -x @SUM", "--model", generators["gpt2-lm"]]
    tokens = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)["tokens"]
    lensed = list(csv.DictReader(io.StringIO(runner.invoke(app, [*common, "-f", "csv"]).stdout)))
    assert not any(row[name][0] in "=+-@" for row in lensed for name in ("token", "top"))
    shown = [_read_back(row["token"]) for row in lensed if row["layer"] == lensed[0]["layer"]]
    assert shown == tokens


def test_a_negative_zero_is_written_as_zero_in_json_and_csv():
    """-0.0 (0 times a negative number, a difference that cancels) reads as a negative
    result; no format writes it, and a text that says "-0.0" stays as it is."""
    from attnviz.data_formats import cell_texts, dump_csv, dump_json

    document = {"value": -0.0, "values": [-0.0, -0.05, 0.0], "token": "-0.0", 'a"-0.0': -0.0}
    written = dump_json(document)
    assert json.loads(written) == document
    assert [math.copysign(1, value) for value in json.loads(written)["values"]] == [1, -1, 1]
    assert written == '{"value":0.0,"values":[0.0,-0.05,0.0],"token":"-0.0","a\\"-0.0":0.0}\n'
    table = dump_csv([{"token": "-0.0", "value": -0.0}], ["token", "value"])
    assert table.splitlines()[1] == "'-0.0,0.0"
    assert cell_texts(np.array([-0.0, 0.5], dtype=np.float32)).tolist() == ["0", "0.5"]


def test_a_full_disk_names_the_file_it_could_not_write_and_leaves_nothing(tmp_path):
    """A write to a full device raises ENOSPC from a stream, which names no file: the
    error names the one being written; its temporary file is gone, the old file kept."""
    import errno
    import os

    from attnviz.atomic_files import open_output
    from attnviz.errors import AttnvizError

    target = tmp_path / "maps.json"
    target.write_text("the user's", encoding="utf-8")
    full = f"cannot write {target}: No space left on device"
    with pytest.raises(AttnvizError, match=full), open_output(target) as out:
        out.write("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert [path.name for path in tmp_path.iterdir()] == ["maps.json"]
    assert target.read_text(encoding="utf-8") == "the user's"
    with pytest.raises(OSError, match="another file's"), open_output(target) as out:
        raise OSError(errno.ENOENT, "another file's")  # not a full disk: as it came
