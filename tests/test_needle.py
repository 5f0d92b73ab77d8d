"""attnviz needle: prompts of exactly the lengths asked for, each head's row read while
the model writes equal to its eager attention's, retrieval scores as their definition
says, and bad sweeps refused before a model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

import attnviz
from attnviz.cli import app
from attnviz.needle import Needle, Sweep, parse_depths, parse_lengths, retrieval_scores
from attnviz.pretrained.needle import Haystack, default_haystack, read_while_writing
from tests.checks import failed_in_process
from tests.hook_references import reference_retrieval

# The tiny models' tokenizers spell words in a few letters each: a short needle fits.
NEEDLE = Needle("The code is red.", "What is the code?", "red")  # (no digits in them)
SHORT = Sweep((150, 220), (0.0, 0.5, 1.0), NEEDLE, max_new_tokens=4)
TINY_NEEDLE = ["--needle", NEEDLE.needle, "--question", NEEDLE.question, "--answer", "red"]
SENTENCES = " ".join(f"Day {word} was dry." for word in ("one", "two", "six", "ten") * 20)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_retrieval_scores_equal_the_few_line_reference(data):
    steps, layers, heads, length = (data.draw(st.integers(1, 5)) for _ in range(4))
    prompt = data.draw(st.lists(st.integers(0, 3), min_size=length, max_size=length))
    answer = sorted(data.draw(st.sets(st.integers(0, length - 1), min_size=1)))
    written = data.draw(st.lists(st.integers(0, 3), min_size=steps, max_size=steps))
    top_keys = np.asarray(
        data.draw(
            st.lists(st.integers(0, length - 1), min_size=steps * layers * heads,
                     max_size=steps * layers * heads)
        )
    ).reshape(steps, layers, heads)  # fmt: skip
    found = retrieval_scores(top_keys, written, prompt, answer)
    np.testing.assert_array_equal(found, reference_retrieval(top_keys, written, prompt, answer))


def test_a_head_that_copies_every_answer_token_scores_one():
    prompt, answer = [5, 6, 7, 8, 9], [2, 3]
    top_keys = np.array([[[2, 0]], [[3, 3]]])  # (G=2, L=1, H=2)
    found = retrieval_scores(top_keys, [7, 8], prompt, answer)
    np.testing.assert_array_equal(found, [[1.0, 0.5]])


@pytest.fixture(scope="module")
def byte_level(tmp_path_factory):
    """A GPT-2 language model whose byte-level tokenizer spells any text (the others'
    tiny vocabularies have no full stop), long enough for the sweeps here."""
    from tests import tiny_models

    return str(tiny_models.gpt2(tmp_path_factory.mktemp("gpt2"), n_positions=256, lm=True))


def test_prompts_have_the_lengths_asked_and_the_needle_where_asked(byte_level):
    loaded = attnviz.load(byte_level).loaded
    haystack = Haystack(loaded, SHORT, SENTENCES)
    needle_ids = loaded.tokenizer(" " + SHORT.needle.needle, add_special_tokens=False)
    for length in SHORT.lengths:
        starts = []
        for depth in SHORT.depths:
            prompt = haystack.prompt(length, depth)
            assert len(prompt.ids) == length
            start, end = prompt.needle
            assert prompt.ids[start:end] == needle_ids["input_ids"]
            answer = loaded.tokenizer.decode([prompt.ids[i] for i in prompt.answer])
            assert answer.strip() == SHORT.needle.answer
            starts.append(start)
        assert starts[0] == len(haystack.first) < starts[1] < starts[2]
        assert end == length - len(haystack.asked)  # depth 1: right before the question
        # The middle needle follows the last sentence that ends at or below the depth.
        cut, wanted = starts[1] - len(haystack.first), round(0.5 * haystack.room(length))
        assert loaded.tokenizer.decode(haystack.filler[:cut]).endswith(".") and cut <= wanted
        assert "." not in loaded.tokenizer.decode(haystack.filler[cut:wanted])


def eager_rows(path, ids, steps):
    """Each step's last row of every head, (G, L, H, T), by a plain eager forward pass over
    the whole sequence so far (no cache), and the tokens written greedily."""
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    sequence, rows, written = list(ids), [], []
    with torch.no_grad():
        for _ in range(steps):
            output = model(torch.tensor([sequence]), output_attentions=True)
            token = int(output.logits[0, -1].argmax())
            rows.append(torch.stack([layer[0, :, -1] for layer in output.attentions]).numpy())
            written.append(token)
            sequence.append(token)
    return written, rows


@pytest.mark.parametrize("family", ["gemma3-lm", "gemma2-lm", "gpt2"])
def test_rows_read_while_writing_equal_eager_attention(generators, byte_level, family):
    """The sliding-window layers' cache holds only the latest keys: a step's row is mapped
    back to positions of the whole sequence, as the eager pass over all of it has them."""
    path = byte_level if family == "gpt2" else generators[family]
    loaded = attnviz.load(path).loaded
    prompt = Haystack(loaded, SHORT, default_haystack()).prompt(150, 0.5)
    bins = 7  # bins of 21 or 22 prompt tokens
    written, top_keys, span, pooled = read_while_writing(loaded, prompt, SHORT, bins)
    expected_written, rows = eager_rows(path, prompt.ids, len(written))
    assert written == expected_written and len(written) == SHORT.max_new_tokens
    low, high = prompt.needle
    length = len(prompt.ids)
    for step, row in enumerate(rows):  # (L, H, T) at each step
        picked = np.take_along_axis(row, top_keys[step][..., None], axis=-1)[..., 0]
        np.testing.assert_allclose(picked, row.max(axis=-1), atol=1e-6)  # a most-weighted key
        np.testing.assert_allclose(span[step], row[..., low:high].sum(-1), atol=1e-5)
        binned = [row[..., [p for p in range(length) if p * bins // length == b]].sum(-1)
                  for b in range(bins)]  # fmt: skip
        np.testing.assert_allclose(pooled[step], np.stack(binned, axis=-1), atol=1e-5)


def test_the_sweep_scores_each_cell_from_its_rows(generators):
    extractor = attnviz.load(generators["gemma3-lm"])
    seen = []
    results = extractor.needle(SHORT, progress=lambda count, cells, cell: seen.append(count))
    assert seen == [1, 2, 3, 4, 5, 6]
    assert [(cell.length, cell.depth) for cell in results.cells] == SHORT.cells()
    cell = results.cells[-1]
    loaded = extractor.loaded
    prompt = Haystack(loaded, SHORT, default_haystack()).prompt(cell.length, cell.depth)
    written, top_keys, span, _ = read_while_writing(loaded, prompt, SHORT)
    np.testing.assert_array_equal(
        cell.retrieval, reference_retrieval(top_keys, written, prompt.ids, prompt.answer)
    )
    np.testing.assert_allclose(cell.span, span.mean(axis=0))
    assert cell.response == loaded.tokenizer.decode(written, skip_special_tokens=True)
    assert len(results.heads()) == 3 * 4


def test_the_command_writes_the_sweep_as_json_csv_a_table_and_a_picture(
    runner, generators, tmp_path
):
    model = generators["gemma3-lm"]
    common = ["needle", "--model", model, *TINY_NEEDLE, "--lengths", "150,220", "--depths", "0,1"]
    common += ["-n", "3"]
    result = runner.invoke(app, [*common, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [(cell["length"], cell["depth"]) for cell in document["cells"]] == [
        (150, 0.0), (150, 1.0), (220, 0.0), (220, 1.0)
    ]  # fmt: skip
    assert len(document["heads"]) == 12 and document["answer"] == "red"
    assert result.stderr.count("attnviz: cell ") == 4
    quiet = runner.invoke(app, [*common, "-q", "-o", str(tmp_path / "sweep.csv")])
    assert quiet.exit_code == 0 and quiet.stdout == "" and "cell" not in quiet.stderr
    lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert lines[0] == "length,depth,tokens,answered,layer,head,retrieval,span"
    assert len(lines) == 1 + 4 * 12
    drawn = runner.invoke(app, [*common, "-q", "--top", "3", "--picture", str(tmp_path / "n.png")])
    assert drawn.exit_code == 0, drawn.stderr
    assert "top 3 retrieval heads" in drawn.stdout and "answered 0 of 4 cells" in drawn.stdout
    assert (tmp_path / "n.png").read_bytes().startswith(b"\x89PNG")


def test_top_heads_draws_the_strips_of_the_cell_named(runner, generators, tmp_path):
    """The strips' cell keeps its rows pooled (the weights of a row's bins are its weights
    on the prompt: at most 1), no other cell does; the picture grows a strip per head."""
    model = generators["gemma3-lm"]
    sweep = Sweep((150, 220), (0.0, 1.0), NEEDLE, max_new_tokens=3, strips_of=(220, 1.0))
    results = attnviz.load(model).needle(sweep)
    kept = [cell for cell in results.cells if cell.strips is not None]
    assert [(cell.length, cell.depth) for cell in kept] == [(220, 1.0)]
    strips = kept[0].strips
    assert strips.weights.shape == (3, 3, 4, 220) and list(strips.edges) == list(range(221))
    assert (strips.weights.sum(-1) <= 1 + 1e-5).all() and strips.weights.sum() > 0
    assert len(strips.written) == 3
    from PIL import Image

    common = ["needle", "--model", model, *TINY_NEEDLE, "--lengths", "150,220", "--depths", "0,1",
              "-n", "3", "-q"]  # fmt: skip
    heights = []
    for extra, name in (([], "plain.png"), (["--top-heads", "3", "--cell", "220,1"], "strips.png")):
        drawn = runner.invoke(app, [*common, "--picture", str(tmp_path / name), *extra])
        assert drawn.exit_code == 0, drawn.stderr
        heights.append(Image.open(tmp_path / name).height)
    assert heights[1] >= heights[0] + 3 * 90  # three strips of at least 0.9 inch at 100 dpi


def test_a_short_haystack_is_repeated_and_said_once(runner, generators, tmp_path):
    filler = tmp_path / "filler.txt"
    filler.write_text("A short text. It ends here.\n")
    result = runner.invoke(
        app,
        ["needle", "--model", generators["gemma3-lm"], "--haystack", str(filler), *TINY_NEEDLE,
         "--lengths", "150,200", "--depths", "0.5", "-n", "2", "-q", "-f", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("warning: the haystack is") == 1
    assert "repeated" in result.stderr and "to fill 200 tokens" in result.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--depths", "0,1.5"], "--depths: 1.5 is outside [0, 1]"),
        (["--depths", "half"], "--depths takes fractions"),
        (["--lengths", "0"], "--lengths: 0 is not a whole number of tokens"),
        (["--lengths", "1k,,2k"], "--lengths takes a list separated by commas"),
        (["--lengths", "1.2345k"], "1.2345k is not a whole number"),
        (["--answer", "1234"], "the answer '1234' is not in the needle"),
        (["--needle", " "], "the needle is empty"),
        (["--question", ""], "the question is empty"),
        (["--haystack", "missing.txt"], "no such file: missing.txt"),
        (["-o", "sweep.png"], "-o writes the results as data: draw the picture with --picture"),
        (["--picture", "sweep.txt"], "cannot tell the format of sweep.txt"),
        (["--cell", "1k,0"], "--cell names the cell --top-heads draws: give --top-heads N"),
        (["--top-heads", "2"], "--top-heads draws below the sweep's picture: give --picture"),
        (
            ["--top-heads", "2", "--picture", "p.png", "--cell", "3k,0.5"],
            "--cell 3000,0.5 is not a cell of the sweep: give one of --lengths 1000,2000,4000",
        ),
        (["--top-heads", "2", "--picture", "p.png", "--cell", "1k"], "--cell takes a length and"),
    ],
)
def test_bad_sweeps_are_refused_before_a_model_loads(runner, tmp_path, monkeypatch, arguments,
                                                     message):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["needle", "--model", "no/such/model", *arguments])
    failed_in_process(result, 2, message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("model", "arguments", "message"),
    [
        ("gemma3-lm", ["--lengths", "300"], "--lengths 300: "),
        ("gemma3-lm", ["--lengths", "250", "-n", "10"], "reads at most 256 tokens"),
        ("gemma3-lm", ["--lengths", "20"], "--lengths 20 is too short"),
        ("bert", [], "is not a causal language model"),
        ("builtin", [], "does not write text"),
    ],
)
def test_sweeps_a_model_cannot_run_are_usage_errors(runner, tiny, generators, model, arguments,
                                                    message):  # fmt: skip
    name = {**tiny, **generators}.get(model, model)
    result = runner.invoke(
        app, ["needle", "--model", name, *TINY_NEEDLE, "--depths", "0", *arguments]
    )
    failed_in_process(result, 2, message)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--needle", "4 2", "--answer", "4"], "the needle tokenizes to nothing"),
        (["--question", "42 ?"], "the question tokenizes to nothing"),
        (["--needle", "The code is red 7.", "--answer", "7"], "the answer '7' tokenizes to"),
    ],
)
def test_words_the_tokenizer_drops_are_refused(runner, generators, tmp_path, arguments, message):
    """A tokenizer may drop what it does not spell (this one's normalizer removes digits,
    spaces and '?'): a needle, question or answer left with no token is a usage error."""
    import shutil

    from tokenizers import Regex, Tokenizer, normalizers

    folder = tmp_path / "drops-digits"
    shutil.copytree(generators["gemma3-lm"], folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    dropping = normalizers.Replace(Regex(r"[\d\s?]"), "")
    kept = [] if tokenizer.normalizer is None else [tokenizer.normalizer]
    tokenizer.normalizer = normalizers.Sequence([dropping, *kept])
    tokenizer.save(str(folder / "tokenizer.json"))
    asked = dict(zip(TINY_NEEDLE[::2], TINY_NEEDLE[1::2], strict=True))
    asked |= dict(zip(arguments[::2], arguments[1::2], strict=True))
    result = runner.invoke(
        app,
        ["needle", "--model", str(folder), "--lengths", "150", "--depths", "0",
         *(part for pair in asked.items() for part in pair)],
    )  # fmt: skip
    failed_in_process(result, 2, message)


def test_lengths_and_depths_are_read_as_documented():
    assert parse_lengths("1k,4k,16k,32k") == (1000, 4000, 16000, 32000)
    assert parse_lengths("2500, 1.5k,2500") == (2500, 1500)
    assert parse_depths("0, 0.25,1") == (0.0, 0.25, 1.0)


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_sweep_stopped_midway_writes_its_finished_cells_marked_partial(
    runner, generators, tmp_path, monkeypatch, stop
):
    """They were lost without a word; then they were written over the finished sweep
    that -o FILE held: now they go beside it, FILE left as it was."""
    from attnviz.cli.app import Terminated
    from attnviz.pretrained import needle as sweeping

    reading = sweeping.read_while_writing
    calls = []

    def stopped_at_the_third(*arguments):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt if stop == "ctrl-c" else Terminated(143)
        return reading(*arguments)

    monkeypatch.setattr(sweeping, "read_while_writing", stopped_at_the_third)
    common = ["needle", "--model", generators["gemma3-lm"], *TINY_NEEDLE, "-n", "3", "-q"]
    common += ["--lengths", "150,220", "--depths", "0,1"]
    earlier = tmp_path / "sweep.json"
    earlier.write_text('{"an earlier, whole sweep": true}')
    picture = tmp_path / "sweep.png"
    result = runner.invoke(app, [*common, "-o", str(earlier), "--picture", str(picture)])
    assert result.exit_code == (130 if stop == "ctrl-c" else 143)
    partial, drawn = tmp_path / "sweep.partial.json", tmp_path / "sweep.partial.png"
    assert result.stderr.startswith(
        "attnviz: warning: interrupted after 2 of 4 cells: the 2 finished are written to "
        f"{partial}, {drawn}, marked partial\n"
    )
    assert earlier.read_text() == '{"an earlier, whole sweep": true}'
    calls.clear()  # stopped again: the partial cells before are kept, the new go beside them
    again = runner.invoke(app, [*common, "-o", str(earlier)])
    assert again.exit_code == (130 if stop == "ctrl-c" else 143)
    assert f"written to {tmp_path / 'sweep.partial-2.json'}, marked" in again.stderr
    assert (tmp_path / "sweep.partial-2.json").is_file()
    assert drawn.read_bytes()[:4] == b"\x89PNG" and not picture.exists()
    document = json.loads(partial.read_text())
    assert document["partial"] is True and document["cells_planned"] == 4
    assert [(cell["length"], cell["depth"]) for cell in document["cells"]] == [(150, 0), (150, 1)]
    calls.clear()
    table = runner.invoke(app, common)
    assert "answered 0 of 2 cells (partial: 2 of 4)" in table.stdout


def test_the_sweeps_picture_takes_exports_figure_options(runner, generators, tmp_path):
    from io import BytesIO

    from PIL import Image

    common = ["needle", "--model", generators["gemma3-lm"], *TINY_NEEDLE, "-n", "2", "-q"]
    common += ["--lengths", "150", "--depths", "0,1"]
    sizes = []
    for dpi in ("50", "100"):
        picture = tmp_path / f"sweep-{dpi}.png"
        result = runner.invoke(app, [*common, "--picture", str(picture), "--dpi", dpi])
        assert result.exit_code == 0, result.stderr
        sizes.append(Image.open(BytesIO(picture.read_bytes())).size)
    assert sizes[1] == (2 * sizes[0][0], 2 * sizes[0][1])
    sized = tmp_path / "sized.png"
    assert runner.invoke(app, [*common, "--picture", str(sized), "--figsize", "6,4"]).exit_code == 0
    assert Image.open(BytesIO(sized.read_bytes())).size == (600, 400)
    failed_in_process(runner.invoke(app, [*common, "--title", "x"]), 2, "--title applies to")
