"""`attnviz show` through typer's CliRunner: stdout and stderr apart, exit codes, safety."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnviz
from attnviz.cli import app

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_version_reads_package_metadata(runner):
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"attnviz {attnviz.__version__}\n"
    assert attnviz.__version__ != "0+unknown"


def test_show_draws_every_head_labelled(runner):
    result = runner.invoke(app, ["show", "Hello I love you", "-f", "terminal", "--width", "120"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    for layer in range(2):
        for head in range(4):
            assert f"layer {layer} · head {head}" in result.stdout
    assert all(len(line) <= 120 for line in result.stdout.splitlines())
    assert "\x1b" not in result.stdout  # no escape code into a pipe


def test_json_goes_to_stdout_alone_and_matches_the_library(runner):
    result = runner.invoke(
        app, ["show", "Hello I love you", "--format", "json", "--mode", "masked", "--layer", "1"]
    )
    assert result.exit_code == 0
    assert result.stderr == ""
    document = json.loads(result.stdout)
    expected = attnviz.extract("Hello I love you", mode="masked", layers=1)
    assert document["query_tokens"] == ["hello", "i", "love", "you"]
    assert document["layers"] == [1] and document["heads"] == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.asarray(document["weights"], np.float32), expected.weights)


def test_json_to_a_file_writes_nothing_on_stdout(runner, tmp_path):
    path = tmp_path / "maps.json"
    result = runner.invoke(app, ["show", "a b c", "--format", "json", "-o", str(path)])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert json.loads(path.read_text())["key_tokens"] == ["a", "b", "c"]
    assert [p.name for p in tmp_path.iterdir()] == ["maps.json"]  # no temporary left behind


def test_stdin_text(runner):
    result = runner.invoke(app, ["show", "-", "--format", "json"], input="Ich liebe dich\n")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["text"] == "Ich liebe dich"


@pytest.mark.parametrize("command", ["show", "export", "heads", "top", "generate"])
def test_a_whole_file_is_one_text_with_its_newlines(runner, tiny, generators, tmp_path, command):
    """@FILE (and @- for stdin) reads a document of several lines as one input, as if it
    were given whole as the argument; the line ending that closes the file is not part
    of it."""
    book = tmp_path / "book.txt"
    book.write_bytes("\ufeffFirst line of it.\r\nSecond line.\n\nThird.\n".encode())
    text = "First line of it.\r\nSecond line.\n\nThird."
    model = generators["gpt2-lm"] if command == "generate" else tiny["gpt2"]
    plain = ["--max-new-tokens", "2"] if command == "generate" else []
    picture = tmp_path / "maps.svg"
    data = ["-o", str(picture)] if command == "export" else ["-f", "json"]

    def output(given, stdin=None):
        result = runner.invoke(app, [command, "--model", model, given, *plain, *data], input=stdin)
        assert result.exit_code == 0, result.stderr
        return picture.read_text() if command == "export" else result.stdout

    expected = output(text)
    assert output(f"@{book}") == expected
    assert output("@-", book.read_bytes()) == expected
    literal = runner.invoke(app, ["show", "@@home", "-f", "json"])
    assert json.loads(literal.stdout)["text"] == "@home"


def test_cross_mode_rows_are_target_tokens(runner):
    result = runner.invoke(
        app,
        ["show", "Hello I love you", "-m", "cross", "-t", "je t'aime", "--format", "json"],
    )
    assert result.exit_code == 0 and result.stderr == ""
    document = json.loads(result.stdout)
    assert document["query_tokens"] == ["je", "t", "'", "aime"]
    assert document["key_tokens"] == ["hello", "i", "love", "you"]
    assert document["target"] == "je t'aime"


def test_stack_options_change_the_stack(runner):
    result = runner.invoke(
        app,
        [
            "show", "one two three", "--num-layers", "3", "--num-heads", "2", "--d-model", "8",
            "--seed", "5", "--no-positions", "--format", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0 and result.stderr == ""
    document = json.loads(result.stdout)
    assert document["model"] == "builtin:layers=3,heads=2,d_model=8,seed=5,no-positions"
    assert np.asarray(document["weights"]).shape == (3, 2, 3, 3)


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["show", ""], 2, "the text is empty"),
        (["show", "  \t "], 2, "the text is empty"),
        (["show", "hi", "--layer", "2"], 2, "layer 2 is out of range: there are 2 layers"),
        (["show", "hi", "--head", "-5"], 2, "head -5 is out of range: there are 4 heads"),
        (["show", "hi", "--head", "1-x"], 2, "is not an index, a list"),
        (["show", "hi", "--mode", "cross"], 2, "cross mode needs a target text"),
        (
            ["show", "hi", "--target", "yo"],
            2,
            "only applies to cross mode, not self mode: add --mode cross",
        ),
        (["show", "hi", "-m", "cross", "-t", " "], 2, "the target is empty"),
        (["show", "hi", "--d-model", "10"], 2, "must be a multiple of num_heads"),
        (["show", "hi", "--mode", "sideways"], 2, "Invalid value for '--mode'"),
        (["show", "hi", "--no-such-flag"], 2, "No such option: --no-such-flag"),
        (["show", "hi", "-f", "terminal", "-o", "x.txt"], 2, "--output goes with a data --format"),
        (["show", "hi", "-f", "terminal", "-o", "x.json"], 2, "--format terminal and the suffix"),
    ],
)
def test_bad_input_is_one_line_on_stderr(runner, arguments, code, message):
    result = runner.invoke(app, arguments)
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr.startswith("attnviz: error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_stdin_that_is_not_utf8(runner):
    result = runner.invoke(app, ["show", "-", "-f", "ndjson"], input=b"good\ncaf\xe9\n")
    assert result.exit_code == 2
    assert result.stderr == (
        "attnviz: error: standard input line 2 is not UTF-8 text: byte 0xe9 at offset 3\n"
    )
    assert json.loads(result.stdout)["text"] == "good"  # the whole record before the error


def test_unwritable_output_is_a_runtime_error(runner, tmp_path):
    result = runner.invoke(
        app, ["show", "hi", "--format", "json", "-o", str(tmp_path / "missing" / "x.json")]
    )
    assert result.exit_code == 1
    assert "does not exist" in result.stderr
    result = runner.invoke(app, ["show", "hi", "--format", "json", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "it is a directory" in result.stderr


def test_unexpected_errors_are_one_line_unless_debug(runner, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("attnviz.builtin.extractor.BuiltinExtractor._extract", broken)
    result = runner.invoke(app, ["show", "hi"])
    assert result.exit_code == 1
    assert result.stderr.startswith("attnviz: error: unexpected RuntimeError: boom")
    assert "--debug" in result.stderr
    result = runner.invoke(app, ["--debug", "show", "hi"])
    assert result.exit_code == 1  # the traceback, and still the documented code
    assert "Traceback" in result.stderr and "RuntimeError: boom" in result.stderr


@pytest.mark.parametrize(
    "text",
    [
        "[bold red]not bold[/bold red] [link=http://x]x[/link]",
        "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J",
        "a\rb\bc\x00d \u202eevil",
    ],
)
@pytest.mark.parametrize("colour", ["never", "always"])
def test_text_is_data_never_markup_or_escapes(runner, text, colour):
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
            "--color",
            colour,
            "--width",
            "200",
        ],
    )
    assert result.exit_code == 0
    visible = ANSI.sub("", result.stdout)  # the only escapes allowed are our own colours
    assert "\x1b" not in visible
    assert not set(visible) & {"\r", "\b", "\x00", "\x07", "\u202e"}
    if "[bold" in text:
        assert "[" in visible and "bold" in visible and "link" in visible
        assert result.stdout.count("\x1b[1m") <= 1  # only the header line is bold
        assert "\x1b]8;" not in result.stdout  # no hyperlink was made
    if "\x1b[31m" in text:
        assert "␛" in visible
    if colour == "never":
        assert result.stdout == visible


def _completion(env: dict[str, str]) -> str:
    """What the installed `attnviz` script prints when a shell asks it for completion."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "attnviz"
    result = subprocess.run(
        [str(script)], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o default -F"),
                                               ("zsh", "#compdef attnviz"),
                                               ("fish", "complete --command attnviz")])  # fmt: skip
