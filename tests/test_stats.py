"""attnviz stats: corpus statistics equal the per-input ones, merge exactly, stay bounded."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnviz
from attnviz.analysis.corpus import STATISTICS, CorpusStatistics, Running
from attnviz.analysis.heads import head_statistics
from attnviz.cli import app

TEXTS = [
    "The man walked the dog",
    "Hello I love you",
    "attention is all you need",
    "the cat sat on the mat because it was warm",
    "a b",
]


def test_corpus_means_equal_the_mean_of_heads_over_the_same_inputs():
    extractor = attnviz.load()
    corpus = CorpusStatistics().add_all(
        found.statistics for found in extractor.run(TEXTS, statistics=True, maps=False)
    )
    per_input = [head_statistics(extractor.extract(text)) for text in TEXTS]
    rows = {(row["layer"], row["head"], row["statistic"]): row for row in corpus.rows()}
    unasked = ("span", "ablation", "dla", "patch")  # no span, no answer
    assert corpus.statistics() == [name for name in STATISTICS if name not in unasked]
    for name in corpus.statistics():
        for position in range(len(per_input[0])):
            values = [getattr(stats[position], name) for stats in per_input]
            layer, head = per_input[0][position].layer, per_input[0][position].head
            row = rows[(layer, head, name)]
            assert row["count"] == len(TEXTS)
            assert row["mean"] == pytest.approx(np.mean(values), abs=1e-12)
            assert row["std"] == pytest.approx(np.std(values), abs=1e-12)
            for quantile in (5, 50, 95):  # exact over a few inputs
                found = row[f"p{quantile:02d}"]
                assert found == pytest.approx(np.percentile(values, quantile), abs=1e-12)


def test_quantiles_are_exact_over_few_values_and_sketched_past_them():
    """Over 1 and 3 the sketch's 95th percentile was 1, below their mean."""
    from attnviz.analysis.corpus import EXACT_UP_TO, Cell

    few, left, right = Cell(), Cell(), Cell()
    for value in (1.0, 3.0):
        few.add(value)
    assert [few.quantile(q) for q in (0.05, 0.5, 0.95)] == pytest.approx([1.1, 2.0, 2.9])
    values = np.random.default_rng(0).lognormal(size=EXACT_UP_TO + 50)
    for value in values[:60]:
        left.add(float(value))
    for value in values[60:EXACT_UP_TO]:
        right.add(float(value))
    left.merge(right)  # EXACT_UP_TO values: still exact
    assert left.quantile(0.95) == pytest.approx(np.percentile(values[:EXACT_UP_TO], 95))
    for value in values[EXACT_UP_TO:]:
        left.add(float(value))
    assert left.values is None  # the sketch's now, within its accuracy
    nearest = min(abs(left.quantile(0.5) - value) / value for value in values)
    assert nearest <= 0.011


def test_halves_merge_into_the_whole():
    extractor = attnviz.load()
    whole = CorpusStatistics().add_all(
        found.statistics for found in extractor.run(TEXTS, statistics=True, maps=False)
    )
    first = CorpusStatistics().add_all(
        found.statistics for found in extractor.run(TEXTS[:2], statistics=True, maps=False)
    )
    second = CorpusStatistics().add_all(
        found.statistics for found in extractor.run(TEXTS[2:], statistics=True, maps=False)
    )
    first.merge(second)
    assert first.inputs == whole.inputs
    for merged, alone in zip(first.rows(), whole.rows(), strict=True):
        assert merged["count"] == alone["count"]
        assert merged["mean"] == pytest.approx(alone["mean"], abs=1e-12)
        assert merged["std"] == pytest.approx(alone["std"], abs=1e-12)


def test_running_merge_is_chan_s_formula():
    values = np.random.default_rng(0).normal(size=101)
    left, right, whole = Running(), Running(), Running()
    for value in values[:40]:
        left.add(value)
    for value in values[40:]:
        right.add(value)
    for value in values:
        whole.add(value)
    left.merge(right)
    assert left.count == 101
    assert left.mean == pytest.approx(values.mean(), abs=1e-12)
    assert left.std == pytest.approx(values.std(), abs=1e-12) == pytest.approx(whole.std)


