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
from attnviz.batch.manifest import digest_of
from attnviz.cli import app
from tests.checks import unrecorded
from tests.processes import ATTNVIZ


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
    """A batch process, once its manifest records an input."""
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if manifest.exists() and '"index"' in manifest.read_text():
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


def test_the_files_a_batch_writes_get_the_users_mode(runner, tmp_path):
    source = _inputs(tmp_path, 1)
    out = tmp_path / "out"
    previous = os.umask(0o027)
    try:
        assert _batch(runner, source, out).exit_code == 0
    finally:
        os.umask(previous)
    written = out / "0000-the-cat-sat-on-mat-0.json"
    assert stat.S_IMODE(written.stat().st_mode) == 0o640
    assert stat.S_IMODE((out / "manifest.jsonl").stat().st_mode) == 0o640


def test_a_batch_never_writes_outside_its_folder(runner, tmp_path):
    """A link at the manifest's name is replaced, never followed; a link at an input's file
    name that no batch made is the user's: left as it is, and that input fails."""
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
    assert result.exit_code == 3, result.stderr
    assert "2 of 2 inputs failed (first: line 1: " in result.stderr
    assert "0000-a-b.json is there already and no batch made it" in result.stderr
    assert outside.read_text() == "precious" and not (tmp_path / "dangling.txt").exists()
    assert (out / "manifest.jsonl").is_file() and not (out / "manifest.jsonl").is_symlink()
    assert (out / "0000-a-b.json").is_symlink() and (out / "0001-c-d.json").is_symlink()

    again = runner.invoke(app, ["batch", str(source), "-o", str(out / "0000-a-b.json")])
    assert again.exit_code != 0 and outside.read_text() == "precious"