def test_completion_scripts_for_each_shell(shell, marker):
    script = _completion({"_ATTNVIZ_COMPLETE": f"source_{shell}"})
    assert marker in script and f"complete_{shell}" in script


def test_model_completion_offers_builtin_the_aliases_and_the_cache(runner):
    from attnviz.cli.completion import complete_model

    assert complete_model("")[:2] == ["builtin", "minilm"]
    assert complete_model("mi") == ["minilm"]
    offered = _completion(
        {"_ATTNVIZ_COMPLETE": "complete_bash", "COMP_WORDS": "attnviz show --model m",
         "COMP_CWORD": "3"}
    )  # fmt: skip
    assert offered.split() == ["minilm"]
    listed = runner.invoke(app, ["--help"]).stdout
    assert "--install-completion" in listed and "--show-completion" in listed


def test_generate_completes_only_models_that_write_and_devices_complete(tmp_path, monkeypatch):
    from attnviz.cli.completion import (
        complete_device,
        complete_device_map,
        complete_language_model,
    )
    from attnviz.pretrained import loading

    offered = complete_language_model("")
    assert "builtin" not in offered and "minilm" not in offered  # neither writes text
    assert "smollm2" in offered
    writes = {}
    for repo, architecture in (("enc", "BertModel"), ("dec", "GPT2LMHeadModel"), ("t5", None)):
        snapshot = tmp_path / f"models--org--{repo}" / "snapshots" / "0123"
        snapshot.mkdir(parents=True)
        config = {} if architecture is None else {"architectures": [architecture]}
        (snapshot / "config.json").write_text(json.dumps(config))
        writes[f"org/{repo}"] = loading._writes(tmp_path / f"models--org--{repo}")
    assert writes == {"org/enc": False, "org/dec": True, "org/t5": None}  # t5: not known
    cached = [loading.Availability(name, "cache", "/x", writes=w) for name, w in writes.items()]
    monkeypatch.setattr("attnviz.pretrained.available_models", lambda: cached)
    assert complete_language_model("org/") == ["org/dec", "org/t5"]
    assert complete_device("cu") == ["cuda", "cuda:0"]
    assert complete_device_map("bal") == ["balanced", "balanced_low_0"]


@pytest.mark.parametrize("device_map", ["bogus", "auto:1", "mps:1", "cuda:x"])
def test_a_bad_device_map_is_refused_before_loading(runner, device_map, monkeypatch):
    from attnviz.pretrained import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("loaded"))
    result = runner.invoke(app, ["show", "a b", "--model", "minilm", "--device-map", device_map])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"attnviz: error: --device-map {device_map!r}: give auto,")


def test_help_names_arguments_in_capitals_and_shows_no_bool_metavar(runner):
    for command, argument in (("show", "[TEXT]"), ("heads", "[TEXT]"), ("batch", "{INPUT}"),
                              ("render", "{SOURCE}")):  # fmt: skip
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0
        assert result.stdout.splitlines()[0].endswith(f"[OPTIONS] {argument}")
        assert "<bool>" not in result.stdout and "<str>" not in result.stdout.split("Options:")[1]


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
