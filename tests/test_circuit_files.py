"""A circuit's file, trusted only as far as it is checked: `--scores` measures only the
pairs, answers, metric and intervention the file was scored on (or takes the file's own
pairs), every field is checked before anything is built, the file is read once (a pipe
too) and no larger than a limit; a faithfulness made of rounding is none; zero and mean
ablation take pairs without a corrupted text, and name themselves in every caption."""

from __future__ import annotations

import json
import os
import threading

import pytest

from attnviz.cli import app
from tests.checks import failed_in_process
from tests.circuit_references import OTHER, PAIR, THIRD
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS

TWINS = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", CORRUPT]


def _write_pairs(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _written(runner, arguments, path):
    result = runner.invoke(app, [*arguments, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    path.write_text(result.stdout, encoding="utf-8")
    return json.loads(result.stdout)


@pytest.fixture
def scored(runner, generators, tmp_path):
    """A llama circuit over two pairs, written with -f json: (its path, its document)."""
    pairs = _write_pairs(tmp_path / "pairs.jsonl", [PAIR, OTHER])
    model = ["--model", generators["llama-lm"]]
    path = tmp_path / "c.json"
    return path, _written(runner, ["circuit", "--pairs", pairs, *model, "--edges", "9"], path)


def test_the_file_keeps_its_pairs_and_a_command_without_pairs_takes_them(
    runner, generators, scored
):
    path, document = scored
    assert document["inputs"] == [PAIR, OTHER]
    again = runner.invoke(
        app,
        [
            "circuit",
            "--model",
            generators["llama-lm"],
            "--scores",
            str(path),
            "--edges",
            "9",
            "-f",
            "json",
        ],
    )
    assert again.exit_code == 0, again.stderr
    read = json.loads(again.stdout)
    assert read["inputs"] == document["inputs"] and read["pairs"] == 2
    assert read["clean_metric"] == document["clean_metric"]
    assert read["corrupt_metric"] == document["corrupt_metric"]
    assert abs(read["circuit"]["faithfulness"] - document["circuit"]["faithfulness"]) <= 1e-6


def test_scores_measured_on_other_pairs_answers_or_metrics_are_refused(
    runner, generators, scored, tmp_path
):
    path, _ = scored
    model = ["--model", generators["llama-lm"], "--scores", str(path)]
    other = _write_pairs(tmp_path / "other.jsonl", [PAIR, THIRD])
    turned = _write_pairs(tmp_path / "turned.jsonl", [OTHER, PAIR])
    plain = [
        {key: value for key, value in pair.items() if key != "versus"} for pair in (PAIR, OTHER)
    ]
    unversed = _write_pairs(tmp_path / "unversed.jsonl", plain)
    answered = _write_pairs(tmp_path / "answered.jsonl", [PAIR, {**OTHER, "answer": " he"}])
    for pairs, message in (
        (other, "was scored on other pairs: pair 2's text differs"),
        (turned, "was scored on other pairs: pair 1's text differs"),
        (unversed, "was scored by --metric logit_difference, not log_prob"),
        (answered, "pair 2's answer differs"),
    ):
        result = runner.invoke(app, ["circuit", "--pairs", pairs, *model])
        failed_in_process(result, 2, message)
    one = runner.invoke(app, ["circuit", TEXT, *TWINS, *model])
    failed_in_process(one, 2, "was scored on 2 pairs, not 1")
    twins = runner.invoke(app, ["circuit", *model, "--answer", ANSWER])
    failed_in_process(twins, 2, "each pair of --scores' file holds its answer")


def test_a_text_with_another_corrupted_twin_or_intervention_is_refused(
    runner, generators, tmp_path
):
    model = ["--model", generators["llama-lm"]]
    single = tmp_path / "one.json"
    _written(runner, ["circuit", TEXT, *model, *TWINS], single)
    twin = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", "The dog saw the man because"]
    elsewhere = runner.invoke(app, ["circuit", TEXT, *model, *twin, "--scores", str(single)])
    failed_in_process(elsewhere, 2, "was scored on other pairs: corrupt differs")
    zeroed = tmp_path / "zero.json"
    _written(runner, ["circuit", TEXT, *model, *TWINS, "--ablation", "zero"], zeroed)
    patched = runner.invoke(app, ["circuit", TEXT, *model, *TWINS, "--scores", str(zeroed)])
    failed_in_process(patched, 2, "was scored with --ablation zero, not patch")


def _changed(document, change):
    changed = json.loads(json.dumps(document))
    change(changed)
    return changed


def _nan_score(document):
    document["edges"][0]["score"] = "NAN"  # replaced by a bare NaN as the file is written


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["graph"].update(kv_heads=0), "is no model's"),
        (lambda d: d["graph"].update(kv_heads=3), "is no model's"),
        (lambda d: d["graph"].update(layers=100_000), "holds 82 of its graph's"),
        (lambda d: d["edges"].pop(), "holds 81 of its graph's 82 edges"),
        (_nan_score, "NaN is no JSON number"),
        (lambda d: d["edges"][0].update(score="INFINITY"), "Infinity is no JSON number"),
        (lambda d: d["edges"][0].update(score="1E309"), '"score" is inf, not a finite'),
        (lambda d: d.update(clean_metric="-1E400"), '"clean_metric" is -inf, not a finite'),
        (lambda d: d.update(inputs=[{"text": "a"}]), 'has no "answer" str'),
    ],
)
def test_every_field_of_a_circuit_file_is_checked_before_anything_is_built(
    runner, generators, scored, tmp_path, change, message
):
    _, document = scored
    text = json.dumps(_changed(document, change))
    bare = {'"NAN"': "NaN", '"INFINITY"': "Infinity", '"1E309"': "1e309", '"-1E400"': "-1e400"}
    for quoted, number in bare.items():
        text = text.replace(quoted, number)
    path = tmp_path / "changed.json"
    path.write_text(text, encoding="utf-8")
    result = runner.invoke(
        app, ["circuit", "--model", generators["llama-lm"], "--scores", str(path)]
    )
    failed_in_process(result, 2, message)


