"""Regression tests for the hardening round (issue 12): each failed before its fix."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnviz
from attnviz.analysis.aggregate import aggregate
from attnviz.choices import Aggregate, Output, View
from attnviz.cli import app
from attnviz.render.image import Painter
from attnviz.render.style import Style
from tests.processes import ATTNVIZ

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\u202e"


def saved(tmp_path, name="maps.json", **changes):
    document = attnviz.extract("Hello I love you", mode="masked", layers=0).to_dict()
    document.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


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


def test_explain_shows_escapes_in_the_text_as_visible_characters(runner):
    result = runner.invoke(app, ["explain", "a \x1b[2J b\u202e", "--d-model", "8"])
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout


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


def test_rollout_folds_layers_in_model_order_whatever_order_was_typed():
    maps = attnviz.extract("the cat sat on the mat")
    forwards = aggregate(maps.select(layers=[0, 1]), Aggregate.ROLLOUT)
    backwards = aggregate(maps.select(layers=[1, 0]), Aggregate.ROLLOUT)
    np.testing.assert_array_equal(forwards.weights, backwards.weights)


def test_no_special_keeps_unknown_word_tokens(tiny):
    maps = attnviz.load(tiny["bert"]).extract("hello ☃ dog", special=False)
    assert maps.query_tokens == ["hello", "[UNK]", "dog"]
    np.testing.assert_allclose(maps.weights.sum(-1), 1, rtol=1e-5)


def test_pdfs_embed_truetype_fonts_not_type3():
    maps = attnviz.extract("Hello I love you", layers=0, heads=0)
    for view in (View.HEAD, View.MODEL):
        (_, pdf), *_ = Painter().files(maps, view, Output.PDF, Style())
        subtypes = set(re.findall(rb"/Subtype\s*/(\w+)", pdf))
        assert b"Type3" not in subtypes and b"CIDFontType2" in subtypes  # TrueType glyphs


def test_diff_refuses_files_of_several_inputs(runner, tmp_path):
    stream = runner.invoke(app, ["show", "-", "-f", "ndjson"], input="a b\nc d\n")
    assert stream.exit_code == 0
    path = tmp_path / "two.ndjson"
    path.write_text(stream.stdout)
    result = runner.invoke(app, ["diff", str(path), str(path)])
    assert result.exit_code == 2
    assert "holds several inputs; diff compares one with one" in result.stderr


def test_render_picks_layers_and_heads_of_saved_maps(runner, tmp_path):
    path = tmp_path / "maps.json"
    path.write_text(
        json.dumps(attnviz.extract("Hello I love you", layers="1", heads="0-2").to_dict())
    )
    picture = tmp_path / "one.png"
    result = runner.invoke(
        app, ["render", str(path), "--view", "head", "-l", "1", "--head", "2", "-o", str(picture)]
    )
    assert result.exit_code == 0, result.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")
    drawn = runner.invoke(app, ["render", str(path), "--head", "-1", "--color", "never"])
    assert "layer 1 · head 2" in drawn.stdout and "head 0" not in drawn.stdout
    missing = runner.invoke(app, ["render", str(path), "-l", "0"])
    assert missing.exit_code == 2
    assert "layer 0 is not in these saved maps: they hold layers 1" in missing.stderr


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


def test_usage_errors_keep_their_code_under_debug_given_before_or_after_the_command(runner):
    for arguments in (["--debug", "show", ""], ["show", "", "--debug"]):
        result = runner.invoke(app, arguments)
        assert result.exit_code == 2
        assert "Traceback" in result.stderr
        assert result.stderr.endswith(
            "attnviz: error: the text is empty: give some words to look at\n"
        )


def test_bare_attnviz_prints_the_help_and_succeeds(runner):
    result = runner.invoke(app, [])
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.startswith("Usage: attnviz") and "explain" in result.stdout


def test_a_seed_out_of_range_is_a_usage_error(runner):
    result = runner.invoke(app, ["show", "a", "--seed", str(2**64), "-f", "json"])
    assert result.exit_code == 2 and "Invalid value for '--seed'" in result.stderr


def test_a_model_path_with_markup_loads_under_the_spinner(runner, tiny, tmp_path):
    import shutil

    from attnviz.cli.output import Environment

    marked = tmp_path / "d[/x]"
    shutil.copytree(tiny["bert"], marked)
    result = runner.invoke(
        app, ["show", "hi", "--model", str(marked), "-f", "json"], obj=Environment(False, True)
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"] == str(marked)


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


@pytest.mark.slow
def test_dev_stdout_reaches_stdout_in_a_real_process(tmp_path):
    import subprocess

    result = subprocess.run(
        [*ATTNVIZ, "show", "a b", "-f", "json", "-o", "/dev/stdout"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["key_tokens"] == ["a", "b"]


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


def test_show_picks_the_format_from_the_suffix_of_output(runner, tmp_path):
    npz, png = tmp_path / "maps.npz", tmp_path / "maps.png"
    assert runner.invoke(app, ["show", "a b", "-o", str(npz)]).exit_code == 0
    assert npz.read_bytes().startswith(b"PK")
    assert runner.invoke(app, ["show", "a b", "-o", str(png)]).exit_code == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    clash = runner.invoke(app, ["show", "a b", "-f", "json", "-o", str(tmp_path / "x.csv")])
    assert clash.exit_code == 2 and "disagree" in clash.stderr


@pytest.mark.parametrize(
    ("shell", "message"),
    [
        ("show x -f json >&-", "standard output is closed"),
        ("--version >&-", "standard output is closed"),
        ("--help > /dev/full", "No space left on device"),
        ("models -f json > /dev/full", "No space left on device"),
    ],
)
@pytest.mark.slow
def test_output_that_cannot_be_written_is_one_line_and_exit_1(shell, message):
    import subprocess
    import sys

    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m attnviz {shell}"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr == f"attnviz: error: {message}\n"


@pytest.mark.slow
def test_text_that_is_not_utf8_and_an_ascii_locale(tmp_path):
    import os
    import subprocess

    attnviz_command = [*ATTNVIZ]
    bad = subprocess.run([*attnviz_command, "show", b"caf\xe9", "-f", "json"], capture_output=True)
    assert bad.returncode == 2
    assert b"the text is not UTF-8 text: byte 0xe9 at offset 3" in bad.stderr
    ascii_only = subprocess.run(
        [*attnviz_command, "show", "café 我", "-f", "terminal", "--width", "60"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert ascii_only.returncode == 0, ascii_only.stderr
    assert b"\\xb7" in ascii_only.stdout  # the middle dot, escaped


def test_a_lone_surrogate_fails_its_input_alone_and_resume_does_not_crash(runner, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a \\ud800 b"}\n{"text": "fine"}\n')
    command = ["batch", str(source), "-o", str(tmp_path / "out"), "-f", "json"]
    for extra in ([], ["--resume"]):
        result = runner.invoke(app, [*command, *extra])
        assert result.exit_code == 3, result.stderr
        assert "holds a lone surrogate" in result.stderr


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


@pytest.mark.parametrize("text", ["Hello I love you", "a", "a " * 60])
def test_a_pictures_header_and_title_lie_inside_the_canvas(text):
    from attnviz.render.canvas import HeadCanvas
    from attnviz.render.style import Frame

    maps = attnviz.extract(text, layers=0, heads=0)
    panel = next(maps.panels())
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    canvas = HeadCanvas(queries, keys, Style())
    frame = Frame(
        f"{maps.model} · self attention", tuple(maps.query_tokens), tuple(maps.key_tokens)
    )
    canvas.png(panel.matrix, frame, panel.title)
    renderer = canvas.canvas.get_renderer()
    figure = canvas.figure.bbox
    for artist in (canvas.header, canvas.title):
        extent = artist.get_window_extent(renderer)
        assert figure.x0 <= extent.x0 and extent.x1 <= figure.x1, artist.get_text()
        assert figure.y0 <= extent.y0 and extent.y1 <= figure.y1
    assert canvas.header.get_text().startswith("builtin:")
    # The rows/columns note sits just under the grid's corner, left of the key labels.
    (note,) = [t for t in canvas.figure.texts if t.get_text().startswith("rows:")]
    note_extent, grid = note.get_window_extent(renderer), canvas.axes.get_window_extent()
    assert note_extent.x1 <= grid.x0 and grid.y0 - 0.3 * 100 <= note_extent.y1 <= grid.y0


def test_long_inputs_in_the_terminal_are_not_solid(runner):
    text = " ".join(f"w{i}" for i in range(300))
    result = runner.invoke(
        app,
        [
            "show",
            text,
            "-l",
            "0",
            "--head",
            "0",
            "-f",
            "terminal",
            "--width",
            "80",
            "--color",
            "never",
        ],
    )
    assert result.exit_code == 0 and "pooled to fit" in result.stdout
    cells = [
        c
        for line in result.stdout.splitlines()
        if line.startswith("│")
        for c in line
        if c in "·░▒▓█"
    ]
    assert cells and cells.count("█") < len(cells) / 4


def test_notebook_html_is_bounded_and_says_what_it_left_out():
    words = " ".join(f"w{i}" for i in range(300))
    config = attnviz.BuiltinConfig(num_layers=4, num_heads=8)
    page = attnviz.extract(words, config=config)._repr_html_()
    assert len(page) < 2_000_000
    assert "are pooled by 2 to keep the page small" in page
    small = attnviz.extract("a b c")._repr_html_()
    assert "pooled" not in small


def test_explore_checks_its_export_folder_and_its_terminal_at_start(runner, tmp_path):
    from attnviz.cli.output import Environment

    terminal = Environment(True, True)
    missing = runner.invoke(
        app, ["explore", "a b", "--export-dir", str(tmp_path / "no")], obj=terminal
    )
    assert missing.exit_code == 2 and "is not a folder" in missing.stderr
    logged = runner.invoke(app, ["explore", "a b"], obj=Environment(True, False))
    assert logged.exit_code == 2 and "stdout and stderr on a terminal" in logged.stderr


def test_each_warning_is_one_line_said_once(runner, tmp_path):
    from tests import tiny_models

    short = str(tiny_models.gpt2(tmp_path / "short", n_positions=8))
    long_text = "a b " * 8
    shown = runner.invoke(app, ["show", long_text, "--model", short, "-f", "json"])
    assert shown.exit_code == 0
    assert shown.stderr.count("\n") == 1 and shown.stderr.startswith("attnviz: warning:")
    explained = runner.invoke(app, ["explain", long_text, "--model", short, "-q", "1"])
    assert explained.exit_code == 0
    assert (
        explained.stderr.count("attnviz: warning:") == 1 and "Token indices" not in explained.stderr
    )
    source = tmp_path / "glyphs.txt"
    source.write_text("𓀀 a\n𓀀 b\n𓀀 c\n")
    batch = runner.invoke(app, ["batch", str(source), "-o", str(tmp_path / "out"), "-l", "0", "-q"])
    assert batch.exit_code == 0
    assert batch.stderr.count("no installed font has 1 of the characters (𓀀)") == 1


def test_running_out_of_memory_says_what_to_reduce(runner, monkeypatch):
    def exhausted(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB")

    monkeypatch.setattr("attnviz.builtin.extractor.BuiltinExtractor._extract", exhausted)
    result = runner.invoke(app, ["show", "a b", "-f", "json"])
    assert result.exit_code == 1
    assert result.stderr.startswith("attnviz: error: out of memory: select fewer layers and heads")


def test_a_stack_too_big_for_the_machine_is_refused_with_an_estimate(runner):
    result = runner.invoke(app, ["show", "a b", "--d-model", "4096", "--num-layers", "64"])
    assert result.exit_code == 2
    assert "needs about 112.0 GiB for its weights alone" in result.stderr


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
    original = BuiltinExtractor.extract_many

    def counting(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BuiltinExtractor, "extract_many", counting)
    source = tmp_path / "in.txt"
    source.write_text("a b\nc d\n")
    before = torch.get_num_threads()
    result = runner.invoke(app, ["batch", str(source), "-o", str(tmp_path / "o"), "-j", "2", "-q"])
    assert result.exit_code == 0, result.stderr
    assert seen and set(seen) == {before}
    assert torch.get_num_threads() == before


def test_csv_tokens_carry_no_raw_control_characters(runner):
    result = runner.invoke(app, ["show", "a \x1b[2J b\u202e", "-f", "csv"])
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "␛" in result.stdout


def test_a_termination_that_a_library_turned_into_another_error_still_exits_143(
    runner, monkeypatch
):
    """SIGTERM raises in whatever code runs; an extension module being imported can turn
    that into an error of its own. The exit is still the signal's, with no error line."""
    from attnviz.cli.app import Terminated

    def terminated_inside_a_library(text):
        try:
            raise Terminated(143)
        except Terminated as signal:
            raise RuntimeError("initialization of _C raised unreported exception") from signal

    monkeypatch.setattr("attnviz.io.read_texts", terminated_inside_a_library)
    result = runner.invoke(app, ["show", "Hello"])
    assert result.exit_code == 143
    assert result.stderr == "" and result.stdout == ""


def test_ctrl_c_that_a_library_turned_into_another_error_is_still_an_interruption(
    runner, monkeypatch
):
    def interrupted_inside_a_library(text):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as signal:
            raise RuntimeError("initialization of _C raised unreported exception") from signal

    monkeypatch.setattr("attnviz.io.read_texts", interrupted_inside_a_library)
    result = runner.invoke(app, ["show", "Hello"])
    assert result.exit_code == 130
    assert result.stderr == "attnviz: error: interrupted\n"  # as a Ctrl-C anywhere else


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


def test_signals_wait_while_torch_is_imported_then_arrive():
    """Torch's import calls back into Python from C++, where a signal's exception aborts
    the process; Ctrl-C and SIGTERM are held meanwhile and delivered right after."""
    import os
    import signal

    from attnviz import signals

    arrived: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: arrived.append(number))
    try:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # bytecodes, where a handler would run
                pass
            assert arrived == []
        assert arrived == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
