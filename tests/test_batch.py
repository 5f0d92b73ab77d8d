"""batch: files, names, manifest, failures, resume after an interruption, shards, jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from attnviz.batch.inputs import assign_names, in_shard, parse_shard, read_inputs, slug
from attnviz.batch.run import record_done
from attnviz.cli import app
from attnviz.errors import UsageError
from tests.checks import manifest, unrecorded
from tests.processes import ATTNVIZ

SAMPLES = Path(__file__).parent.parent / "sample_texts"


def test_batch_writes_every_file_and_the_manifest(runner, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["batch", str(SAMPLES / "sentences.txt"), "-o", str(out), "-f", "png", "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    records = manifest(out)
    lines = (SAMPLES / "sentences.txt").read_text().splitlines()
    assert [record["text"] for record in records] == lines
    assert all(record["status"] == "ok" for record in records)
    first = records[0]
    assert first["files"][0] == "0000-hello-i-love-you-L0-H0.png"
    assert len(first["files"]) == 2 * 4 + 1  # a PNG per head of the 2 x 4 stack, and the JSON
    written = {path.name for path in out.iterdir()} - {"manifest.jsonl"}
    assert written == {name for record in records for name in record["files"]}
    with Image.open(out / first["files"][0]) as image:
        image.load()
    assert json.loads((out / "0000-hello-i-love-you.json").read_text())["text"] == lines[0]
    assert "6 inputs: 6 written" in result.stderr


def test_jsonl_ids_targets_and_views(runner, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["batch", str(SAMPLES / "pairs.jsonl"), "-o", str(out), "-m", "cross",
              "--view", "model", "-f", "svg", "-f", "npz", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""  # --quiet
    assert sorted(path.name for path in out.glob("greeting-fr.*")) == [
        "greeting-fr.npz",
        "greeting-fr.svg",
    ]
    assert manifest(out)[0]["target"] == "Bonjour je t'aime"


def test_bad_lines_fail_alone_and_the_exit_code_says_so(runner, tmp_path):
    source = tmp_path / "inputs.jsonl"
    source.write_bytes(
        b'{"text": "good one"}\n'
        b"[1, 2]\n"
        b'{"target": "no text"}\n'
        b"\n"
        b'{"text": "caf\xe9"}\n'
        b"{broken\n"
        b'{"text": "good two", "id": "two"}\n'
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json"])
    assert result.exit_code == 3
    records = manifest(out)
    assert [record["status"] for record in records] == [
        "ok", "failed", "failed", "failed", "failed", "ok"
    ]  # fmt: skip
    errors = [record["error"] for record in records]
    assert "line 2 is not a JSON object" in errors[1]
    assert 'line 3 has no "text" string' in errors[2]
    assert "line 5 is not UTF-8 text: byte 0xe9" in errors[3]  # line 4 is blank: skipped
    assert "line 6 is not valid JSON" in errors[4]
    assert (out / "two.json").exists() and (out / "0000-good-one.json").exists()
    assert "4 of 6 inputs failed" in result.stderr
    assert "2 written, 4 failed, 1 blank line skipped" in result.stderr


def test_names_are_safe_distinct_and_stable():
    assert slug("Café crème, s'il vous plaît!") == "cafe-creme-s-il-vous-plait"
    assert slug("我爱你") == ""
    assert len(slug("word " * 40)) <= 40

    class Item:
        def __init__(self, index, text=None, id=None):
            self.index, self.text, self.id, self.name = index, text, id, ""

    items = [Item(0, "我爱你"), Item(1, id="a/b"), Item(2, id="a b"), Item(3, "x", id="../etc")]
    assign_names(items)
    assert [item.name for item in items] == ["0000", "a-b", "a-b-2", "etc"]


def test_shards_cover_the_input_exactly_once(tmp_path):
    source = tmp_path / "many.txt"
    source.write_text("".join(f"sentence {i}\n" for i in range(23)))
    inputs = read_inputs(str(source))
    seen = []
    for number in range(1, 5):
        seen += [item.index for item in in_shard(inputs, parse_shard(f"{number}/4"))]
    assert sorted(seen) == list(range(23))
    with pytest.raises(UsageError, match="is not K/N"):
        parse_shard("5/4")


def test_sharded_runs_merge_without_clashes(runner, tmp_path):
    out = tmp_path / "out"
    for number in (1, 2):
        result = runner.invoke(
            app, ["batch", str(SAMPLES / "sentences.txt"), "-o", str(out), "-f", "json",
                  "--shard", f"{number}/2", "-q"],
        )  # fmt: skip
        assert result.exit_code == 0
    first, second = manifest(out, "manifest-1-of-2.jsonl"), manifest(out, "manifest-2-of-2.jsonl")
    assert sorted(r["index"] for r in first + second) == list(range(6))
    assert len(list(out.glob("*.json"))) == 6


@pytest.mark.slow
def test_jobs_give_the_same_files_and_leave_torch_threads_as_they_were(runner, tmp_path):
    import torch

    threads = torch.get_num_threads()
    for jobs in ("1", "2"):
        result = runner.invoke(
            app, ["batch", str(SAMPLES / "sentences.txt"), "-o", str(tmp_path / jobs), "-j", jobs,
                  "-q", "-l", "0"],
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
    one = {path.name: path.read_bytes() for path in (tmp_path / "1").glob("*.png")}
    two = {path.name: path.read_bytes() for path in (tmp_path / "2").glob("*.png")}
    assert one == two and len(one) == 6 * 4
    assert torch.get_num_threads() == threads


def test_stdin_and_unwritable_folders(runner, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["batch", "-", "-o", str(out), "-f", "json", "-q"], input="a b\n")
    assert result.exit_code == 0
    assert (out / "0000-a-b.json").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["batch", "-", "-o", str(blocker / "sub")], input="a\n")
    assert result.exit_code == 1
    assert "cannot create the folder" in result.stderr


@pytest.fixture
def interruptible():
    """Ctrl-C delivered as in a terminal, here and to the processes started from here: a
    test run started in the background of a script inherits SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_while_an_input_is_recorded_waits_until_it_is_recorded_whole(interruptible):
    class Manifest:  # interrupted while writing its line
        def __init__(self):
            self.lines = []

        def add(self, record):
            signal.raise_signal(signal.SIGINT)
            self.lines.append(record)

    manifest, records = Manifest(), []
    with pytest.raises(KeyboardInterrupt):
        record_done("record", manifest, records)
    assert manifest.lines == records == ["record"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.system
@pytest.mark.slow
def test_an_interrupted_batch_resumes_to_the_same_files(runner, tmp_path, interruptible):
    source = tmp_path / "inputs.txt"
    sentences = (SAMPLES / "sentences.txt").read_text().splitlines()
    source.write_text("\n".join(sentences * 6) + "\n")  # 36 inputs, 288 pictures
    arguments = ["batch", str(source), "-f", "png", "-f", "json"]
    command = [*ATTNVIZ, *arguments]
    reference = tmp_path / "reference"
    assert runner.invoke(app, [*arguments, "-o", str(reference), "-q"]).exit_code == 0

    out = tmp_path / "out"
    # Two processes draw the pictures: a Ctrl-C stops them with files drawn, not recorded.
    process = subprocess.Popen(
        [*command, "-o", str(out), "--jobs", "2"], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        records = out / "manifest.jsonl"
        if records.exists() and records.read_text().count('"index"') >= 5:  # 5 records
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "attnviz: error: interrupted" in stderr and "Traceback" not in stderr
    assert not [name for name in os.listdir(out) if name.startswith(".")]  # no partial files
    assert not unrecorded(out)  # what it drew but did not record went too
    done = manifest(out)
    assert 5 <= len(done) < 36
    # The summary counts what was written, not what was left.
    assert f"36 inputs: {len(done)} written, {36 - len(done)} not reached" in stderr
    for record in done:
        for name in record["files"]:
            assert (out / name).read_bytes() == (reference / name).read_bytes()

    resumed = runner.invoke(app, [*arguments, "-o", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.stderr
    assert f"{len(done)} skipped" in resumed.stderr
    files = sorted(path.name for path in out.iterdir())
    assert files == sorted(path.name for path in reference.iterdir())
    for name in files:
        if name != "manifest.jsonl":
            assert (out / name).read_bytes() == (reference / name).read_bytes()
    assert manifest(out) == manifest(reference)


def test_a_line_nested_deeper_than_python_reads_is_recorded_and_the_batch_goes_on(runner, tmp_path):
    source = tmp_path / "in.jsonl"
    deep = '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"
    source.write_text(f'{{"text": "a b"}}\n{deep}\n{{"text": "c d"}}\n')
    out = tmp_path / "out"
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json", "-q"])
    assert result.exit_code == 3
    assert "1 of 3 inputs failed (first: line 2 nests its JSON too deep" in result.stderr
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [record["status"] for record in records] == ["ok", "failed", "ok"]


def test_a_lone_surrogate_fails_its_input_alone_and_resume_does_not_crash(runner, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a \\ud800 b"}\n{"text": "fine"}\n')
    command = ["batch", str(source), "-o", str(tmp_path / "out"), "-f", "json"]
    for extra in ([], ["--resume"]):
        result = runner.invoke(app, [*command, *extra])
        assert result.exit_code == 3, result.stderr
        assert "holds a lone surrogate" in result.stderr


@pytest.mark.slow
def test_jobs_give_the_very_numbers_show_gives(runner, tmp_path):
    source = tmp_path / "in.txt"
    text = " ".join(f"w{i}" for i in range(120))  # long enough for torch to use its threads
    source.write_text(f"{text}\n{text} again\n")
    shown = json.loads(runner.invoke(app, ["show", text, "-f", "json"]).stdout)
    for jobs in ("1", "2"):  # 2: pages drawn in worker processes beside the model
        out = tmp_path / jobs
        formats = ["-f", "json", "-f", "html"]
        result = runner.invoke(app, ["batch", str(source), "-o", str(out), *formats, "-j", jobs])
        assert result.exit_code == 0, result.stderr
        (first,) = list(out.glob("0000-*.json"))
        assert json.loads(first.read_text())["weights"] == shown["weights"]


@pytest.mark.slow
def test_batch_runs_the_model_with_torchs_own_thread_count(runner, tmp_path, monkeypatch):
    # Fewer threads sum in another order (1.5e-7 apart on a many-core machine); on a
    # machine too small to show that, the thread count itself is the evidence.
    import torch

    from attnviz.builtin.extractor import BuiltinExtractor

    seen: list[int] = []
    original = BuiltinExtractor.run

    def counting(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BuiltinExtractor, "run", counting)
    source = tmp_path / "in.txt"
    source.write_text("a b\nc d\n")
    before = torch.get_num_threads()
    result = runner.invoke(app, ["batch", str(source), "-o", str(tmp_path / "o"), "-j", "2", "-q"])
    assert result.exit_code == 0, result.stderr
    assert seen and set(seen) == {before}
    assert torch.get_num_threads() == before


def test_a_batch_keeps_the_rows_asked_for_and_resumes_only_the_same_ones(runner, tmp_path):
    """--rows, --pool and --span travel with the request: each input's maps hold its own
    last row (its own length), the manifest records them, and another choice is new work."""
    import numpy as np

    import attnviz

    out = tmp_path / "out"
    source = SAMPLES / "sentences.txt"
    arguments = ["batch", str(source), "-o", str(out), "-f", "json", "-q"]
    result = runner.invoke(app, [*arguments, "--rows", "last", "--span", "0"])
    assert result.exit_code == 0, result.stderr
    lines = source.read_text().splitlines()
    for record, line in zip(manifest(out), lines, strict=True):
        (name,) = record["files"]
        document = json.loads((out / name).read_text())
        whole = attnviz.extract(line)
        assert document["query_positions"] == [len(whole.query_tokens) - 1]
        assert document["span"] == [0]
        np.testing.assert_allclose(document["weights"], whole.weights[:, :, -1:], atol=1e-6)
        assert (record["request"]["rows"], record["request"]["span"]) == ("last", "0")
    again = [*arguments[:-1], "--resume"]  # without -q: the summary counts what was done
    same = runner.invoke(app, [*again, "--rows", "last", "--span", "0"])
    assert same.exit_code == 0 and "0 written, 6 skipped (already done)" in same.stderr
    other = runner.invoke(app, [*again, "--rows", "0"])
    assert other.exit_code == 0 and "6 written" in other.stderr
    for record in manifest(out):
        (name,) = record["files"]
        assert json.loads((out / name).read_text())["query_positions"] == [0]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('{"text": "c d", "pair": 5}', 'line 2: "pair" must be a string'),
        ('{"text": "c d", "x": 1' + "0" * 5000 + "}", "line 2 holds a number too long to read"),
    ],
)
def test_a_failed_line_is_named_once(runner, tmp_path, line, error):
    source = tmp_path / "inputs.jsonl"
    source.write_text('{"text": "a b"}\n' + line + "\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json", "-q"])
    assert result.exit_code == 3
    assert result.stderr == (
        f"attnviz: error: 1 of 2 inputs failed (first: {error}); see {out / 'manifest.jsonl'}\n"
    )