def test_eap_igs_file_is_taken_only_with_every_edge_scored(runner, generators, tmp_path):
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS]
    document = json.loads(runner.invoke(app, [*common, "-f", "eap-ig"]).stdout)
    count = len(document["edges"])
    for kept in (0, 3, count - 1):
        cut = dict(list(document["edges"].items())[:kept])
        path = tmp_path / f"cut{kept}.json"
        path.write_text(json.dumps({**document, "edges": cut}), encoding="utf-8")
        result = runner.invoke(app, [*common, "--scores", str(path)])
        failed_in_process(result, 2, f"holds {kept:,} of the {count:,} edges of EAP-IG's graph")


def test_a_file_past_the_size_limit_is_refused_as_it_is_read(
    runner, generators, scored, monkeypatch
):
    """/dev/zero ends nowhere: it is read to the limit and refused, never to memory's end
    (the limit made small here, so that the test reads little)."""
    import attnviz.circuits.files as circuit_files

    path, _ = scored
    monkeypatch.setattr(circuit_files, "MOST_CIRCUIT_BYTES", path.stat().st_size - 1)
    common = ["circuit", "--model", generators["llama-lm"], "--scores"]
    for name in (str(path), "/dev/zero"):
        failed_in_process(runner.invoke(app, [*common, name]), 2, "is longer than")


def test_a_circuit_file_is_read_once_so_that_a_pipe_serves(runner, generators, scored, tmp_path):
    """A FIFO gives its bytes to one reader: a second read would wait for a writer, given
    after a minute an empty one (so that the test fails, not hangs)."""
    path, document = scored
    pipe = tmp_path / "scores"
    os.mkfifo(pipe)
    opened_twice = threading.Event()

    def write() -> None:
        with open(pipe, "w", encoding="utf-8") as stream:
            stream.write(path.read_text(encoding="utf-8"))
        if not opened_twice.wait(60):
            with open(pipe, "w", encoding="utf-8"):  # the second reader, if any, reads nothing
                pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = runner.invoke(
        app, ["circuit", "--model", generators["llama-lm"], "--scores", str(pipe), "-f", "json"]
    )
    opened_twice.set()
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["clean_metric"] == document["clean_metric"]


def test_a_corruption_within_rounding_gives_no_faithfulness_and_says_so_once(runner, generators):
    """A pair whose corrupted text is its text: the two runs' metrics are equal but for
    rounding, and no fraction of rounding is a faithfulness."""
    from attnviz.circuits.circuit import ROUNDING, faithfulness_of

    clean = 0.5216812
    assert faithfulness_of(clean, clean, clean * (1 - ROUNDING / 2)) is None
    assert faithfulness_of(clean, clean, clean - 5e-7) is None  # the metrics
    assert faithfulness_of(clean, clean, clean * (1 - 4 * ROUNDING)) == pytest.approx(1.0)
    assert faithfulness_of(0.0, 0.0, 0.0) is None
    same = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", TEXT]
    for arguments in ([], ["--method", "exact"]):
        common = ["circuit", TEXT, "--model", generators["gpt2-lm"], *same, *arguments]
        result = runner.invoke(app, [*common, "--edges", "3", "--curve", "all", "-f", "json"])
        assert result.exit_code == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["circuit"]["faithfulness"] is None
        assert [point["faithfulness"] for point in document["curve"]] == [None]
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "float32 rounding" in lines[0], result.stderr


def test_zero_and_mean_ablation_take_pairs_without_twins_and_name_themselves(
    runner, generators, tmp_path
):
    untwinned = [
        {key: value for key, value in pair.items() if key != "corrupt"} for pair in (PAIR, OTHER)
    ]
    pairs = _write_pairs(tmp_path / "untwinned.jsonl", untwinned)
    common = ["circuit", "--pairs", pairs, "--model", generators["llama-lm"], "--edges", "9"]
    for ablation, carried, emptied in (
        ("mean", "its upstream node's mean output", "every edge mean-ablated"),
        ("zero", "zero", "every edge zeroed"),
    ):
        result = runner.invoke(app, [*common, "--ablation", ablation], terminal_width=200)
        assert result.exit_code == 0, result.stderr
        said = " ".join(result.stdout.split())
        assert f"when that edge alone carries {carried}" in said
        assert f"{emptied} " in said and f"every edge outside it carrying {carried}" in said
        other = "zero" if ablation == "mean" else "mean-ablated"
        assert f"every edge {other}" not in said
        svg = runner.invoke(app, [*common, "--ablation", ablation, "-o", str(tmp_path / "c.svg")])
        assert svg.exit_code == 0, svg.stderr
        drawn = " ".join((tmp_path / "c.svg").read_text(encoding="utf-8").split())
        assert f"0: {emptied})" in drawn  # the curve's, and the title's words:
        assert f"carrying {carried}" in drawn
    patched = runner.invoke(app, common)
    failed_in_process(
        patched, 2, 'line 1 has no "corrupt": each pair holds text, answer and corrupt'
    )
