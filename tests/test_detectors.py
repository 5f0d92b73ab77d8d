"""The head detectors (previous_token, duplicate_token, induction) and their probe.

Each score is held to an independent few-line implementation of TransformerLens's
``detect_head`` (error measure "mul", ``exclude_bos=True``), written from its
definition: a detection pattern of 0s and 1s, the first key's column zeroed, and
the weight on the pattern over the weight left.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnviz
from attnviz.analysis.heads import head_statistics
from attnviz.cli import app
from attnviz.errors import AttnvizError
from tests.hook_references import transformer_lens_score

DETECTORS = ("previous_token", "duplicate_token", "induction")
REPEATED = "the cat sat on the mat and the cat sat on the very very big rug"


def check_scores(maps, rows):
    held = {(row.layer, row.head): row for row in rows}
    for layer_slot, layer in enumerate(maps.layers):
        for head_slot, head in enumerate(maps.heads):
            attention = maps.weights[layer_slot, head_slot].astype(np.float64)
            for detector in DETECTORS:
                expected = transformer_lens_score(attention, maps.key_tokens, detector)
                assert getattr(held[layer, head], detector) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("mode", ["self", "masked"])
def test_builtin_scores_equal_the_reference(mode):
    maps = attnviz.extract(REPEATED, mode=mode)
    check_scores(maps, head_statistics(maps))


@pytest.mark.parametrize(("family", "mode"), [("gpt2", "masked"), ("llama", "masked"),
                                              ("bert", "self"), ("bart", "self")])  # fmt: skip
def test_pretrained_scores_block_by_block_equal_the_reference(tiny, blocks, family, mode):
    extractor = attnviz.load(tiny[family])
    maps = extractor.extract(REPEATED, mode=mode)
    table = extractor.head_statistics(REPEATED, mode=mode)
    assert blocks, "the statistics were not computed block by block"
    check_scores(maps, table.rows)


def test_scores_of_chosen_rows_sum_those_rows_only(tiny):
    extractor = attnviz.load(tiny["gpt2"])
    maps = extractor.extract(REPEATED)
    rows = [7, 8, 9, 10]
    table = extractor.head_statistics(REPEATED, rows=rows)
    kept = np.zeros_like(maps.weights)
    kept[:, :, rows] = maps.weights[:, :, rows]
    for row in table.rows:
        attention = kept[row.layer, row.head].astype(np.float64)
        expected = transformer_lens_score(attention, maps.key_tokens, "induction")
        assert row.induction == pytest.approx(expected, abs=1e-6)


def test_cross_attention_has_no_detector_scores(tiny):
    table = attnviz.load(tiny["bart"]).head_statistics("Hello I love you", target="the dog")
    assert all(row.induction is None and row.previous_token is None for row in table.rows)


def test_a_head_that_reads_only_the_first_token_scores_nothing():
    """0 / 0: all its weight is on the key the scores leave out."""
    from attnviz.analysis.products import HeadStatisticsProduct, of_whole

    weights = np.zeros((1, 4, 4), dtype=np.float32)
    weights[0, :, 0] = 1
    product = HeadStatisticsProduct(1, 4, 4, [0], aligned=True, causal=True, tokens="abab")
    assert np.isnan(of_whole(product, weights)[0, 6:9]).all()


def test_an_induction_head_built_by_hand_scores_one():
    """Each second-half row puts all its weight on the token after its first copy."""
    from attnviz.analysis.products import SLOT, HeadStatisticsProduct, of_whole

    tokens = ["<s>", "a", "b", "c", "a", "b", "c"]
    weights = np.zeros((1, 7, 7), dtype=np.float32)
    weights[0, :4, 0] = 1  # the first half reads the first token
    for row, key in ((4, 2), (5, 3), (6, 4)):  # a -> b, b -> c, c -> the a after it
        weights[0, row, key] = 1
    product = HeadStatisticsProduct(1, 7, 7, [0], aligned=True, causal=True, tokens=tokens)
    found = of_whole(product, weights)[0]
    previous_token, duplicate, induction = (
        found[SLOT[name]] for name in ("previous_token", "duplicate_token", "induction")
    )
    assert induction == pytest.approx(1.0) and duplicate == 0 and previous_token == 0


# The probe ------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_the_probe_is_random_tokens_repeated_after_the_first(tiny, family):
    extractor = attnviz.load(tiny[family])
    probe = extractor.detection_probe(length=5, seed=3)
    assert probe == extractor.detection_probe(length=5, seed=3)
    assert probe != extractor.detection_probe(length=5, seed=4)
    tokenizer = extractor.loaded.tokenizer
    ids = tokenizer(probe)["input_ids"]
    special = set(tokenizer.all_special_ids)
    assert ids[0] in special
    inner = [token for token in ids if token not in special]
    assert len(inner) == 10 and inner[:5] == inner[5:] and len(set(inner)) == 5


def test_a_vocabulary_without_enough_words_is_one_error(tiny):
    with pytest.raises(AttnvizError, match="cannot make a probe of repeated tokens"):
        attnviz.load(tiny["gpt2"]).detection_probe(length=500)


def test_the_builtin_probe_repeats_made_up_words():
    words = attnviz.load().detection_probe(length=20).split()
    assert len(words) == 40 and words[:20] == words[20:] and len(set(words)) == 20


# The command ----------------------------------------------------------------


def test_heads_detect_sorts_by_the_score_on_the_probe(runner):
    result = runner.invoke(app, ["heads", "--detect", "induction", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["probe"] == attnviz.load().detection_probe()
    scores = [row["induction"] for row in document["heads"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 8
    maps = attnviz.extract(document["probe"])
    check_scores(maps, head_statistics(maps))


def test_heads_detect_table_shows_the_detectors(runner):
    result = runner.invoke(app, ["heads", "--detect", "duplicate_token", "--top", "2"])
    assert result.exit_code == 0, result.stderr
    words = " ".join(result.stdout.split())  # the line saying what was read may wrap
    assert "the detectors' probe: 20 random tokens, repeated" in words
    assert "duplicate_" in result.stdout and "entropy" not in result.stdout
    plain = runner.invoke(app, ["heads", "the cat sat"]).stdout
    assert "induction" not in plain and "entropy" in plain
    asked = runner.invoke(app, ["heads", "the cat sat", "--sort", "induction"]).stdout
    assert "induction" in asked


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--detect", "nope"], "'nope' is not one of 'previous_token', 'duplicate_token', "
                               "'induction'"),
        (["--detect", "induction", "some text"], "--detect reads the detectors' own probe"),
        (["--detect", "induction", "--target", "x"], "--target applies to a text, not the probe"),
    ],
)  # fmt: skip
def test_heads_detect_usage_errors(runner, arguments, message):
    result = runner.invoke(app, ["heads", *arguments])
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_show_ranks_heads_by_a_detector(runner):
    result = runner.invoke(
        app, ["show", REPEATED, "--top-heads", "2", "--by", "induction", "--color", "never"]
    )
    assert result.exit_code == 0, result.stderr
    maps = attnviz.extract(REPEATED)
    best = sorted(head_statistics(maps), key=lambda row: -row.induction)[0]
    assert f"layer {best.layer} · head {best.head} · induction {best.induction:.3f}" in (
        result.stdout
    )


def test_show_and_export_draw_the_best_heads_on_the_probe(runner, tmp_path):
    shown = runner.invoke(app, ["show", "--detect", "induction", "--top-heads", "1",
                                "--color", "never"])  # fmt: skip
    assert shown.exit_code == 0, shown.stderr
    maps = attnviz.extract(attnviz.load().detection_probe())
    best = sorted(head_statistics(maps), key=lambda row: -row.induction)[0]
    assert f"layer {best.layer} · head {best.head} · induction {best.induction:.3f}" in (
        shown.stdout
    )
    picture = tmp_path / "induction.png"
    exported = runner.invoke(app, ["export", "--detect", "induction", "--top-heads", "1",
                                   "-o", str(picture)])  # fmt: skip
    assert exported.exit_code == 0, exported.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("command", [["show"], ["export", "-o", "x.png"]])
def test_show_and_export_take_a_text_or_the_probe(runner, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    neither = runner.invoke(app, command)
    assert neither.exit_code == 2
    assert neither.stderr == (
        "attnviz: error: give TEXT to look at, or --detect for the detectors' probe\n"
    )
    both = runner.invoke(app, [*command, "some text", "--detect", "induction"])
    assert both.exit_code == 2 and "--detect reads the detectors' own probe" in both.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("share", [0, 10**9])  # the pairs always, the dense masks always
@pytest.mark.parametrize("text", [REPEATED, "la la la la la la la la la la"])
def test_the_pairs_and_the_dense_masks_give_the_same_scores(tiny, monkeypatch, share, text):
    from attnviz.analysis.products import Repeats

    monkeypatch.setattr(Repeats, "DENSE_SHARE", share)
    for mode in ("self", "masked"):
        maps = attnviz.extract(text, mode=mode)
        check_scores(maps, head_statistics(maps))
    extractor = attnviz.load(tiny["gpt2"])
    check_scores(extractor.extract(text), extractor.head_statistics(text).rows)