@pytest.mark.slow
def test_memory_is_bounded_by_the_heads_not_the_inputs():
    corpus = CorpusStatistics()
    extractor = attnviz.load()
    for table in (
        found.statistics for found in extractor.run(TEXTS * 20, statistics=True, maps=False)
    ):
        corpus.add(table)
    assert corpus.inputs == 100
    assert len(corpus.cells) == 2 * 4 * (len(STATISTICS) - 4)  # no span, no answer asked for
    assert all(cell.running.count == 100 for cell in corpus.cells.values())


@pytest.mark.slow
def test_stats_through_the_cli(runner, tmp_path):
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(TEXTS[:3]) + "\n\nmore words here\n")
    picture = tmp_path / "stats.png"
    result = runner.invoke(
        app, ["stats", str(source), "-f", "json", "--limit", "3", "--picture", str(picture)]
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["inputs"] == 3 and document["schema_version"] == attnviz.SCHEMA_VERSION
    assert {row["statistic"] for row in document["heads"]} == set(STATISTICS) - {
        "span",
        "ablation",
        "dla",
        "patch",
    }
    assert picture.read_bytes().startswith(b"\x89PNG")
    everything = runner.invoke(app, ["stats", str(source), "-f", "csv"])
    assert everything.exit_code == 0
    assert "attnviz: 4 inputs, 1 blank line skipped in" in everything.stderr
    assert everything.stdout.startswith("layer,head,statistic,count,mean,std,p05,p50,p95")
    table = runner.invoke(app, ["stats", str(source), "--layer", "1", "-q"])
    assert table.exit_code == 0 and table.stderr == ""
    assert "entropy" in table.stdout and "detector scores" in table.stdout


def test_stats_reads_the_rows_asked_for_and_scores_the_span(runner, tmp_path):
    """--rows and --span as heads takes them: each input's statistics from its own last
    row, and the span statistic, averaged over the corpus."""
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    arguments = ["stats", str(source), "-f", "json", "-q", "--rows", "last", "--span", "0"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    rows = {(r["layer"], r["head"], r["statistic"]): r for r in json.loads(result.stdout)["heads"]}
    per_input = [head_statistics(attnviz.extract(text, rows="last", span="0")) for text in TEXTS]
    for name in ("entropy", "span", "self"):
        for position, first in enumerate(per_input[0]):
            values = [getattr(stats[position], name) for stats in per_input]
            mean = rows[(first.layer, first.head, name)]["mean"]
            assert mean == pytest.approx(np.mean(values), abs=1e-6)
    table = runner.invoke(app, [*arguments[:2], "--span", "0"])
    assert table.exit_code == 0 and " span " in table.stdout.splitlines()[2]
    picture = tmp_path / "stats.png"
    drawn = runner.invoke(app, [*arguments, "--picture", str(picture)])
    assert drawn.exit_code == 0 and picture.read_bytes().startswith(b"\x89PNG")  # ten panels


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_statistics_table_fits_the_width_and_shows_the_spread_where_it_fits(
    runner, tmp_path, width
):
    from rich.cells import cell_len

    source = tmp_path / "corpus.txt"
    source.write_text("the cat sat\non the mat\nit was warm\n")
    result = runner.invoke(app, ["stats", str(source), "-q"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= width
    assert "…" not in result.stdout  # no number or name cut short
    rows = [line for line in lines if re.match(r"\s*\d+\s+\d+\s", line)]
    assert len(rows) == 2 * 2 * 4  # both tables: a row per layer × head
    statistics, detectors = rows[:8], rows[8:]
    assert all(("±" in row) == (width >= 14 + 6 * 15) for row in statistics)
    assert all("±" in row for row in detectors)
    spread_hidden = width < 14 + 6 * 15
    assert ("-f json or -f csv" in result.stdout) == spread_hidden


@pytest.mark.slow
@pytest.mark.parametrize(("name", "extra"), [("stats.json", []), ("stats.txt", ["-f", "csv"])])
def test_stats_writes_to_a_file_what_it_writes_to_stdout(runner, tmp_path, name, extra):
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(TEXTS[:3]) + "\n")
    target = tmp_path / name
    kind = extra or ["-f", "json"]
    written = runner.invoke(app, ["stats", str(source), "-q", "-o", str(target), *extra])
    assert written.exit_code == 0, written.stderr
    assert written.stdout == ""
    shown = runner.invoke(app, ["stats", str(source), "-q", *kind])
    assert target.read_text() == shown.stdout


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["-o", "{tmp}/missing/stats.json"], 1, "folder {tmp}/missing does not exist"),
        (["--picture", "{tmp}/missing/stats.png"], 1, "folder {tmp}/missing does not exist"),
        (["-o", "{tmp}/stats.png"], 2, "draw the picture with --picture"),
        (["-o", "{tmp}/stats.txt"], 2, "name it .json or .csv"),
        (["-o", "{tmp}/stats.csv", "-f", "json"], 2, "disagree: pick one"),
    ],
)
def test_stats_refuses_an_output_it_cannot_write_before_any_work(
    runner, tmp_path, monkeypatch, arguments, code, message
):
    from attnviz.cli.settings import Job

    def no_model(*_arguments, **_keywords):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(Job, "open", no_model)
    source = tmp_path / "corpus.txt"
    source.write_text("a few words\n")
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    result = runner.invoke(app, ["stats", str(source), *arguments])
    assert result.exit_code == code, result.stderr
    assert message.replace("{tmp}", str(tmp_path)) in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]