def test_a_link_put_over_a_file_a_batch_made_is_replaced_never_followed(runner, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    out = tmp_path / "out"
    assert _batch(runner, source, out).exit_code == 0
    (out / "0000-a-b.json").unlink()
    (out / "0000-a-b.json").symlink_to(outside)
    assert _batch(runner, source, out, "--resume").exit_code == 0
    assert outside.read_text() == "precious" and not (out / "0000-a-b.json").is_symlink()


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
        "from attnviz.atomic_files import open_output\n"
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


def test_files_a_killed_run_claimed_but_never_recorded_go_with_the_next_run(runner, tmp_path):
    source = _inputs(tmp_path, 2)
    out = tmp_path / "out"
    assert _batch(runner, source, out).exit_code == 0
    manifest = out / "manifest.jsonl"
    first = manifest.read_text().splitlines()[0]
    drawn, begun = "0001-the-cat-sat-on-mat-1.png", "0001-the-cat-sat-on-mat-1.json"
    # As kill -9 leaves it: input 1's files (by an earlier request's formats too) claimed,
    # one drawn whole (its digest claimed), one begun (its empty placeholder), neither
    # recorded.
    (out / drawn).write_bytes(b"drawn, never recorded")
    (out / begun).write_bytes(b"")
    whole = {"claim": [drawn], "digests": {drawn: digest_of(out / drawn)}}
    claims = [json.dumps(line) for line in ({"claim": [begun]}, {"claim": [drawn]}, whole)]
    manifest.write_text("\n".join([first, *claims, ""]))
    (out / "0001-the-cat-sat-on-mat-1.svg").write_bytes(b"the user's, named like it")
    result = _batch(runner, source, out, "--resume")
    assert result.exit_code == 0, result.stderr
    assert unrecorded(out) == {"0001-the-cat-sat-on-mat-1.svg"}
    assert "claim" not in manifest.read_text()  # settled


USERS = {  # named like the inputs' ids, their stems and their pictures, in other formats
    "notes.pdf": b"%PDF the user's",
    "notes.html": b"<p>the user's</p>",
    "summary.json": b'{"the": "user\'s"}',
    "0000-hello-i-love-you.png": b"the user's picture",
    "0001-the-man-walked-the-dog.json": b"{}",
    "0000-hello-i-love-you-L7.svg": b"<svg/>",
    "0001-the-man-walked-the-dog-L0-H1.pdf": b"%PDF",
}


@pytest.mark.parametrize("source", ["ids.jsonl", "two.txt"])
def test_a_batch_never_removes_a_file_it_did_not_make(runner, tmp_path, source):
    """The clean-up matched names, not claims: a run removed the user's files named like an
    input's id or stem in formats it never writes."""
    (tmp_path / "ids.jsonl").write_text(
        '{"id": "notes", "text": "Hello I love you"}\n{"id": "summary", "text": "a b"}\n'
    )
    (tmp_path / "two.txt").write_text("Hello I love you\nThe man walked the dog\n")
    out = tmp_path / "out"
    out.mkdir()
    for name, data in USERS.items():
        (out / name).write_bytes(data)
    base = ["batch", str(tmp_path / source), "-o", str(out), "-f", "png", "--view", "head"]
    first = runner.invoke(app, base)
    assert first.exit_code == 0, first.stderr
    assert f"{out} holds {len(USERS)} file(s) no batch made (" in first.stderr
    for more in (["--resume"], ["-f", "svg", "--resume"], ["--overwrite"]):
        result = runner.invoke(app, [*base, *more])
        assert result.exit_code == 0, (more, result.stderr)
        assert "no batch made" not in result.stderr
        assert {name: (out / name).read_bytes() for name in USERS} == USERS
        assert unrecorded(out) == set(USERS)


def test_a_file_of_the_users_at_an_outputs_name_fails_that_input_alone(runner, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "notes", "text": "a b"}\n{"id": "other", "text": "c d"}\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.json").write_text("mine")
    result = runner.invoke(app, ["batch", str(source), "-o", str(out), "-f", "json"])
    assert result.exit_code == 3
    assert result.stderr.splitlines()[-1] == (
        f"attnviz: error: 1 of 2 inputs failed (first: line 1: {out / 'notes.json'} is there "
        "already and no batch made it: it is left as it is (move it away, or write into "
        f"another folder)); see {out / 'manifest.jsonl'}"
    )
    assert (out / "notes.json").read_text() == "mine" and (out / "other.json").is_file()
    assert unrecorded(out) == {"notes.json"}


@pytest.mark.system
@pytest.mark.slow
def test_kill_9_then_resume_gives_a_clean_runs_files(runner, tmp_path, generators):
    """Killed mid-run (inputs recorded or not, files claimed and drawn by two workers),
    the resumed run ends with a clean run's very bytes, every file recorded,
    and the user's files untouched. A resumed input is read with the company a clean run
    gives it: its padding had moved its numbers in the last bits (one JSON of 30 differed)."""
    source = tmp_path / "nine.txt"
    words = "the cat sat on a mat dog walked man hello love you attention is all".split()
    lines = (" ".join(words[(i * 7 + j) % 15] for j in range(2 + i % 11)) for i in range(9))
    source.write_text("".join(f"{line}\n" for line in lines))
    arguments = ["batch", str(source), "--model", generators["llama-lm"], "-q"]
    arguments += ["-f", "json", "-f", "png", "--batch-size", "3"]
    clean = tmp_path / "clean"
    assert runner.invoke(app, [*arguments, "-o", str(clean)]).exit_code == 0
    expected = _contents(clean)
    for lines_seen in (9,):  # the request, claims and records (every line: the test below)
        out = tmp_path / f"killed-{lines_seen}"
        out.mkdir()
        (out / "0002-all-the-cat-sat.svg").write_bytes(b"the user's")  # an input's name
        process = subprocess.Popen(
            [*ATTNVIZ, *arguments, "-o", str(out), "--jobs", "2"], stderr=subprocess.PIPE
        )
        manifest = out / "manifest.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if manifest.exists() and len(manifest.read_text().splitlines()) >= lines_seen:
                break
            time.sleep(0.002)
        process.kill()
        assert process.wait(timeout=60) == -signal.SIGKILL, process.stderr.read()
        resumed = runner.invoke(app, [*arguments, "-o", str(out), "--resume"])
        assert resumed.exit_code == 0, (lines_seen, resumed.stderr)
        found = _contents(out)
        assert found.pop("0002-all-the-cat-sat.svg") == b"the user's"
        assert found == expected, (lines_seen, sorted(set(found) ^ set(expected)))


def test_a_run_killed_after_any_line_of_its_manifest_resumes_to_a_clean_runs_folder(
    runner, tmp_path
):
    """The folder as kill -9 leaves it after each line its run wrote (the request, each
    file's claim with the file written, each record), and after half a line: --resume
    ends with a clean run's files and manifest, the user's file untouched."""
    source = _inputs(tmp_path, 4)
    clean = tmp_path / "clean"
    assert _batch(runner, source, clean, "-f", "npz").exit_code == 0
    expected = _contents(clean)
    records = [json.loads(line) for line in (clean / "manifest.jsonl").read_text().splitlines()]
    log = [json.dumps({"request": records[0]["request"]})]
    for record in records:
        log += [json.dumps({"claim": [name]}) for name in record["files"]]
        log.append(json.dumps(record))
    cuts = [(count, "") for count in range(1, len(log) + 1)] + [(5, log[5][:20])]
    for count, half in cuts:
        out = tmp_path / f"cut-{count}-{len(half)}"
        out.mkdir()
        (out / "notes.json").write_text("the user's")
        claimed = {name for line in log[:count] for name in json.loads(line).get("claim", [])}
        for name in claimed:
            (out / name).write_bytes(b"written" if name.endswith("json") else expected[name])
        (out / "manifest.jsonl").write_text("\n".join(log[:count]) + "\n" + half)
        resumed = _batch(runner, source, out, "-f", "npz", "--resume")
        assert resumed.exit_code == 0, (count, resumed.stderr)
        found = _contents(out)
        assert found.pop("notes.json") == b"the user's"
        assert found == expected, count


def test_a_resumed_input_is_read_in_the_company_a_whole_run_gives_it(runner, tmp_path, generators):
    """Inputs 21 to 29 of 30 redone (as after a kill): read in other company (other
    padding, another batch shape), two of their JSON files differed from a whole run's in
    the last bits of their numbers."""
    import random

    chosen = random.Random(1)
    words = "the cat sat on a mat dog walked man hello love you bonjour attention is all"
    words += " need street tired"
    lines = [
        " ".join(chosen.choice(words.split()) for _ in range(chosen.randint(2, 14)))
        for _ in range(30)
    ]
    source = tmp_path / "thirty.txt"
    source.write_text("".join(f"{line}\n" for line in lines))
    arguments = ["batch", str(source), "--model", generators["llama-lm"], "-f", "json", "-q"]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    for out in (whole, resumed):
        assert runner.invoke(app, [*arguments, "-o", str(out)]).exit_code == 0
    manifest = resumed / "manifest.jsonl"
    kept = []
    for line in manifest.read_text().splitlines():
        record = json.loads(line)
        if record["index"] < 21:
            kept.append(line)
        else:
            for name in record["files"]:
                (resumed / name).unlink()
    manifest.write_text("\n".join(kept) + "\n")
    result = runner.invoke(app, [*arguments, "-o", str(resumed), "--resume"])
    assert result.exit_code == 0, result.stderr
    assert _contents(resumed) == _contents(whole)


def test_a_users_file_that_appears_mid_run_is_never_written_over(runner, tmp_path, monkeypatch):
    """The folder's foreign names were read once, as the run began: files the user put at
    the names later inputs take, once the first input was recorded, were replaced."""
    from attnviz.batch.ledger import Ledger

    source = _inputs(tmp_path, 6)
    named = tmp_path / "named"
    options = ["-f", "png", "--view", "model"]
    assert _batch(runner, source, named, *options).exit_code == 0
    later = [name for name in _files(named) if not name.startswith(("0000-", "manifest"))]
    assert len(later) == 10  # inputs 1-5, a json and a png each
    out = tmp_path / "out"
    claim = Ledger.claim

    def drop_the_users_files_once_input_0_is_written(ledger, name):
        if name.startswith("0001-") and not (out / later[0]).exists():
            for each in later:
                (out / each).write_bytes(b"the user's " + each.encode())
        claim(ledger, name)

    monkeypatch.setattr(Ledger, "claim", drop_the_users_files_once_input_0_is_written)
    result = _batch(runner, source, out, *options)
    assert result.exit_code == 3, result.stderr
    assert "5 of 6 inputs failed" in result.stderr and "no batch made it" in result.stderr
    assert {name: (out / name).read_bytes() for name in later} == {
        name: b"the user's " + name.encode() for name in later
    }
    assert unrecorded(out) == set(later)


def test_a_claim_added_by_hand_removes_nothing_that_no_batch_wrote(runner, tmp_path):
    """A claim line forged into a manifest named the user's file, or the manifest itself:
    --resume removed both, and the next --resume failed every input."""
    source = _inputs(tmp_path, 3)
    out = tmp_path / "out"
    assert _batch(runner, source, out).exit_code == 0
    (out / "summary.json").write_text('{"the": "user\'s"}')
    manifest = out / "manifest.jsonl"
    forged = ["summary.json", "manifest.jsonl", ".attnviz-batch.lock", "../in.txt"]
    with manifest.open("a") as lines:
        for name in forged:
            lines.write(json.dumps({"claim": [name]}) + "\n")
        # a digest forged beside it: still not what the file holds
        lines.write(json.dumps({"claim": ["summary.json"], "digests": {"summary.json": {}}}))
        lines.write("\n")
    before = _contents(out)
    result = _batch(runner, source, out, "--resume")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("warning") == 1, result.stderr
    assert f"{out / 'summary.json'}: a manifest claims it, but its content is not" in (
        result.stderr
    )
    assert (out / "summary.json").read_text() == '{"the": "user\'s"}'
    assert source.is_file() and manifest.is_file()
    assert _contents(out).keys() == before.keys()
    again = _batch(runner, source, out, "--resume")
    assert again.exit_code == 0 and again.stderr == "", again.stderr
    assert len(_records(manifest)) == 3 and unrecorded(out) == {"summary.json"}


def test_shards_read_one_at_a_time_write_a_whole_runs_bytes(runner, tmp_path, generators):
    """docs/batch.md: shards read their inputs in their own slice's company (their numbers
    may differ from a whole run's in the last bits); with --batch-size 1 every input is
    read alone, and the shards' files are a whole run's, byte for byte."""
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\nHello I love you very much\na b\nThe man walked the dog\n")
    common = ["batch", str(source), "--model", generators["llama-lm"], "-f", "json", "-q"]
    common += ["--batch-size", "1"]
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    assert runner.invoke(app, [*common, "-o", str(whole)]).exit_code == 0
    for shard in ("1/2", "2/2"):
        assert runner.invoke(app, [*common, "-o", str(sharded), "--shard", shard]).exit_code == 0
    data = {name: blob for name, blob in _contents(sharded).items() if name.endswith(".json")}
    assert len(data) == 4
    assert data == {name: blob for name, blob in _contents(whole).items() if name in data}


def test_a_name_a_stopped_writer_of_the_run_claimed_is_the_runs_to_write(tmp_path):
    """A Ray worker killed after claiming a name (its placeholder made, or its whole file
    written and its digest claimed) has its input retried on another worker, which found
    the name taken by "a file no batch made" and failed the input."""
    from attnviz.batch.ledger import Ledger
    from attnviz.errors import AttnvizError

    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text('{"request": {}}\n')
    killed = Ledger(manifest)
    killed.claim("0006-placeholder.json")  # the placeholder, then the worker died
    (tmp_path / "0007-whole.json").write_text("{}")
    retried = Ledger(manifest)
    retried.claim("0006-placeholder.json")  # the run's own: no error
    whole = tmp_path / "0008-whole.json"
    Ledger(manifest).claim(whole.name)
    whole.write_text('{"written": true}')
    Ledger(manifest).written(whole.name, digest_of(whole))
    retried.claim(whole.name)  # its digest claimed: the run's own
    with pytest.raises(AttnvizError, match="no batch made it"):
        retried.claim("0007-whole.json")  # nobody claimed it: the user's
    whole.write_text('{"changed": "by the user"}')
    with pytest.raises(AttnvizError, match="no batch made it"):
        retried.claim(whole.name)  # its content is no longer what the run wrote
