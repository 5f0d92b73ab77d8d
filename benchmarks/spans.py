"""Where a needle's circuit runs: EAP split by span on the needle pair of
benchmarks/relp.py (about a thousand tokens of sample_texts/haystack.txt, "The secret
code is 7421." against "… 3958.", the question at the end), spans ``needle`` (the
code), ``question`` and ``rest``. Prints the share of the top 100 edges' |score| in each
span, and the faithfulness of circuits of 0.1%, 1% and 10% of the (edge, span) pairs
beside position-free circuits of as many edges (the same number of units kept); the time
of each command (scoring and its circuits).

    python -m benchmarks.spans [--model smollm2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import attnviz
from benchmarks.relp import NEEDLE, QUESTION, _needle

SPANS = [f"needle=text:{NEEDLE}", f"question=text:{QUESTION}"]
FRACTIONS = (0.001, 0.01, 0.1)
TOP = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    arguments = parser.parse_args()
    extractor = attnviz.load(arguments.model)
    pair = _needle()[0]
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
    print(f"{arguments.model}: {edges:,} edges × {len(spans)} spans; scored in {took:.1f} s")
    shares = ", ".join(f"{s} {v / top.sum():.1%}" for s, v in zip(spans, top, strict=True))
    print(f"the top {TOP} edges' |score| by span: {shares}")
    started = time.perf_counter()
    by_pairs = extractor.circuit(
        **asked, spans=SPANS, edges=sizes[0], curve=sizes[1:], progress=False
    )
    pairs_took = time.perf_counter() - started
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