def test_stats_of_nothing_is_a_usage_error(runner, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    result = runner.invoke(app, ["stats", str(empty)])
    assert result.exit_code == 2
    assert result.stderr == f"attnviz: error: {empty} holds no input to compute statistics over\n"
    unreadable = tmp_path / "bad.jsonl"
    unreadable.write_text('{"text": 5}\nnot json\n')
    result = runner.invoke(app, ["stats", str(unreadable)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert 'over: line 1 has no "text" string (and 1 more line)' in result.stderr


def test_unreadable_lines_are_skipped_with_a_warning_that_says_why(runner, tmp_path):
    source = tmp_path / "mixed.jsonl"
    source.write_text('{"text": "a b"}\n{"text": 5}\n\nnot json\n{"text": "c d"}\n')
    result = runner.invoke(app, ["stats", str(source), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["inputs"] == 2
    warning, summary = result.stderr.splitlines()
    assert warning == (
        'attnviz: warning: skipped what could not be read: line 2 has no "text" string'
        " (and 1 more line)"
    )
    assert summary.startswith("attnviz: 2 inputs, 1 blank line skipped, 2 unreadable skipped in")


def test_inputs_the_model_cannot_read_are_left_out_and_the_rest_go_on(runner, tiny, tmp_path):
    source = tmp_path / "corpus.jsonl"
    good = [json.dumps({"text": f"the cat sat {i}"}) for i in range(5)]
    bad = [
        json.dumps({"text": "a b", "pair": ""}),  # an empty sentence B
        json.dumps({"text": "a b", "target": "c d"}),  # a target an encoder has no use for
        '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}",  # deeper than Python reads
    ]
    source.write_text("\n".join([*good[:2], *bad, *good[2:]]) + "\n")
    command = ["stats", str(source), "--model", tiny["bert"], "-f", "json", "--batch-size", "4"]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["inputs"] == 5
    warning, summary = result.stderr.splitlines()
    # the empty sentence B is refused as its line is read, before the model sees it
    assert warning.startswith("attnviz: warning: skipped what could not be read: line 3: the pair")
    assert warning.endswith("(and 2 more lines)")
    assert "5 inputs, 3 unreadable skipped" in summary
    alone = runner.invoke(app, [*command, "--batch-size", "1"])  # no pass fails whole
    rows, rows_alone = (json.loads(out.stdout)["heads"] for out in (result, alone))
    assert [row["count"] for row in rows] == [row["count"] for row in rows_alone]
    means, means_alone = ([row["mean"] for row in table] for table in (rows, rows_alone))
    np.testing.assert_allclose(means, means_alone, rtol=1e-5, atol=1e-7)


ANSWERED = [
    {"text": "The man walked the dog because", "answer": " it"},
    {"text": "Hello I love you"},  # statistics only
    {"text": "the cat sat on the", "answer": " mat"},
]


def _stats_rows(runner, model: str, items: list[dict], folder) -> dict:
    """``stats`` over ``items`` as a JSONL file: its rows by (layer, head, statistic)."""
    source = folder / "inputs.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in items))
    result = runner.invoke(app, ["stats", str(source), "--model", model, "-f", "json", "-q"])
    assert result.exit_code == 0, result.stderr
    return {(r["layer"], r["head"], r["statistic"]): r for r in json.loads(result.stdout)["heads"]}


def test_stats_averages_each_heads_effects_over_the_inputs_with_an_answer(
    runner, generators, tmp_path
):
    model = generators["gpt2-lm"]
    rows = _stats_rows(runner, model, ANSWERED, tmp_path)
    extractor = attnviz.load(model)
    answered = [item for item in ANSWERED if "answer" in item]
    effects = [extractor.head_effects(item["text"], item["answer"]) for item in answered]
    for layer in effects[0].layers:
        for head in effects[0].heads:
            for name in ("ablation", "dla"):
                values = [found.of(layer, head)[name] for found in effects]
                row = rows[(layer, head, name)]
                assert row["count"] == 2
                assert row["mean"] == pytest.approx(np.mean(values), abs=1e-6)
            assert rows[(layer, head, "entropy")]["count"] == 3


PATCHED = [
    {"text": "The man walked the dog because", "answer": " it", "versus": " the",
     "corrupt": "The dog walked the man because"},
    {"text": "The man saw the dog because", "answer": " it", "versus": " the"},  # no twin
    {"text": "The man saw the dog because", "answer": " it", "versus": " the",
     "corrupt": "The dog saw the man because"},
]  # fmt: skip


def test_stats_averages_each_heads_patch_over_the_inputs_with_a_corrupted_twin(
    runner, generators, tmp_path
):
    model = generators["llama-lm"]
    rows = _stats_rows(runner, model, PATCHED, tmp_path)
    extractor = attnviz.load(model)
    effects = [
        extractor.head_effects(item["text"], item["answer"], versus=item["versus"],
                               corrupt=item.get("corrupt"))
        for item in PATCHED
    ]  # fmt: skip
    for layer in effects[0].layers:
        for head in effects[0].heads:
            patched = [
                found.of(layer, head)["patch"] for found in effects if found.patch is not None
            ]
            assert rows[(layer, head, "patch")]["count"] == 2
            assert rows[(layer, head, "patch")]["mean"] == pytest.approx(np.mean(patched), abs=1e-6)
            ablation = [found.of(layer, head)["ablation"] for found in effects]
            assert rows[(layer, head, "ablation")]["mean"] == pytest.approx(
                np.mean(ablation), abs=1e-6
            )


def test_an_answer_the_model_cannot_read_skips_its_input(runner, tiny, tmp_path):
    source = tmp_path / "answers.jsonl"
    lines = [*ANSWERED, {"text": "x", "answer": 3}, {"text": "y", "answer": " "}]
    source.write_text("".join(json.dumps(item) + "\n" for item in lines))
    encoder = runner.invoke(app, ["stats", str(source), "--model", tiny["bert"], "-f", "json"])
    assert encoder.exit_code == 0, encoder.stderr
    document = json.loads(encoder.stdout)
    assert document["inputs"] == 1  # only the input without an answer
    assert 'line 4: "answer" must be a string' in encoder.stderr  # the first one read
    assert "4 unreadable skipped" in encoder.stderr  # two answers, a number and a blank
    none = tmp_path / "none.jsonl"
    none.write_text(json.dumps(ANSWERED[0]) + "\n")
    refused = runner.invoke(app, ["stats", str(none), "--model", tiny["bert"]])
    assert refused.exit_code == 2 and "is an encoder model" in refused.stderr
