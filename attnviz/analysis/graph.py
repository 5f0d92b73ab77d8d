"""The graph a circuit is found in: what writes to the residual stream (upstream nodes) and
what reads it (downstream nodes), and an edge from each writer to each reader above it.

Upstream: ``input`` (the embeddings, the residual entering the first layer), ``a{l}.h{h}``
(head h of layer l: its share of what the attention adds to the residual stream) and
``m{l}`` (what MLP l adds). Downstream: each head's query input ``a{l}.h{h}.q``, each
key/value head's key and value inputs ``a{l}.h{g}.k|v`` (``a{l}.kv{g}.k|v`` where query
heads share key/value heads: one input per key/value head, as the model computes it),
``m{l}`` (the MLP's input) and ``logits`` (the final norm's input). An edge u → d carries
u's output into d's input alone, so one edge can change one head's query and nothing else.

Shape letters: U upstream nodes, N downstream nodes, L layers, H query heads, K key/value
heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

INPUT, LOGITS = "input", "logits"
READS = ("q", "k", "v")  # what a head reads the residual stream as, in this order


@dataclass(frozen=True)
class Graph:
    """The nodes of a decoder of ``layers`` layers, ``heads`` query heads and ``kv_heads``
    key/value heads, in the order the model computes them."""

    layers: int
    heads: int
    kv_heads: int
    upstream: list[str] = field(init=False)
    downstream: list[str] = field(init=False)
    edges: np.ndarray = field(init=False)  # (U, N) bool: whether u → d is an edge
    # (U, N) bool: whether d is one of u's own inputs (a head's query, its key/value head's
    # key and value, an MLP's input); the logits are no node's, the input has none
    inputs: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        kv = "h" if self.kv_heads == self.heads else "kv"
        upstream, written = [INPUT], [-1]
        downstream: list[str] = []
        read: list[int] = []
        for layer in range(self.layers):
            # a layer's heads write at 2l, its MLP at 2l + 1; its heads read at 2l
            upstream += [f"a{layer}.h{head}" for head in range(self.heads)] + [f"m{layer}"]
            written += [2 * layer] * self.heads + [2 * layer + 1]
            downstream += [f"a{layer}.h{head}.q" for head in range(self.heads)]
            for letter in READS[1:]:
                downstream += [f"a{layer}.{kv}{group}.{letter}" for group in range(self.kv_heads)]
            downstream.append(f"m{layer}")
            read += [2 * layer] * (self.heads + 2 * self.kv_heads) + [2 * layer + 1]
        downstream.append(LOGITS)
        read.append(2 * self.layers)
        object.__setattr__(self, "upstream", upstream)
        object.__setattr__(self, "downstream", downstream)
        edges = np.array(written)[:, None] < np.array(read)[None, :]
        object.__setattr__(self, "edges", edges)
        index = {name: number for number, name in enumerate(downstream)}
        inputs = np.zeros(edges.shape, dtype=bool)
        group = self.heads // self.kv_heads
        for u, name in enumerate(upstream[1:], 1):
            if name.startswith("m"):
                inputs[u, index[name]] = True
                continue
            attention, head = name.split(".")
            inputs[u, index[f"{name}.q"]] = True
            for letter in READS[1:]:
                inputs[u, index[f"{attention}.{kv}{int(head[1:]) // group}.{letter}"]] = True
        object.__setattr__(self, "inputs", inputs)

    @property
    def count(self) -> int:
        """How many edges the graph has."""
        return int(self.edges.sum())

    def reads(self, layer: int) -> int:
        """The downstream index of ``layer``'s first query input; its key inputs follow its
        query heads, its value inputs its key/value heads, then its MLP's input."""
        return layer * (self.heads + 2 * self.kv_heads + 1)

    def inputs_of(self, node: str) -> list[str]:
        """The downstream nodes that are ``node``'s own inputs (none for the input)."""
        (found,) = np.nonzero(self.inputs[self.upstream.index(node)])
        return [self.downstream[d] for d in found]

    def outputs_of(self, node: str) -> list[str]:
        """The downstream nodes ``node``'s output reaches: an edge to each."""
        (found,) = np.nonzero(self.edges[self.upstream.index(node)])
        return [self.downstream[d] for d in found]

    def edge_list(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's (upstream, downstream) indices, in the order of ``edges``."""
        upstream, downstream = np.nonzero(self.edges)
        return upstream, downstream
