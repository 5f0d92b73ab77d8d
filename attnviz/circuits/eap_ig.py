"""A circuit as hannamw/EAP-IG's graph file (``Graph.to_json``, read by its
``Graph.from_json``): ``cfg`` (``n_layers``, ``n_heads``, ``parallel_attn_mlp``,
``d_model``), ``nodes`` {name: {"in_graph"}} and ``edges`` {"parent->child<q|k|v>":
{"score", "in_graph"}}, under EAP-IG's node names (``input``, ``a{l}.h{h}``, ``m{l}``,
``logits``).

EAP-IG's graph gives every query head a key and a value input of its own; attnviz's, one
per key/value head, as the model computes them. A grouped edge u → a{l}.kv{g}.k is
written as one edge into each query head of the group, each with the grouped score
divided among them equally, in the circuit where the grouped edge is: the copies sum to
attnviz's score, as EAP-IG's own scores of them do (the key/value head's input gradient
is the sum of its query heads'). Read back (``circuit --scores``), the copies' scores are
summed into the grouped edge's, which is in the circuit where any copy is.

Scores are written in MIB's sign: MIB-circuit-track's ``run_attribution.py`` (commit
b759df3) scores edges on the logit difference as a loss (``metric(..., loss=True)``, its
negative), so that an edge the answer needs scores positive and MIB's signed evaluation
(``absolute=False``) takes it first; attnviz's scores are changes of the metric, that
edge's negative. ``cfg.score_sign`` says which: ``"loss"`` as written here, ``"metric"``
for a file in attnviz's own sign; a file without it (EAP-IG's own) is read as MIB's.
``--method optimize``'s scores rank its learned mask, the kept first, all positive: they
are written unchanged, ``"mask"``, as MIB's ``convert_mask_to_graph.py`` writes a learned
mask's edges (each its sigmoid), so that its signed evaluation takes the kept first too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnviz.choices import CircuitMethod
from attnviz.circuits.circuit import Circuit
from attnviz.circuits.files import circuit_of_document, finite_number, json_document
from attnviz.circuits.graph import LOGITS, Graph
from attnviz.errors import UsageError

# cfg.score_sign: each sign's factor from attnviz's scores (changes of the metric; a
# learned mask's ranking for "mask").
SIGNS = {"loss": -1.0, "metric": 1.0, "mask": 1.0}
WRITTEN_SIGN = "loss"  # MIB's: an edge the answer needs scores positive


def eap_ig_document(circuit: Circuit) -> dict[str, Any]:
    """The circuit as EAP-IG's graph file, its scores in MIB's sign."""
    graph = circuit.graph
    group = graph.heads // graph.kv_heads
    held = set(circuit.scored.nodes())
    nodes = {name: {"in_graph": name in held} for name in graph.upstream}
    nodes[LOGITS] = {"in_graph": True}  # EAP-IG's logits are always in its graph
    edges: dict[str, dict[str, Any]] = {}
    written = "mask" if circuit.method is CircuitMethod.OPTIMIZE else WRITTEN_SIGN
    sign = SIGNS[written]
    for parent, child, own, kept, *_ in circuit.scored.rows(ranked=False):
        score = sign * own + 0.0  # no -0.0 in the file
        parts = child.split(".")
        if len(parts) == 1:  # an MLP's input, or the logits
            edges[f"{parent}->{child}"] = {"score": score, "in_graph": kept}
        elif parts[2] == "q":
            edges[f"{parent}->{parts[0]}.{parts[1]}<q>"] = {"score": score, "in_graph": kept}
        else:
            unit = int(parts[1].lstrip("hkv"))
            for head in range(unit * group, (unit + 1) * group):
                name = f"{parent}->{parts[0]}.h{head}<{parts[2]}>"
                edges[name] = {"score": score / group, "in_graph": kept}
    config = {
        "n_layers": graph.layers,
        "n_heads": graph.heads,
        "parallel_attn_mlp": False,
        "d_model": circuit.width,
        "score_sign": written,
        # EAP-IG's graph has no positions: a score split by span is written as its sum
        **({"summed_over_spans": list(circuit.scored.spans)} if circuit.scored.spans else {}),
    }
    return {"cfg": config, "nodes": nodes, "edges": edges}


_HEAD_INPUT = re.compile(r"a(\d+)\.h(\d+)<([qkv])>")  # EAP-IG's name of a head's input


@dataclass(frozen=True)
class EapIgGraph:
    """An EAP-IG graph file read: its model's layers and query heads, and each edge's
    score and whether it is in the circuit, under EAP-IG's edge names."""

    layers: int
    heads: int
    edges: dict[str, tuple[float, bool]]  # each score in attnviz's sign
    path: str

    def on(self, graph: Graph) -> tuple[np.ndarray, np.ndarray]:
        """Its scores and circuit on a model's graph, (U, N) each: a query head's key and
        value copies summed into their key/value head's edge, in the circuit where any is."""
        if (self.layers, self.heads) != (graph.layers, graph.heads):
            raise UsageError(
                f"--scores {self.path} is EAP-IG's graph of a model of {self.layers} layers × "
                f"{self.heads} heads; this model has {graph.layers} × {graph.heads}"
            )
        upstream = {name: index for index, name in enumerate(graph.upstream)}
        downstream = {name: index for index, name in enumerate(graph.downstream)}
        group, kv = graph.heads // graph.kv_heads, "h" if graph.kv_heads == graph.heads else "kv"
        scores = np.zeros(graph.edges.shape)
        kept = np.zeros(graph.edges.shape, dtype=bool)
        copies = np.zeros(graph.edges.shape, dtype=np.int64)  # EAP-IG's edges of each of ours
        for name, (score, in_graph) in self.edges.items():
            parent, _, child = name.partition("->")
            input_of = _HEAD_INPUT.fullmatch(child)
            if input_of:  # a head's q, k or v input: k and v its key/value head's
                layer, head, letter = input_of.groups()
                unit = f"h{head}" if letter == "q" else f"{kv}{int(head) // group}"
                child = f"a{layer}.{unit}.{letter}"
            u, d = upstream.get(parent, -1), downstream.get(child, -1)
            if u < 0 or d < 0 or not graph.edges[u, d]:
                raise UsageError(f"{self.path}: {name!r} is no edge of this model's graph")
            scores[u, d] += score
            kept[u, d] |= in_graph
            copies[u, d] += 1
        wanted = graph.edges * np.array([_copies(name, group) for name in graph.downstream])
        if (copies != wanted).any():
            raise UsageError(
                f"--scores {self.path} holds {len(self.edges):,} of the {int(wanted.sum()):,} "
                "edges of EAP-IG's graph of this model: every edge is scored in its file"
            )
        return scores, kept


