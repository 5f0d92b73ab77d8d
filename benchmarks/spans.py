"""Where a needle's circuit runs: EAP split by span on the needle pair of
benchmarks/relp.py (about a thousand tokens of sample_texts/haystack.txt, "The secret
code is 7421." against "… 3958.", the question at the end), spans ``needle`` (the
code), ``question`` and ``rest``. Prints the share of the top 100 edges' |score| in each
span, and the faithfulness of circuits of 0.1%, 1% and 10% of the (edge, span) pairs
beside position-free circuits of as many edges (the same number of units kept); the time
of each command (scoring and its circuits).

With ``--tokens N`` the pair is about N tokens long: the haystack's filler sentences (the
needle and the question taken out) cycled on either side of the needle, the needle at the
middle; and first, each in a fresh process, the time and the peak memory above the
loaded model of the model's own forward (the last logits alone), of its forward and
backward to the input embeddings (the floor of any gradient method) and of EAP split by
span (targets at 32k tokens: within 3× the floor, within 2 GiB above the model).

    python -m benchmarks.spans [--model smollm2] [--tokens N] [--picture FILE.png]

``--picture`` draws the 0.1% circuit by span (the spans along the x-axis).
"""

from __future__ import annotations

import argparse
import itertools
import re
import time

import numpy as np

import attnviz
from attnviz.inputs import Input
from benchmarks.relp import NEEDLE, QUESTION, SAMPLES, TWIN, _needle

SPANS = [f"needle=text:{NEEDLE}", f"question=text:{QUESTION}"]
FRACTIONS = (0.001, 0.01, 0.1)
TOP = 100


def needle_of(tokenizer, tokens: int) -> Input:
    """A needle pair of about ``tokens`` tokens: the haystack's filler sentences cycled
    on either side of the needle (half each), the question at the end."""
    haystack = (SAMPLES / "haystack.txt").read_text(encoding="utf-8")
    needle = f"The secret code is {NEEDLE}."
    filler = re.findall(r"[^.?]+\.", haystack.replace(needle, "").replace(QUESTION, ""))
    sentences = itertools.cycle(sentence.strip() for sentence in filler)
    sides = []
    for _ in range(2):  # the filler before the needle, then after it
        side, counted = [], 0
        while counted < tokens // 2:
            side.append(next(sentences))
            counted += len(tokenizer(" " + side[-1], add_special_tokens=False)["input_ids"])
        sides.append(" ".join(side))
    text = f"{sides[0]} {needle} {sides[1]} {QUESTION} The secret code is "
    corrupt = text.replace(NEEDLE, TWIN)
    return Input(text=text, corrupt=corrupt, answer=NEEDLE[0], versus=TWIN[0])


def _measured(what: str, model: str, tokens: int) -> tuple[float, float, int]:
    """In a fresh process: seconds and GiB above the loaded model of one measurement,
    after the same work on a short pair, untimed (torch's one-time costs paid)."""
    import torch

    from benchmarks.effects import PeakMemory, timed

    extractor = attnviz.load(model)
    loaded = extractor.loaded

    def ids_of(pair: Input) -> torch.Tensor:
        return torch.tensor([loaded.tokenizer(pair.text)["input_ids"]], device=loaded.model.device)

    def forward(pair: Input) -> None:
        with torch.inference_mode():
            loaded.model(input_ids=ids_of(pair), use_cache=False, logits_to_keep=1)

    def floor(pair: Input) -> None:
        for parameter in loaded.model.parameters():
            parameter.requires_grad_(False)
        embedded = loaded.model.get_input_embeddings()(ids_of(pair)).detach().requires_grad_(True)
        logits = loaded.model(inputs_embeds=embedded, use_cache=False, logits_to_keep=1).logits
        (gradient,) = torch.autograd.grad(logits[0, -1].float().log_softmax(-1)[0], embedded)
        float(gradient.sum())

    def split(pair: Input) -> None:
        asked = dict(answer=pair.answer, corrupt=pair.corrupt, versus=pair.versus)
        extractor.circuit(pair.text, **asked, spans=SPANS, edges=0, progress=False)

    work = {"forward": forward, "forward + backward": floor, "EAP by span": split}[what]
    work(needle_of(loaded.tokenizer, 64))
    pair = needle_of(loaded.tokenizer, tokens)
    with PeakMemory(loaded.model.device) as memory:
        seconds, _ = timed(lambda: work(pair))
    return seconds, memory.above, int(ids_of(pair).shape[1])


