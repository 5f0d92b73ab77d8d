"""How far a long pass has got: what the exact sweeps and the gradient passes tell a
listener, the bar a terminal's stderr shows, and the line said before a long sweep."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.cli import app
from attnviz.cli.environment import Environment
from attnviz.inputs import Input
from attnviz.pretrained import effects as effects_module
from attnviz.request import Request
from tests.hook_references import ANSWER, CORRUPT, TEXT

TERMINAL_STDERR = Environment(stdout_is_terminal=False, stderr_is_terminal=True)


def _told(extractor, request, given):
    told: list[tuple[str, int, int]] = []
    found = list(extractor.run([given], request, progress=lambda *step: told.append(step)))
    return found, told


def test_every_exact_sweep_tells_how_far_it_got(generators):
    extractor = attnviz.load(generators["gpt2-lm"])
    given = Input(TEXT, answer=ANSWER, corrupt=CORRUPT)
    _, told = _told(extractor, Request(maps=False, effects=True), given)
    heads = extractor.loaded.model.config.n_layer * extractor.loaded.model.config.n_head
    for what in ("ablation", "patch"):
        steps = [(done, total) for name, done, total in told if name == what]
        assert steps and steps[-1] == (heads, heads), (what, told)
        assert [done for done, _ in steps] == sorted({done for done, _ in steps})
    _, traced = _told(extractor, Request(maps=False, trace="resid"), given)
    cells = extractor.loaded.model.config.n_layer * 6  # layers × the text's 6 tokens
    assert traced[-1] == ("trace cell", cells, cells)


def test_a_gradient_pass_tells_each_layer_up_and_down(generators):
    extractor = attnviz.load(generators["llama-lm"])
    request = Request(maps=False, effects=True, method="gradient")
    _, told = _told(extractor, request, Input(TEXT, answer=ANSWER))
    layers = extractor.loaded.model.config.num_hidden_layers
    assert told == [("gradient pass step", step, 2 * layers) for step in range(1, 2 * layers + 1)]


def test_no_listener_no_telling(generators):
    """Without a listener a read is what it was; a listener of a finished read hears no
    more (it travels with the read alone)."""
    extractor = attnviz.load(generators["gpt2-lm"])
    request = Request(maps=False, effects=True)
    (alone,) = extractor.run([Input(TEXT, answer=ANSWER)], request)
    found, told = _told(extractor, request, Input(TEXT, answer=ANSWER))
    assert told and (found[0].effects.ablation == alone.effects.ablation).all()
    count = len(told)
    list(extractor.run([Input(TEXT, answer=ANSWER)], request))
    assert len(told) == count


def test_a_terminals_stderr_shows_a_moving_count_a_pipe_none(runner, generators):
    common = ["trace", TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER]
    common += ["--corrupt", CORRUPT, "-f", "json"]
    shown = runner.invoke(app, common, obj=TERMINAL_STDERR)
    assert shown.exit_code == 0, shown.stderr
    assert "trace cells" in shown.stderr and "/18" in shown.stderr  # 3 layers × 6 tokens
    piped = runner.invoke(app, common)
    assert piped.stderr == "" and piped.stdout == shown.stdout


def test_a_long_exact_sweep_is_said_with_what_the_estimate_would_cost(
    runner, generators, monkeypatch
):
    monkeypatch.setattr(effects_module, "LONG_REST", 0.0)
    common = ["heads", TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER, "--top", "1"]
    result = runner.invoke(app, [*common, "--rows", "last"])
    assert result.exit_code == 0, result.stderr
    assert "attnviz: warning: the exact ablation sweep runs" in result.stderr
    assert "--method gradient estimates every ablation from one forward and one backward" in (
        result.stderr
    )
    quick = runner.invoke(app, [*common, "--method", "gradient"])
    assert quick.stderr == "", quick.stderr


@pytest.mark.parametrize("seconds", [0.0])
def test_a_knockout_is_said_without_an_estimate(runner, generators, monkeypatch, seconds):
    monkeypatch.setattr(effects_module, "LONG_REST", seconds)
    common = ["heads", TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER]
    result = runner.invoke(app, [*common, "--knockout", "last:dog"])
    assert result.exit_code == 0, result.stderr
    assert "the exact knockout sweep runs" in result.stderr and "gradient" not in result.stderr


def test_a_needle_sweep_counts_its_cells_on_a_terminal(runner, generators):
    common = ["needle", "--model", generators["gemma3-lm"], "--needle", "The code is red.",
              "--question", "What is the code?", "--answer", "red", "-n", "2",
              "--lengths", "150", "--depths", "0,1"]  # fmt: skip
    shown = runner.invoke(app, common, obj=TERMINAL_STDERR)
    assert shown.exit_code == 0, shown.stderr
    assert "needle cells" in shown.stderr and "2/2" in shown.stderr
    assert "attnviz: cell 2/2" in shown.stderr
    quiet = runner.invoke(app, [*common, "-q"], obj=TERMINAL_STDERR)
    assert "needle cells" not in quiet.stderr and "attnviz: cell" not in quiet.stderr


def test_a_circuit_over_a_dataset_counts_its_pairs_in_each_pass(language_models):
    """Each pass over the pairs (scoring, measuring) says how many pairs it has done of
    all, so a bar over the whole run is honest where each pair's own passes restart."""
    from tests.circuit_references import OTHER, PAIR

    told = []
    language_models["llama-lm"].circuit(
        pairs=[PAIR, OTHER], edges=5, progress=lambda *said: told.append(said)
    )
    pairs = [said for said in told if said[0].endswith("pair")]
    assert pairs == [("scored pair", 1, 2), ("scored pair", 2, 2),
                     ("measured pair", 1, 2), ("measured pair", 2, 2)]  # fmt: skip