def read_scores(path: str | Path) -> Circuit | EapIgGraph:
    """A file of scores for ``circuit --scores``: a circuit written by ``circuit -f json``,
    or EAP-IG's graph file (``cfg``, ``nodes``, ``edges``)."""
    document = json_document(path)
    if not (isinstance(document, dict) and "cfg" in document):
        return circuit_of_document(document, str(path))
    config = document["cfg"] if isinstance(document["cfg"], dict) else {}
    layers, heads, edges = config.get("n_layers"), config.get("n_heads"), document.get("edges")
    if not (_whole(layers) and _whole(heads) and isinstance(edges, dict)):
        raise UsageError(
            f'{path} is no EAP-IG graph file: its "cfg" names no n_layers and n_heads, or '
            'it has no "edges"'
        )
    written = config.get("score_sign", WRITTEN_SIGN)
    if not isinstance(written, str) or written not in SIGNS:
        raise UsageError(
            f'{path}: "cfg" says score_sign {written!r}: "loss" (MIB\'s, as -f eap-ig writes '
            'it), "metric" (attnviz\'s own) or "mask" (a learned mask\'s, the kept first)'
        )
    sign = SIGNS[written]
    read: dict[str, tuple[float, bool]] = {}
    for name, edge in edges.items():
        fields: dict[str, Any] = edge if isinstance(edge, dict) else {}
        score, in_graph = fields.get("score"), fields.get("in_graph")
        if not finite_number(score):
            raise UsageError(f'{path}: edge {name!r} has no "score" finite number')
        if not isinstance(in_graph, bool):
            raise UsageError(f'{path}: edge {name!r} has no "in_graph" true or false')
        read[name] = (sign * float(score) + 0.0, in_graph)
    assert isinstance(layers, int) and isinstance(heads, int)  # _whole's
    return EapIgGraph(layers, heads, read, str(path))


def _copies(downstream: str, group: int) -> int:
    """How many of EAP-IG's edges into a downstream node of ours there are from each
    upstream node: a key or value input one per query head of its group."""
    return group if downstream.endswith((".k", ".v")) else 1


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