def costs(model: str, tokens: int) -> None:
    """The forward, the floor and EAP by span, each in a fresh process, as ratios."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    found: dict[str, tuple[float, float]] = {}
    for what in ("forward", "forward + backward", "EAP by span"):
        with context.Pool(1) as pool:
            seconds, above, length = pool.apply(_measured, (what, model, tokens))
        found[what] = seconds, above
        ratios = ""
        if what != "forward":
            ratios = f" = {seconds / found['forward'][0]:.2f}× the forward"
        if what == "EAP by span":
            ratios += f", {seconds / found['forward + backward'][0]:.2f}× the floor"
        print(f"{model}, {length:,} tokens: {what}: {seconds:.1f} s{ratios}; +{above:.2f} GiB "
              "above the model", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, help="a needle pair of about N tokens")
    parser.add_argument("--picture", help="draw the 0.1%% circuit by span to this file")
    arguments = parser.parse_args()
    if arguments.tokens:
        costs(arguments.model, arguments.tokens)
    extractor = attnviz.load(arguments.model)
    pair = (
        _needle()[0]
        if not arguments.tokens
        else needle_of(extractor.loaded.tokenizer, arguments.tokens)
    )
    asked = dict(text=pair.text, answer=pair.answer, corrupt=pair.corrupt, versus=pair.versus)
    started = time.perf_counter()
    scored = extractor.circuit(**asked, spans=SPANS, edges=0, progress=False)
    took = time.perf_counter() - started
    spans, by_span = scored.scored.spans, scored.scored.by_span
    assert by_span is not None  # split by span
    edges = scored.graph.count
    pairs = edges * len(spans)
    sizes = [int(fraction * pairs) for fraction in FRACTIONS]
    upstream, downstream = scored.scored.ranked()
    top = np.abs(by_span[:, upstream[:TOP], downstream[:TOP]]).sum(1)  # (K,)
    length = len(extractor.loaded.tokenizer(pair.text)["input_ids"])
    print(
        f"{arguments.model}, {length:,} tokens: {edges:,} edges × {len(spans)} spans; "
        f"scored in {took:.1f} s"
    )
    shares = ", ".join(f"{s} {v / top.sum():.1%}" for s, v in zip(spans, top, strict=True))
    print(f"the top {TOP} edges' |score| by span: {shares}")
    started = time.perf_counter()
    by_pairs = extractor.circuit(
        **asked, spans=SPANS, edges=sizes[0], curve=sizes[1:], progress=False
    )
    pairs_took = time.perf_counter() - started
    if arguments.picture:
        by_pairs.picture(arguments.picture.rsplit(".", 1)[-1]).save(arguments.picture)
    ours = [(by_pairs.kept, by_pairs.faithfulness, int(by_pairs.scored.circuit.sum()))] + [
        (point.kept, point.faithfulness, None) for point in by_pairs.curve
    ]
    held = sorted({kept for kept, _, _ in ours})
    started = time.perf_counter()
    whole = extractor.circuit(**asked, edges=held[0], curve=held[1:], progress=False)
    whole_took = time.perf_counter() - started
    faithful = {whole.asked: whole.faithfulness} | {
        point.asked: point.faithfulness for point in whole.curve
    }
    print("| fraction of the pairs | (edge, span) pairs kept | faithfulness | an edge circuit "
          "of as many edges |")  # fmt: skip
    print("| --- | --- | --- | --- |")
    for fraction, (kept, value, _) in zip(FRACTIONS, ours, strict=True):
        print(f"| {fraction:.1%} | {kept:,} | {value:.3f} | {faithful[kept]:.3f} |")
    print(
        f"times: split scores {took:.1f} s; the circuits by span {pairs_took:.1f} s; the edge "
        f"circuits {whole_took:.1f} s (each command scores again); the 0.1% circuit by span "
        f"holds {ours[0][2]:,} distinct edges"
    )


if __name__ == "__main__":
    main()