def test_a_bar_names_its_steps_in_the_plural():
    from attnviz.progress_bars import plural

    assert [plural(what) for what in ("patch", "gradient pass", "edge", "scored pair")] == [
        "patches", "gradient passes", "edges", "scored pairs"
    ]  # fmt: skip


def test_circuit_from_python_shows_bars_where_a_person_watches_unless_told_not_to(
    language_models, monkeypatch, capsys
):
    """In a terminal or a notebook Extractor.circuit draws its bars (progress=True, the
    default); progress=False, or a log's stderr, draws none."""
    import contextlib

    import attnviz.extractor as readings_module

    drawn = []

    @contextlib.contextmanager
    def bars():
        yield lambda *said: drawn.append(said)

    monkeypatch.setattr(readings_module, "bars", bars)
    extractor = language_models["llama-lm"]
    for watched, progress, shown in (
        (True, True, True),
        (True, False, False),
        (False, True, False),
    ):
        drawn.clear()
        monkeypatch.setattr(readings_module, "shown_here", lambda watched=watched: watched)
        extractor.circuit(TEXT, ANSWER, CORRUPT, edges=5, progress=progress)
        assert bool(drawn) == shown, (watched, progress)
        assert ("scored pair", 1, 1) in drawn or not shown
    assert capsys.readouterr().err == ""


def test_the_training_bar_shows_its_loss_and_a_plain_listener_hears_the_steps(language_models):
    """--method optimize notes its loss as it trains: the bars show it beside the steps;
    a listener without ``noted`` is told the steps alone."""
    import io

    from rich.console import Console

    from attnviz.progress import advance, note, reporting
    from attnviz.progress_bars import bars
    from tests.circuit_references import OTHER, PAIR

    told = []
    language_models["llama-lm"].circuit(
        pairs=[PAIR, OTHER], method="optimize", train_steps=3, edges=5,
        progress=lambda *said: told.append(said),
    )  # fmt: skip
    assert [said for said in told if said[0] == "training step"] == [
        ("training step", step, 3) for step in (1, 2, 3)
    ]
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with bars(console) as listener, reporting(listener):
        advance("training step", 1, 3)
        note("training step", "loss 0.25")
        (task,) = listener.progress.tasks
        assert task.description == "training steps · loss 0.25"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_now_and_then_its_time_left_re_made_at_the_pace_so_far():
    """stderr no terminal: a line every 30 s at most, of the pass with the most time left
    (the pairs, not one pair's inner passes), its time left at its own pace since its
    first news, so that a load which comes or goes moves it; a line as a long pass ends."""
    from attnviz.progress_bars import Lines

    clock, written = _Clock(), []
    lines = Lines(written.append, clock, every=30.0)
    for second, step in ((5, 1), (10, 2), (20, 3)):  # an inner pass, then a pair's
        clock.now = second
        lines("gradient pass", step, 3)
    clock.now = 20.0
    lines("scored pair", 1, 61)
    assert written == []  # not 30 s yet
    clock.now = 40.0
    lines("scored pair", 2, 61)  # 20 s a pair: 59 pairs left
    lines("gradient pass", 1, 3)
    assert written == ["attnviz: scored pairs: 2 of 61, about 1,180 s left"]
    clock.now = 60.0
    lines("scored pair", 12, 61)  # the load went: 4 s a pair since the first
    assert written[-1:] == ["attnviz: scored pairs: 2 of 61, about 1,180 s left"]  # 20 s
    clock.now = 71.0
    lines("scored pair", 18, 61)
    assert written[-1] == "attnviz: scored pairs: 18 of 61, about 129 s left"
    lines("gradient pass", 3, 3)  # 31 s since its first news: said as it ends
    assert written[-1] == "attnviz: gradient passes: 3 of 3, done"
    clock.now = 200.0
    lines("scored pair", 61, 61)
    assert written[-1] == "attnviz: scored pairs: 61 of 61, done"
    clock.now = 300.0
    lines.noted("training step", "loss 0.5")
    lines("training step", 1, 10)
    assert written[-1] == "attnviz: training steps: 1 of 10 · loss 0.5"
    clock.now = 301.0
    lines("training step", 10, 10)  # a pass that ended within 30 s of its first news
    assert len(written) == 5


def test_a_long_circuit_writes_lines_to_a_log(runner, generators, monkeypatch, tmp_path):
    import json

    import attnviz.progress_bars as bars_module
    from tests.circuit_references import OTHER, PAIR, THIRD

    monkeypatch.setattr(bars_module, "LINE_EVERY", 0.0)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(pair) + "\n" for pair in (PAIR, OTHER, THIRD)))
    common = ["circuit", "--pairs", str(pairs), "--model", generators["gpt2-lm"], "-f", "json"]
    logged = runner.invoke(app, common)
    assert logged.exit_code == 0, logged.stderr
    lines = logged.stderr.splitlines()
    assert any(line.startswith("attnviz: scored pairs: 2 of 3, about ") for line in lines)
    assert "attnviz: scored pairs: 3 of 3, done" in lines
    assert "attnviz: measured pairs: 3 of 3, done" in lines
    assert all(line.startswith("attnviz: ") for line in lines)
    shown = runner.invoke(app, common, obj=TERMINAL_STDERR)  # a terminal gets bars instead
    assert shown.exit_code == 0 and "scored pairs: 2 of 3, about" not in shown.stderr
