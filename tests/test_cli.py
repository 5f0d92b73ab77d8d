"""The application as a whole, through typer's CliRunner: --version, --help, completion,
--debug, one line per error and warning, whichever command. (Each command's own
behaviour: tests/test_<command>.py.)"""

from __future__ import annotations

import json

import pytest

import attnviz
from attnviz.cli import app


def test_version_reads_package_metadata(runner):
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"attnviz {attnviz.__version__}\n"
    assert attnviz.__version__ != "0+unknown"


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
    import attnviz.loading
    from attnviz.pretrained import loading

    # both names of it: attnviz.loading took its own when first imported, which must not be
    # while this one is patched (later tests would load through it)
    for module in (loading, attnviz.loading):
        monkeypatch.setattr(module, "load_model", lambda *a, **k: pytest.fail("loaded"))
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


def test_each_warning_is_one_line_said_once(runner, tmp_path, monkeypatch):
    from attnviz.render import fonts
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
    monkeypatch.setattr(fonts.Fonts, "text", lambda _self, text: text)  # glyphs go missing
    source = tmp_path / "glyphs.txt"
    source.write_text("𓀀 a\n𓀀 b\n𓀀 c\n")
    batch = runner.invoke(app, ["batch", str(source), "-o", str(tmp_path / "out"), "-l", "0", "-q"])
    assert batch.exit_code == 0
    assert batch.stderr.count("no installed font has 1 of the characters (𓀀)") == 1


def test_table_and_terminal_are_one_idea_each_command_takes_either(runner):
    """show --format terminal but heads --format table: a user typed the other and was
    refused."""
    heads = runner.invoke(app, ["heads", "a b c", "-f", "terminal"], env={"COLUMNS": "120"})
    assert heads.exit_code == 0, heads.stderr
    assert heads.stdout == runner.invoke(app, ["heads", "a b c"], env={"COLUMNS": "120"}).stdout
    shown = runner.invoke(app, ["show", "a b", "-f", "table", "--width", "80"])
    drawn = runner.invoke(app, ["show", "a b", "-f", "terminal", "--width", "80"])
    assert shown.exit_code == 0 and shown.stdout == drawn.stdout and "╭" in shown.stdout
