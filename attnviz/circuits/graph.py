"""The graph a circuit is found in: what writes to the residual stream (upstream nodes) and
what reads it (downstream nodes), and an edge from each writer to each reader above it.

Upstream: ``input`` (the embeddings, the residual entering the first layer), ``a{l}.h{h}``
(head h of layer l: its share of what the attention adds to the residual stream) and
``m{l}`` (what MLP l adds). Downstream: each head's query input ``a{l}.h{h}.q``, each
key/value head's key and value inputs ``a{l}.h{g}.k|v`` (``a{l}.kv{g}.k|v`` where query
heads share key/value heads: one input per key/value head, as the model computes it),
``m{l}`` (the MLP's input) and ``logits`` (the final norm's input). An edge u → d carries
u's output into d's input alone, so one edge can change one head's query and nothing else.

Where nodes sit in a pass, which every pass, record and picture asks this module for:
upstream nodes write in **slots**, the input (slot 0), then each layer l's heads
(1 + 2l) and its MLP (2 + 2l), in the order of ``upstream``; downstream nodes read in
**groups** (:class:`Group`), each from one **point** of the residual stream: a layer's
queries, keys and values from 2l, its MLP from 2l + 1, the logits from 2L.

Shape letters: U upstream nodes, N downstream nodes, L layers, H query heads, K key/value
heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from attnviz.choices import Count

INPUT, LOGITS = "input", "logits"
READS = ("q", "k", "v")  # what a head reads the residual stream as, in this order


class Group(NamedTuple):
    """Downstream nodes read from one point of the residual stream together."""

    layer: int  # L for the logits
    letter: str  # "q", "k", "v", "m" (an MLP's input) or "logits"
    first: int  # the first of them, a downstream index
    size: int  # how many
    point: int  # where they read: 2l (a layer's heads), 2l + 1 (its MLP), 2L (the logits)


# The slots upstream nodes write in, numbered alike in every graph: 0 the input's, then
# each layer's heads and its MLP.
def heads_slot(layer: int) -> int:
    """The slot ``layer``'s heads write in."""
    return 1 + 2 * layer


def mlp_slot(layer: int) -> int:
    """The slot ``layer``'s MLP writes in."""
    return 2 + 2 * layer


def slot_parts(slot: int) -> tuple[int, bool]:
    """A slot's layer (-1: the input's) and whether it holds heads."""
    layer, mlp = divmod(slot - 1, 2)
    return (-1, False) if slot == 0 else (layer, not mlp)


@dataclass(frozen=True)
class Graph:
    """The nodes of a decoder of ``layers`` layers, ``heads`` query heads and ``kv_heads``
    key/value heads, in the order the model computes them."""

    layers: int
    heads: int
    kv_heads: int
    # Whether a norm after attention scales a layer's heads' outputs together (Gemma 2
    # and 3): a head's output is then its share of the norm's, so every head of the layer
    # changes what each carries, and an edge of a dead end can move a circuit's metric.
    post_norms: bool = False
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

    def copies(self, count: Count) -> np.ndarray:
        """(U, N) int: how many edges each edge is counted as, 0 where there is none: one;
        ``ungrouped``, an edge into a key/value head's key or value one per query head of
        its group, as MIB's graph has one for each (and ``-f eap-ig`` writes them)."""
        copies = self.edges.astype(np.int64)
        if count is Count.UNGROUPED and self.kv_heads != self.heads:
            shared = np.array([name.endswith((".k", ".v")) for name in self.downstream])
            copies[:, shared] *= self.heads // self.kv_heads
        return copies

    @staticmethod
    def edges_of(layers: int, heads: int, kv_heads: int) -> int:
        """How many edges the graph of that shape has, counted without building it (a
        file's claimed shape is checked so before its arrays are made): a layer l's
        query, key and value inputs read the input and every node of the layers below
        (1 + l(H + 1) each), its MLP those and its own heads, the logits every node."""
        below = layers + (heads + 1) * layers * (layers - 1) // 2  # Σ over l of 1 + l(H + 1)
        into_heads = below * (heads + 2 * kv_heads)
        into_mlps = below + layers * heads
        return into_heads + into_mlps + 1 + layers * (heads + 1)

    def reads(self, layer: int) -> int:
        """The downstream index of ``layer``'s first query input; its key inputs follow its
        query heads, its value inputs its key/value heads, then its MLP's input."""
        return layer * (self.heads + 2 * self.kv_heads + 1)

    def groups(self) -> list[Group]:
        """Every group of downstream nodes, in the order the model reads them."""
        found = []
        for layer in range(self.layers):
            first = self.reads(layer)
            sizes = (self.heads, self.kv_heads, self.kv_heads, 1)
            for letter, size in zip((*READS, "m"), sizes, strict=True):
                found.append(Group(layer, letter, first, size, 2 * layer + (letter == "m")))
                first += size
        found.append(Group(self.layers, LOGITS, len(self.downstream) - 1, 1, 2 * self.layers))
        return found

    def readable(self, first: int) -> int:
        """How many upstream nodes come before the downstream node ``first``: those its
        edges come from."""
        return int(self.edges[:, first].sum())

    def columns(self, slot: int) -> slice:
        """Where a slot's upstream nodes lie among them."""
        if slot == 0:
            return slice(0, 1)
        layer, heads = slot_parts(slot)
        first = 1 + layer * (self.heads + 1)
        return (
            slice(first, first + self.heads)
            if heads
            else slice(first + self.heads, first + self.heads + 1)
        )

    def slot_of(self, upstream: int) -> int:
        """The slot an upstream node writes in."""
        if upstream == 0:
            return 0
        layer, within = divmod(upstream - 1, self.heads + 1)
        return mlp_slot(layer) if within == self.heads else heads_slot(layer)

    def drawn_at(self, downstream: str) -> str:
        """The upstream node a downstream one belongs to, as a picture draws it: a query,
        key or value input at its head (a key/value head's at its group's first query
        head), an MLP's input at the MLP, the logits at themselves."""
        owners = np.nonzero(self.inputs[:, self.downstream.index(downstream)])[0]
        return self.upstream[owners[0]] if len(owners) else downstream

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
