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
is the sum of its query heads').
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnviz.analysis.graph import LOGITS
from attnviz.analysis.selections import nodes_of

if TYPE_CHECKING:
    from attnviz.analysis.circuit import Circuit


def eap_ig_document(circuit: Circuit) -> dict[str, Any]:
    """The circuit as EAP-IG's graph file."""
    graph = circuit.graph
    group = graph.heads // graph.kv_heads
    held = nodes_of(graph, circuit.in_graph)
    nodes = {
        name: {"in_graph": bool(kept)} for name, kept in zip(graph.upstream, held, strict=True)
    }
    nodes[LOGITS] = {"in_graph": True}  # EAP-IG's logits are always in its graph
    edges: dict[str, dict[str, Any]] = {}
    for u, d in zip(*graph.edge_list(), strict=True):
        parent, child = graph.upstream[u], graph.downstream[d]
        score, kept = float(circuit.scores[u, d]), bool(circuit.in_graph[u, d])
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
    }
    return {"cfg": config, "nodes": nodes, "edges": edges}
