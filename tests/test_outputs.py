"""The output registry: each output declared once with its suffixes and views, each
presentation option with the outputs it applies to, and the commands held to it."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

import attnviz
from attnviz.choices import Output, View
from attnviz.cli.app import app
from attnviz.cli.environment import Environment
from attnviz.errors import UsageError
from attnviz.outputs import (
    OUTPUTS,
    PICTURE_VIEWS,
    PICTURES,
    TERMINAL_VIEWS,
    Kind,
    describe,
    output_for,
    output_of_file,
    refuse_inapplicable,
    scope_of,
    view_for,
)


def test_every_output_is_declared_once_and_no_suffix_names_two():
    assert set(OUTPUTS) == set(Output)
    suffixes = [suffix for spec in OUTPUTS.values() for suffix in spec.suffixes]
    assert len(suffixes) == len(set(suffixes))
    for output, spec in OUTPUTS.items():
        for suffix in spec.suffixes:
            assert output_for(f"some/Name{suffix.upper()}") is output
    assert output_for("maps.gif") is None and output_for("maps") is None


def test_every_view_is_drawn_somewhere_and_the_terminal_shares_none():
    drawn = {view for spec in OUTPUTS.values() for view in spec.views}
    assert drawn == set(View)
    assert not set(TERMINAL_VIEWS) & set(PICTURE_VIEWS)
    assert all(not spec.views for spec in OUTPUTS.values() if spec.kind is Kind.DATA)


def test_the_page_names_its_views_as_the_pictures_do():
    page = resources.files("attnviz.render").joinpath("page_assets", "page.html").read_text()
    views = re.findall(r'data-view="(\w+)"', page)
    # the maps' views, then the circuit's (shown where a corrupted text gave a circuit)
    assert views == ["layer", "model", "head", "circuit"]
    assert set(views[:-1]) == {view.value for view in PICTURE_VIEWS}


def test_a_view_an_output_does_not_draw_is_refused_naming_those_it_does():
    assert view_for("layer", Output.HTML) is View.LAYER
    with pytest.raises(UsageError, match="unknown view 'grid': choose one of head, layer, model"):
        view_for("grid", Output.PNG)


def test_a_file_named_for_no_allowed_output_names_the_suffixes_that_are():
    assert output_of_file("fig.PDF", PICTURES) is Output.PDF
    with pytest.raises(UsageError, match=r"name it \.png, \.svg or \.pdf$"):
        output_of_file("fig.html", PICTURES)


@pytest.mark.parametrize("flag", ["--color always", "--width", "--values", "--top-heads",
                                  "--label-positions", "--cmap", "--dpi", "--vmax", "--figsize",
                                  "--font-size", "--title", "--no-title", "--dtype float16",
                                  "--view grid", "--view head"])  # fmt: skip
def test_an_option_is_refused_exactly_where_it_does_nothing(flag):
    scope = scope_of(flag)
    for output in Output:
        if output in scope.outputs:
            refuse_inapplicable([flag], [output])
            continue
        with pytest.raises(UsageError) as refused:
            refuse_inapplicable([flag], [output])
        assert str(refused.value).startswith(f"{flag} applies to {describe(scope.outputs)}, not ")
    refuse_inapplicable([flag], list(Output))  # applies to one of several: not refused


def test_several_outputs_are_named_together():
    assert describe(PICTURES) == "png, svg and pdf pictures"
    assert describe([Output.JSON, Output.NPZ]) == "json and npz output"
    assert describe([Output.TERMINAL, Output.SVG]) == "the terminal picture and an svg picture"


SHOW_OPTIONS = {
    "--color always": ["--color", "always"],
    "--width": ["--width", "60"],
    "--values": ["--values"],
    "--top-heads": ["--top-heads", "2"],
    "--label-positions": ["--label-positions"],
    "--dtype float16": ["--dtype", "float16"],
    "--view grid": ["--view", "grid"],
}
SHOW_FORMATS = [
    Output.TERMINAL, Output.JSON, Output.NDJSON, Output.NPZ, Output.CSV,
    Output.HTML, Output.PNG, Output.SVG, Output.PDF,
]  # fmt: skip


@pytest.mark.parametrize("flag", SHOW_OPTIONS)
def test_show_refuses_every_option_given_for_an_output_it_does_not_apply_to(runner, tmp_path, flag):
    """The table is what the command obeys: each refusal one line, exit 2, nothing written."""
    refused = [output for output in SHOW_FORMATS if output not in scope_of(flag).outputs]
    assert refused
    for output in refused:
        file = OUTPUTS[output].suffixes  # data and pictures go to a file, if anywhere
        target = ["-o", str(tmp_path / f"maps.{output.value}")] if file else []
        arguments = ["show", "a b c", "-f", output.value, *target, *SHOW_OPTIONS[flag]]
        result = runner.invoke(app, arguments)
        assert result.exit_code == 2, (arguments, result.stderr)
        assert result.stdout == "" and f"{flag} applies to" in result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_render_refuses_what_it_dropped_before(runner, tmp_path):
    """--title in the terminal and --color or --width with -o did nothing, unsaid."""
    saved = tmp_path / "maps.json"
    assert runner.invoke(app, ["show", "a b", "-o", str(saved)]).exit_code == 0
    picture = str(tmp_path / "maps.png")
    cases = [
        (["--title", "T"], "--title applies to png, svg and pdf pictures and the interactive"),
        (["-o", picture, "--color", "never"], "--color never applies to the terminal picture"),
        (["-o", picture, "--width", "50"], "--width applies to the terminal picture, not a png"),
    ]
    for arguments, message in cases:
        result = runner.invoke(app, ["render", str(saved), *arguments])
        assert result.exit_code == 2 and result.stdout == "", result.stderr
        assert message in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["maps.json"]


def test_values_applies_only_to_views_that_draw_a_whole_map():
    """Numbers are printed in one map (a picture's head view, the terminal's panels);
    in the grid views they were dropped unsaid."""
    for output, view in [(Output.PNG, View.HEAD), (Output.TERMINAL, View.PANELS),
                         (Output.TERMINAL, View.AUTO), (Output.JSON, View.MODEL)]:  # fmt: skip
        if output in scope_of("--values").outputs:
            refuse_inapplicable(["--values"], [output], view)
    for output, view in [(Output.PNG, View.MODEL), (Output.SVG, View.LAYER),
                         (Output.TERMINAL, View.GRID)]:  # fmt: skip
        with pytest.raises(UsageError, match=f"--values applies to the panels and head views, "
                                             f"not the {view} view: "):  # fmt: skip
            refuse_inapplicable(["--values"], [output], view)
    # A batch writing data beside its pictures: --values still does nothing in the model view.
    with pytest.raises(UsageError, match="not the model view"):
        refuse_inapplicable(["--values"], [Output.JSON, Output.PNG], View.MODEL)
    refuse_inapplicable(["--values"], [Output.JSON, Output.PNG], View.HEAD)


def test_every_command_refuses_values_where_its_picture_has_no_numbers(runner, tmp_path):
    saved = tmp_path / "maps.json"
    assert runner.invoke(app, ["show", "a b", "-o", str(saved)]).exit_code == 0
    sentences = tmp_path / "in.txt"
    sentences.write_text("a b\n")
    picture = str(tmp_path / "maps.png")
    commands = [
        ["show", "a b", "--view", "grid"],
        ["show", "a b", "-f", "png", "-o", picture],
        ["export", "a b", "-o", picture],
        ["export", "a b", "-o", picture, "--view", "layer", "--layer", "0"],
        ["render", str(saved), "-o", picture],
        ["render", str(saved), "--view", "grid"],
        ["batch", str(sentences), "-o", str(tmp_path / "out"), "-f", "png", "--view", "model"],
    ]
    for arguments in commands:
        result = runner.invoke(app, [*arguments, "--values"])
        assert result.exit_code == 2 and result.stdout == "", (arguments, result.stderr)
        assert "--values applies to the panels and head views, not the " in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "maps.json"]


def test_values_prints_numbers_in_a_head_picture_and_says_when_a_map_is_too_large(runner, tmp_path):
    one = ["--view", "head", "--layer", "0", "--head", "0"]
    plain, numbered = tmp_path / "plain.svg", tmp_path / "numbered.svg"
    assert runner.invoke(app, ["export", "a b", "-o", str(plain), *one]).exit_code == 0
    result = runner.invoke(app, ["export", "a b", "-o", str(numbered), *one, "--values"])
    assert result.exit_code == 0 and result.stderr == ""
    assert numbered.read_bytes() != plain.read_bytes()
    long_input = " ".join(["word"] * 20)
    result = runner.invoke(app, ["export", long_input, "-o", str(plain), *one, "--values"])
    assert result.exit_code == 0
    assert "--values: a 20 × 20 map is drawn without numbers" in result.stderr


def test_the_grid_the_terminal_falls_back_to_says_it_has_no_numbers(runner, monkeypatch):

    monkeypatch.setenv("LINES", "10")  # the panels do not fit: auto draws the grid
    arguments = ["show", "Hello I love you", "--width", "120", "--color", "never"]
    terminal = Environment(stdout_is_terminal=True, stderr_is_terminal=False)
    plain = runner.invoke(app, arguments, obj=terminal)
    numbered = runner.invoke(app, [*arguments, "--values"], obj=terminal)
    assert plain.exit_code == numbered.exit_code == 0
    assert "╭" not in numbered.stdout and "--values" not in plain.stdout
    note = "--values: thumbnails have no numbers (--view panels prints them)"
    assert numbered.stdout.replace(note + "\n", "") == plain.stdout


def test_picture_styling_where_no_picture_file_is_drawn_is_refused(runner, tmp_path):
    """--cmap, --dpi, --figsize, --font-size, --vmax and (but in the terminal) --values
    were dropped unsaid for the page, the terminal and data; so were batch's
    --label-positions for data only and --dtype for pictures only."""
    saved, source = tmp_path / "maps.json", tmp_path / "in.txt"
    saved.write_text(json.dumps(attnviz.extract("a b").to_dict()))
    source.write_text("a b\n")
    page = str(tmp_path / "x.html")
    cases = [
        (["export", "a b", "-o", page, "--cmap", "magma"], "--cmap applies to png, svg and pdf"
         " pictures, not the interactive page: leave it out"),
        (["render", saved, "-o", page, "--figsize", "4x3", "--dpi", "200"], "--dpi applies to"),
        (["render", saved, "--font-size", "9", "--values"], "--font-size applies to png, svg and"
         " pdf pictures, not the terminal picture"),
        (["batch", source, "-o", tmp_path / "out", "-f", "json", "-f", "html", "--vmax", "0.5"],
         "--vmax applies to png, svg and pdf pictures, not json output and the interactive page"),
        (["batch", source, "-o", tmp_path / "out", "-f", "npz", "--label-positions"],
         "--label-positions applies to the terminal picture, csv output, png, svg and pdf "
         "pictures and the interactive page, not npz output"),
        (["batch", source, "-o", tmp_path / "out", "-f", "svg", "--dtype", "float16"],
         "--dtype float16 applies to data (json, ndjson, npz, csv), not an svg picture"),
    ]  # fmt: skip
    for arguments, message in cases:
        result = runner.invoke(app, [str(argument) for argument in arguments])
        assert result.exit_code == 2 and result.stdout == "", result.stderr
        assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "maps.json"]
    titled = runner.invoke(app, ["export", "a b", "-o", page, "--title", "T"])
    assert titled.exit_code == 0 and "T" in (tmp_path / "x.html").read_text()
    valued = runner.invoke(app, ["render", str(saved), "--values", "-l", "0", "--head", "0"])
    assert valued.exit_code == 0 and "layer 0 · head 0" in valued.stdout


def test_every_output_that_is_written_names_a_writer_and_the_rest_are_refused():
    """The registry writes: each data, picture and page output names its writer in
    attnviz.writers; the terminal, the table and another tool's file (written by their
    commands) have none, and asking to write maps as them is an error, never a default
    format."""
    import attnviz
    from attnviz import writers
    from attnviz.outputs import OUTPUTS, Kind

    maps = attnviz.extract("a b")
    for output, spec in OUTPUTS.items():
        if spec.kind in (Kind.TERMINAL, Kind.TABLE, Kind.FOREIGN):
            assert spec.writer is None
            with pytest.raises(ValueError, match="no writer"):
                list(writers.pieces(maps, output, writers.Rendering()))
        else:
            assert callable(getattr(writers, spec.writer)), output
            ((suffix, _),) = writers.pieces(maps, output, writers.Rendering())
            assert suffix == ""


@pytest.mark.parametrize("output", ["json", "npz", "png", "html"])
def test_a_file_that_holds_one_input_refuses_a_second_before_writing(tmp_path, output):
    import attnviz
    from attnviz.errors import UsageError
    from attnviz.writers import write

    maps = attnviz.extract("a b")
    path = tmp_path / f"maps.{output}"
    with pytest.raises(UsageError, match="several"):
        write([maps, maps], Output(output), path)
    assert list(tmp_path.iterdir()) == []


def test_a_bundles_options_are_declared_on_its_fields():
    """An option of a bundle is its field: the default, the flag and what was given away
    from the default all come from the one declaration."""
    from attnviz.cli.engine import EngineSettings
    from attnviz.cli.pictures import PictureSettings
    from attnviz.errors import UsageError

    assert PictureSettings().given() == []
    assert PictureSettings(cmap="magma", font_size=9.0, no_title=True).given() == [
        "--cmap",
        "--font-size",
        "--no-title",
    ]
    with pytest.raises(UsageError, match="--num-cpus-per-worker applies to --engine ray only"):
        EngineSettings(cpus_per_worker=2).check()
