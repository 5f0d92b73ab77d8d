"""A batch's folder: one writer at a time, every manifest honoured, done means whole."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from attnviz.batch.folder import FolderLock
from attnviz.cli import app
from tests.processes import ATTNVIZ
from tests.test_batch import unrecorded


def _inputs(tmp_path, count=4):
    source = tmp_path / "in.txt"
    source.write_text("".join(f"the cat sat on mat {i}\n" for i in range(count)))
    return source


def _batch(runner, source, out, *options):
    return runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json", "-q", *options])


def _records(path):
    """The records (a run's claim, the first line while it runs, is none)."""
    lines = (json.loads(line) for line in path.read_text().splitlines())
    return [line for line in lines if "index" in line]


def _files(folder):
    return sorted(path.name for path in folder.iterdir())


def _contents(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def _started(command, manifest):
    """A batch process, once its manifest records two inputs."""
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if manifest.exists() and len(manifest.read_text().splitlines()) >= 2:
            return process
        time.sleep(0.02)
    process.kill()
    raise AssertionError(f"the batch did not start: {process.communicate()[1]}")


@pytest.mark.slow
def test_a_second_writer_is_refused_while_the_first_runs(runner, tmp_path):
    source = _inputs(tmp_path, 3000)
    out = tmp_path / "out"
    command = [*ATTNVIZ, "batch", str(source), "-o", str(out)]
    first = _started([*command, "-f", "json", "--layer", "0", "-q"], out / "manifest.jsonl")
    assert (out / FolderLock.NAME).exists(), "the first batch holds its folder"
    for options in ([], ["--resume"], ["--overwrite"], ["--shard", "1/2"]):
        second = _batch(runner, source, out, "--layer", "1", *options)
        assert second.exit_code == 1, (options, second.stderr)
        assert second.stderr.startswith("attnviz: error: another attnviz run is writing")
        assert len(second.stderr.splitlines()) == 1
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 143, stderr
    # every file there is the first run's (layer 0), recorded in its manifest
    records = _records(out / "manifest.jsonl")
    assert {record["request"]["layers"] for record in records} == {"0"}
    recorded = {name for record in records for name in record["files"]}
    files = set(_files(out)) - {"manifest.jsonl"}  # the lock went with its writer
    assert recorded <= files  # (and the files of the chunk it was writing, whole)
    for name in files:
        assert json.loads((out / name).read_text())["layers"] == [0]


@pytest.mark.slow
def test_the_same_shard_twice_at_once_is_refused_other_shards_share(runner, tmp_path):
    source = _inputs(tmp_path, 3000)
    out = tmp_path / "out"
    command = [*ATTNVIZ, "batch", str(source), "-o", str(out), "-f", "json"]
    first = _started([*command, "--shard", "1/2", "-q"], out / "manifest-1-of-2.jsonl")
    same = _batch(runner, source, out, "--shard", "1/2", "--resume")
    assert same.exit_code == 1
    assert "another attnviz run is writing shard 1/2 into" in same.stderr
    whole = _batch(runner, source, out, "--resume")
    assert whole.exit_code == 1 and "writing a batch into" in whole.stderr
    (tmp_path / "small").mkdir()
    small = _inputs(tmp_path / "small", 4)
    other = _batch(runner, small, out, "--shard", "2/2")  # the sibling slice runs beside it
    assert other.exit_code == 0, other.stderr
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
    assert not (out / FolderLock.NAME).exists()


@pytest.mark.slow
def test_a_killed_writer_leaves_its_folder_free(runner, tmp_path):
    source = _inputs(tmp_path, 3000)
    out = tmp_path / "out"
    command = [*ATTNVIZ, "batch", str(source), "-o", str(out), "-f", "json"]
    first = _started(command, out / "manifest.jsonl")
    first.kill()
    first.wait(timeout=60)
    assert (
        out / FolderLock.NAME
    ).exists()  # kill -9 runs no clean-up; the lock is gone all the same
    (tmp_path / "small").mkdir()
    small = _inputs(tmp_path / "small", 4)
    again = _batch(runner, small, out, "--overwrite")
    assert again.exit_code == 0, again.stderr
    assert not (out / FolderLock.NAME).exists()


def test_a_run_honours_every_manifest_in_the_folder(runner, tmp_path):
    source = _inputs(tmp_path)
    whole = tmp_path / "whole"
    assert _batch(runner, source, whole).exit_code == 0
    before = _contents(whole)
    for options in (["--shard", "1/2"], ["--shard", "2/3"]):
        result = _batch(runner, source, whole, "--layer", "1", *options)
        assert result.exit_code == 2, result.stderr
        assert "already holds a batch (manifest.jsonl)" in result.stderr
    result = _batch(runner, source, whole, "--shard", "1/2", "--resume")
    assert result.exit_code == 2
    assert "holds manifest.jsonl, another slicing of the inputs" in result.stderr
    assert _contents(whole) == before

    sharded = tmp_path / "sharded"
    assert _batch(runner, source, sharded, "--shard", "1/2").exit_code == 0
    before = _contents(sharded)
    for options in ([], ["--shard", "1/3"]):
        result = _batch(runner, source, sharded, *options)
        assert result.exit_code == 2
        assert "already holds a batch (manifest-1-of-2.jsonl)" in result.stderr
    result = _batch(runner, source, sharded, "--shard", "2/2", "--layer", "0")
    assert result.exit_code == 2
    assert "holds manifest-1-of-2.jsonl, written with other options" in result.stderr
    assert _contents(sharded) == before


def test_resume_after_shards_finishes_them_as_one_batch(runner, tmp_path):
    source = _inputs(tmp_path, 5)
    out = tmp_path / "out"
    for shard in ("1/2", "2/2"):
        assert _batch(runner, source, out, "--shard", shard).exit_code == 0
    files = set(_files(out))
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json", "--resume"])
    assert result.exit_code == 0, result.stderr
    assert "5 skipped (already done)" in result.stderr
    assert set(_files(out)) == files - {"manifest-1-of-2.jsonl", "manifest-2-of-2.jsonl"} | {
        "manifest.jsonl"
    }
    assert [record["index"] for record in _records(out / "manifest.jsonl")] == list(range(5))


def test_overwrite_removes_what_the_earlier_batches_wrote(runner, tmp_path):
    source = _inputs(tmp_path)
    out = tmp_path / "out"
    assert _batch(runner, source, out, "--shard", "1/2").exit_code == 0
    assert _batch(runner, source, out, "--shard", "2/2").exit_code == 0
    mine = out / "notes.txt"
    mine.write_text("not attnviz's")
    result = runner.invoke(
        app, ["batch", str(source), "-o", str(out), "-f", "npz", "--overwrite", "-q"]
    )
    assert result.exit_code == 0, result.stderr
    records = _records(out / "manifest.jsonl")
    written = {name for record in records for name in record["files"]}
    assert written and all(name.endswith(".npz") for name in written)
    assert set(_files(out)) == written | {"manifest.jsonl", "notes.txt"}


@pytest.mark.parametrize("damage", ["empty", "same size", "missing digest"])
def test_resume_redoes_a_file_that_is_not_whole(runner, tmp_path, damage):
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    assert _batch(runner, source, out).exit_code == 0
    manifest = out / "manifest.jsonl"
    records = _records(manifest)
    damaged = out / records[0]["files"][0]
    whole = damaged.read_bytes()
    if damage == "empty":
        damaged.write_bytes(b"")
    elif damage == "same size":
        damaged.write_bytes(whole.replace(b"0.", b"1.", 1))
    else:  # as an older release recorded it
        del records[0]["digests"]
        manifest.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = _batch(runner, source, out, "--resume")
    assert result.exit_code == 0
    assert damaged.read_bytes() == whole
    assert _records(manifest)[0]["digests"][damaged.name]["size"] == len(whole)


def test_a_file_written_over_a_link_gets_the_users_mode(runner, tmp_path):
    source = _inputs(tmp_path, 1)
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (out / "0000-the-cat-sat-on-mat-0.json").symlink_to(elsewhere)
    previous = os.umask(0o027)
    try:
        assert _batch(runner, source, out).exit_code == 0
    finally:
        os.umask(previous)
    written = out / "0000-the-cat-sat-on-mat-0.json"
    assert not written.is_symlink() and elsewhere.read_text() == "{}"
    assert stat.S_IMODE(written.stat().st_mode) == 0o640
    assert stat.S_IMODE((out / "manifest.jsonl").stat().st_mode) == 0o640


def test_a_batch_never_writes_outside_its_folder(runner, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").symlink_to(outside)
    (out / "0000-a-b.json").symlink_to(outside)
    (out / "0001-c-d.json").symlink_to(tmp_path / "dangling.txt")
    source = tmp_path / "in.txt"
    source.write_text("a b\nc d\n")
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json", "--overwrite"])
    assert result.exit_code == 0, result.stderr
    assert outside.read_text() == "precious" and not (tmp_path / "dangling.txt").exists()
    for name in ("manifest.jsonl", "0000-a-b.json", "0001-c-d.json"):
        assert (out / name).is_file() and not (out / name).is_symlink()


def test_a_second_batch_into_the_same_folder_needs_resume_or_overwrite(runner, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    command = ["batch", str(source), "-o", str(tmp_path / "out"), "-f", "json", "-q"]
    assert runner.invoke(app, command).exit_code == 0
    again = runner.invoke(app, command)
    assert again.exit_code == 2
    assert "already holds a batch (manifest.jsonl): add --resume" in again.stderr
    assert runner.invoke(app, [*command, "--overwrite"]).exit_code == 0
    both = runner.invoke(app, [*command, "--overwrite", "--resume"])
    assert both.exit_code == 2 and "pick one" in both.stderr


def test_resume_redoes_what_the_request_changed(runner, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a b\nc d\n")
    out = tmp_path / "out"
    base = ["batch", str(source), "-o", str(out)]
    assert runner.invoke(app, [*base, "-f", "png", "-l", "0"]).exit_code == 0
    same = runner.invoke(app, [*base, "-f", "png", "-l", "0", "--resume"])
    assert "0 written, 2 skipped" in same.stderr
    for change in (
        ["-f", "json", "-l", "0"],
        ["-f", "json", "-l", "1"],
        ["-f", "json", "-l", "1", "--seed", "4"],
    ):
        result = runner.invoke(app, [*base, *change, "--resume"])
        assert result.exit_code == 0, result.stderr
        assert "2 written" in result.stderr, change
    document = json.loads((out / "0000-a-b.json").read_text())
    assert document["layers"] == [1] and "seed=4" in document["model"]
    source.write_text("a b\nc d e\n")  # a changed text is redone too
    changed = runner.invoke(app, [*base, "-f", "json", "-l", "1", "--seed", "4", "--resume"])
    assert "1 written, 1 skipped" in changed.stderr


@pytest.mark.parametrize(
    "line",
    ['{"index": "a", "status": "ok"}', '{"index": 0, "line": 1, "id": null, "text": "a b", '
     '"target": null, "status": "ok", "files": null}', '{"index": 0, "line": 1, "id": null, '
     '"text": "a b", "target": null, "status": "ok", "files": ["../outside.json"]}', "[1, 2]"],
)  # fmt: skip
def test_a_manifest_line_of_the_wrong_shape_means_not_done(runner, tmp_path, line):
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").write_text(line + "\n")
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json", "--resume"])
    assert result.exit_code == 0, result.stderr
    assert "1 written" in result.stderr


@pytest.mark.parametrize("view", ["head", "layer", "model"])
def test_a_batch_takes_away_the_temporary_files_killed_writers_left(runner, tmp_path, view):
    """Left as kill -9 leaves them (or Ray, stopping a worker with its driver): a batch into
    the folder removes those of its own inputs' files, and nothing else."""
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    first = _batch(runner, source, out, "-f", "png", "-f", "npz", "-f", "html", "--view", view)
    assert first.exit_code == 0, first.stderr
    written = [name for name in _files(out) if name != "manifest.jsonl"]
    left = [f".{name}.k0c26kyn" for name in written]
    others = [".0007-the-dog.json.k0c26kyn", ".notes.txt.k0c26kyn", ".0000-x.json"]
    for name in left + others:
        (out / name).write_bytes(b"half")
    again = _batch(
        runner, source, out, "-f", "png", "-f", "npz", "-f", "html", "--view", view, "--resume"
    )
    assert again.exit_code == 0, again.stderr
    assert [name for name in _files(out) if name.startswith(".")] == sorted(others)


def test_a_temporary_file_still_being_written_is_left_and_said(runner, tmp_path, monkeypatch):
    """A worker still at work when the batch ends (a Ray worker that its job has not yet
    stopped) keeps its file: the batch waits for it a while, then says it left it."""
    import attnviz.batch.folder

    monkeypatch.setattr(attnviz.batch.folder, "WORKERS_STOP", 0.3)
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    out.mkdir()
    code = (
        "import sys, time\n"
        "from attnviz.files import open_output\n"
        "with open_output(sys.argv[1]) as out:\n"
        "    print('writing', flush=True); time.sleep(60)\n"
    )
    name = "0001-the-cat-sat-on-mat-1.json"
    command = [sys.executable, "-c", code, str(out / name)]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "writing\n"
        result = _batch(runner, source, out)
        (held,) = [path for path in out.iterdir() if path.name.startswith(f".{name}.")]
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert result.exit_code == 0, result.stderr
    assert f"1 temporary file(s) in {out} still held by a worker ({held.name})" in result.stderr


@pytest.mark.parametrize("target", ["itself", "elsewhere"])
def test_a_link_at_the_lock_files_name_is_said_and_never_followed(runner, tmp_path, target):
    """It said 'Too many levels of symbolic links'; a link there is none attnviz made."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "precious"
    elsewhere.write_text("keep me")
    link = out / ".attnviz-batch.lock"
    link.symlink_to(link if target == "itself" else elsewhere)
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json"])
    assert result.exit_code == 1
    assert result.stderr == (
        f"attnviz: error: cannot lock {out}: {link} is a symbolic link, not the lock file "
        "attnviz makes there; remove it\n"
    )
    assert elsewhere.read_text() == "keep me" and link.is_symlink()


@pytest.mark.slow
def test_shards_started_together_with_other_options_are_not_both_run(tmp_path):
    """Each claims its request in its manifest as it plans, one at a time: the second to
    plan reads the first's claim, though neither has finished an input."""
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    command = [*ATTNVIZ, "batch", str(source), "-o", str(out), "-q"]
    shards = [
        subprocess.Popen(
            [*command, "--shard", f"{number}/2", "-f", output], stderr=subprocess.PIPE, text=True
        )
        for number, output in ((1, "json"), (2, "npz"))
    ]
    results = sorted((shard.wait(timeout=120), shard.stderr.read()) for shard in shards)
    (ran, _), (refused, said) = results
    assert (ran, refused) == (0, 2), results
    assert "written with other options: every shard of a batch takes the same ones" in said
    suffixes = {name.rsplit(".", 1)[1] for name in _files(out) if not name.startswith("manifest")}
    assert len(suffixes) == 1, _files(out)  # one request's files only
    assert not unrecorded(out)


def test_resume_with_other_options_leaves_no_file_unrecorded(runner, tmp_path):
    """An input redone for a changed request takes its earlier files away; one that fails
    this time keeps them, recorded, so that --overwrite still finds them."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nthe cat sat on the mat today\n")
    out = tmp_path / "out"
    base = ["batch", str(source), "-o", str(out), "-q"]
    assert runner.invoke(app, [*base, "-f", "png"]).exit_code == 0
    redone = runner.invoke(app, [*base, "-f", "json", "--resume"])
    assert redone.exit_code == 0, redone.stderr
    assert not unrecorded(out)
    assert {name.rsplit(".", 1)[1] for name in _files(out)} == {"json", "jsonl"}

    short = out / "0000-a-b.json"
    kept = short.read_bytes()
    partly = runner.invoke(app, [*base, "-f", "json", "--rows", "5", "--resume"])
    assert partly.exit_code == 3, partly.stderr  # "a b" has no token 5
    failed, written = _records(out / "manifest.jsonl")
    assert written["status"] == "ok"
    assert failed["status"] == "failed" and failed["files"] == [short.name]
    assert short.read_bytes() == kept and not unrecorded(out)

    assert runner.invoke(app, [*base, "-f", "npz", "--overwrite"]).exit_code == 0
    assert {name.rsplit(".", 1)[1] for name in _files(out)} == {"npz", "jsonl"}
    assert not unrecorded(out)


def test_files_a_killed_run_wrote_but_never_recorded_go_with_the_next_run(runner, tmp_path):
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    assert _batch(runner, source, out).exit_code == 0
    manifest = out / "manifest.jsonl"
    records = manifest.read_text().splitlines()
    manifest.write_text(records[0] + "\n")  # killed after writing input 1's file
    (out / "0001-the-cat-sat-on-mat-1.png").write_bytes(b"drawn, never recorded")
    (out / "notes.png").write_bytes(b"the user's")  # no input's name: left alone
    result = _batch(runner, source, out, "--resume")
    assert result.exit_code == 0, result.stderr
    assert unrecorded(out) == {"notes.png"}


def test_a_run_that_stops_before_its_first_input_leaves_no_manifest(runner, tmp_path):
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    failed = _batch(runner, source, out, "--model", str(tmp_path / "no-such-model"))
    assert failed.exit_code != 0
    assert not out.exists() or _files(out) == []
    assert _batch(runner, source, out).exit_code == 0  # no --resume needed
