"""Circuits written from plain transformers hooks and autograd, none of attnviz's code: the
nodes and edges of a decoder, a run in which chosen edges carry the corrupted run's value,
the exact edge scores, EAP and EAP-IG, and a circuit's metric. The modules are found by
their names and the model's structure (hook_references' helpers), the heads' columns from
the configuration.

An upstream node's output: the first layer's input (``input``); a head's slice of the
output projection's input through the projection, the bias taken off (in a layer with a
post-attention norm, times that norm's gain over the RMS of the whole attention output,
as the norm scales it); an MLP's: the layer's output less the MLP norm's input. A
downstream node's input: a head's query, key or value is its columns of the projection
of the attention norm of (the layer's input + what is added); an MLP's and the logits'
their norm's input + what is added.
"""

from __future__ import annotations

import itertools
import sys
from unittest import mock

import torch

from tests.hook_references import (
    ANSWER,
    CORRUPT,
    TEXT,
    VERSUS,
    _eps,
    _gain,
    _post_attention_norm,
    attention_of,
    final_norm,
    graph_metric,
    hidden_of,
    layers_of,
    mlp_input_norm,
    output_projection,
    with_hidden,
)

# Two pairs of the tiny models' datasets: each text and its twin of as many tokens, the
# second pair of another length.
PAIR = {"text": TEXT, "answer": ANSWER, "versus": VERSUS, "corrupt": CORRUPT}
OTHER = {
    "text": "The man saw the dog because",
    "answer": ANSWER,
    "versus": VERSUS,
    "corrupt": "The dog saw the man because",
}
THIRD = {  # a third pair of the tiny models' dataset, as long as its twin
    "text": "The girl saw the cat because",
    "answer": ANSWER,
    "versus": VERSUS,
    "corrupt": "The cat saw the girl because",
}
# Twins that share their first words: attnviz's records and changed runs hold only the
# positions from the first token where they differ on (before it the runs are the same).
LATE = {**PAIR, "corrupt": "The man walked the man because"}


def scores_of(circuit):
    """A circuit's scores by edge: (from, to) -> score."""
    return {(first, then): score for first, then, score in circuit.edges()}


def pair_ids(generators, language_models, pair, family="llama-lm"):
    """A pair on a tiny model: (extractor, model, ids, corrupt_ids, answer_id, versus_id)."""
    from tests.hook_references import answer_token_id, token_ids

    path = generators[family]
    extractor = language_models[family]
    ids, corrupt_ids = token_ids(path, pair["text"]), token_ids(path, pair["corrupt"])
    answer_id = answer_token_id(path, pair["text"], pair["answer"])
    versus_id = answer_token_id(path, pair["text"], pair["versus"])
    return extractor, extractor.loaded.model, ids, corrupt_ids, answer_id, versus_id


def shape_of(model):
    """(layers, query heads, key/value heads, head size)."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None) or config.n_head
    kv = getattr(config, "num_key_value_heads", None) or heads
    width = getattr(config, "hidden_size", None) or config.n_embd
    size = getattr(config, "head_dim", None) or width // heads
    return len(layers_of(model)), heads, kv, size


def nodes(model):
    """Upstream and downstream node names, in the order the model computes them, and the
    edges: every (upstream, downstream) with the upstream node computed first."""
    layers, heads, kv, _ = shape_of(model)
    return nodes_of_shape(layers, heads, kv)


def nodes_of_shape(layers, heads, kv):
    """:func:`nodes` of a model of ``layers`` layers, ``heads`` query heads and ``kv``
    key/value heads."""
    group = "h" if kv == heads else "kv"
    upstream, downstream = [("input", -1)], []
    for layer in range(layers):
        upstream += [(f"a{layer}.h{head}", 2 * layer) for head in range(heads)]
        upstream.append((f"m{layer}", 2 * layer + 1))
        downstream += [(f"a{layer}.h{head}.q", 2 * layer) for head in range(heads)]
        for letter in "kv":
            downstream += [(f"a{layer}.{group}{unit}.{letter}", 2 * layer) for unit in range(kv)]
        downstream.append((f"m{layer}", 2 * layer + 1))
    downstream.append(("logits", 2 * layers))
    edges = [(u, d) for u, at in upstream for d, reads in downstream if at < reads]
    return [name for name, _ in upstream], [name for name, _ in downstream], edges


def _attention_norm(block):
    for name in ("ln_1", "input_layernorm"):
        if hasattr(block, name):
            return getattr(block, name)
    raise AssertionError(f"no attention input norm in {type(block).__name__}")


def _columns(model, letter, unit):
    """(projection module, its columns of ``letter``'s ``unit``) in a layer's attention."""
    _, heads, _, size = shape_of(model)

    def at(attention):
        if hasattr(attention, "q_proj"):
            return getattr(attention, f"{letter}_proj"), slice(unit * size, (unit + 1) * size)
        start = "qkv".index(letter) * heads * size + unit * size  # GPT-2's c_attn
        return attention.c_attn, slice(start, start + size)

    return at


def run(model, ids, answer_id, versus_id, added=None, embedded=None, graph=False):
    """One forward pass: its metric (of ``answer_id`` and ``versus_id``, or ``answer_id``
    a function of the last position's float32 logits) and every upstream node's output,
    (T, D) each.
    ``added(name, outputs)`` gives what a downstream node's input gets added ((T, D)), or
    None, from the outputs computed so far; ``embedded`` replaces the input embeddings'
    output. With ``graph`` the metric stays a tensor of the graph."""
    _, heads, kv, size = shape_of(model)
    group = "h" if kv == heads else "kv"
    outputs, entering, mid, raw = {}, {}, {}, {}
    hooks = []

    def add(name):
        return None if added is None else added(name, outputs)

    for layer, block in enumerate(layers_of(model)):
        attention = attention_of(block)
        projection = output_projection(model, layer)
        post = _post_attention_norm(block)
        gain = None if post is None else _gain(post)  # before its hooks: it calls the norm

        def enter(_m, args, kwargs, layer=layer):
            entering[layer] = hidden_of(args, kwargs)
            if layer == 0:
                outputs["input"] = entering[layer][0]

        def heads_out(_m, args, layer=layer, projection=projection, post=post):
            z = args[0][0]  # (T, E)
            bias = projection.forward(torch.zeros_like(z[:1]))  # not through these hooks
            shares = []
            for head in range(heads):
                alone = torch.zeros_like(z)
                alone[:, head * size : (head + 1) * size] = z[:, head * size : (head + 1) * size]
                shares.append(projection.forward(alone) - bias)
            if post is None:
                for head, share in enumerate(shares):
                    outputs[f"a{layer}.h{head}"] = share
            else:
                raw[layer] = shares

        def post_normed(_m, args, _out, layer=layer, post=post, gain=gain):
            whole = args[0][0]
            scale = torch.sqrt(whole.pow(2).mean(-1, keepdim=True) + _eps(post))
            for head, share in enumerate(raw[layer]):
                outputs[f"a{layer}.h{head}"] = share / scale * gain.to(share.dtype)

        def keep_mid(_m, args, kwargs, layer=layer):
            mid[layer] = hidden_of(args, kwargs)[0]

        def mlp_added(_m, args, kwargs, layer=layer):
            delta = add(f"m{layer}")
            if delta is None:
                return None
            return with_hidden(args, kwargs, hidden_of(args, kwargs) + delta)

        def leaving(_m, _a, out, layer=layer):
            hidden = out[0] if isinstance(out, tuple) else out
            outputs[f"m{layer}"] = hidden[0] - mid[layer]

        hooks += [
            block.register_forward_pre_hook(enter, with_kwargs=True),
            projection.register_forward_pre_hook(heads_out),
            mlp_input_norm(block).register_forward_pre_hook(keep_mid, with_kwargs=True),
            mlp_input_norm(block).register_forward_pre_hook(mlp_added, with_kwargs=True),
            block.register_forward_hook(leaving),
        ]
        if post is not None:
            hooks.append(post.register_forward_hook(post_normed))
        for letter, count in (("q", heads), ("k", kv), ("v", kv)):
            for unit in range(count):
                module, columns = _columns(model, letter, unit)(attention)
                name = f"a{layer}.{'h' if letter == 'q' else group}{unit}.{letter}"

                def own_input(_m, _a, out, layer=layer, module=module, columns=columns, name=name):
                    delta = add(name)
                    if delta is None:
                        return None
                    norm = _attention_norm(layers_of(model)[layer])
                    copy = entering[layer] + delta
                    changed = out.clone()
                    changed[..., columns] = module.forward(norm.forward(copy))[..., columns]
                    return changed

                hooks.append(module.register_forward_hook(own_input))

    def logits_added(_m, args, kwargs):
        delta = add("logits")
        return None if delta is None else with_hidden(args, kwargs, hidden_of(args, kwargs) + delta)

    hooks.append(final_norm(model).register_forward_pre_hook(logits_added, with_kwargs=True))
    if embedded is not None:
        embeddings = model.get_input_embeddings()
        hooks.append(embeddings.register_forward_hook(lambda _m, _a, _o: embedded))
    try:
        with torch.set_grad_enabled(graph):
            last = model(input_ids=ids).logits[0, -1].float()
            metric = (  # a metric given as a function of the last logits
                answer_id(last) if callable(answer_id) else graph_metric(last, answer_id, versus_id)
            )
    finally:
        for handle in hooks:
            handle.remove()
    return (metric if graph else float(metric)), outputs


def carried_metric(model, ids, corrupt, answer_id, versus_id, carried, positions=None):
    """The metric of the clean run in which each (upstream, downstream) edge of
    ``carried`` carries the corrupted run's value (``corrupt``: its outputs, from
    :func:`run`): d's input gets out_u(corrupt) − out_u(this run) added, summed over its
    carried edges (at ``positions`` alone, where given)."""
    every = {edge: positions for edge in carried}
    return span_carried_metric(model, ids, corrupt, answer_id, versus_id, every)


def _into(by_edge):
    """{downstream: [(upstream, value), …]} of an {(upstream, downstream): value} mapping."""
    into = {}
    for (upstream, downstream), value in by_edge.items():
        into.setdefault(downstream, []).append((upstream, value))
    return into


def span_carried_metric(model, ids, corrupt, answer_id, versus_id, carried):
    """The metric of the clean run in which each edge of ``carried`` (edge -> positions,
    or None: every position) carries the corrupted run's value at those positions alone:
    d's input gets out_u(corrupt) − out_u(this run) added there, summed over its carried
    edges."""
    into = _into(carried)

    def added(name, outputs):
        if name not in into:
            return None
        total = 0
        for upstream, positions in into[name]:
            delta = corrupt[upstream] - outputs[upstream]
            if positions is not None:
                kept = torch.zeros(delta.shape[0], 1, dtype=delta.dtype)
                kept[positions] = 1
                delta = delta * kept
            total = total + delta
        return total

    return run(model, ids, answer_id, versus_id, added)[0]


def masked_metric(model, ids, corrupt, answer_id, versus_id, weights):
    """The metric of the clean run in which each edge (upstream, downstream) of
    ``weights`` carries w × its value in this run + (1 − w) × the corrupted run's: d's input
    gets Σ_u (1 − w_ud)(out_u(corrupt) − out_u(this run)). A tensor of the graph: its
    gradient reaches the weights (tensors)."""
    into = _into(weights)

    def added(name, outputs):
        if name not in into:
            return None
        return sum((1 - weight) * (corrupt[u] - outputs[u]) for u, weight in into[name])

    return run(model, ids, answer_id, versus_id, added, graph=True)[0]


def zeroed(model, ids, answer_id, versus_id):
    """Every upstream node's output replaced by zero (``--ablation zero``'s corrupted
    outputs): zeros shaped as the clean run's."""
    _, clean = run(model, ids, answer_id, versus_id)
    return {name: torch.zeros_like(output) for name, output in clean.items()}


def exact_scores(
    model, ids, corrupt_ids, answer_id, versus_id, edges, corrupt=None, positions=None
):
    """Each edge's metric with it alone carrying the corrupted value (at ``positions``
    alone, where given), less the clean one (``corrupt``: the nodes' corrupted outputs
    given, not run)."""
    clean = run(model, ids, answer_id, versus_id)[0]
    if corrupt is None:
        _, corrupt = run(model, corrupt_ids, answer_id, versus_id)
    return {
        edge: carried_metric(model, ids, corrupt, answer_id, versus_id, [edge], positions) - clean
        for edge in edges
    }


def estimated_scores(
    model, ids, corrupt_ids, answer_id, versus_id, steps=None, corrupt=None, by_position=False
):
    """Every edge's (out_u(corrupt) − out_u(clean)) · ∂metric/∂in_d, summed over positions
    (``by_position``: each position's term, (T,)): the gradient at the clean run, or
    averaged over ``steps`` runs whose input embeddings are k/steps of the way from the
    corrupted ones to the clean ones, k = 1…steps. ``corrupt``: the nodes' corrupted
    outputs given (an ablation's), not run."""
    _, downstream, edges = nodes(model)
    _, clean = run(model, ids, answer_id, versus_id)
    if corrupt is None:
        _, corrupt = run(model, corrupt_ids, answer_id, versus_id)
    points = [None] if steps is None else [(k + 1) / steps for k in range(steps)]
    if steps is not None:
        embeddings = model.get_input_embeddings()
        with torch.no_grad():
            clean_embedded, corrupt_embedded = embeddings(ids), embeddings(corrupt_ids)
    gradients = {name: 0 for name in downstream}
    for point in points:
        leaves = {name: torch.zeros_like(clean["input"], requires_grad=True) for name in downstream}
        embedded = (
            None
            if point is None
            else corrupt_embedded + point * (clean_embedded - corrupt_embedded)
        )
        metric, _ = run(
            model,
            ids,
            answer_id,
            versus_id,
            lambda name, _outputs, leaves=leaves: leaves[name],
            embedded,
            graph=True,
        )
        found = torch.autograd.grad(metric, list(leaves.values()), allow_unused=True)
        for name, gradient in zip(leaves, found, strict=True):
            if gradient is not None:
                gradients[name] = gradients[name] + gradient / len(points)
    if by_position:
        return {(u, d): ((corrupt[u] - clean[u]) * gradients[d]).sum(-1) for u, d in edges}
    return {(u, d): float(((corrupt[u] - clean[u]) * gradients[d]).sum()) for u, d in edges}


def interpolated_scores(model, ids, answer_id, versus_id, ablated, steps):
    """EAP-IG over activations (EAP-IG's ``get_scores_ig_activations``), given each
    upstream node's ablated output: for each group of nodes in turn (the input; a layer's
    heads; its MLP) and k = 1…steps, the clean run with the group's outputs held k/steps
    of the way from their ablated values to their clean ones — each downstream input above
    a node of the group gets (held − its output in this run) added, which holds the value
    and sends no gradient back through it — and ∂metric/∂in_d averaged over all those
    runs; each edge's (ablated_u − clean_u) · that gradient, summed over positions."""
    upstream, downstream, edges = nodes(model)
    _, clean = run(model, ids, answer_id, versus_id)
    groups = [["input"]]
    for layer in range(shape_of(model)[0]):
        groups.append([name for name in upstream if name.startswith(f"a{layer}.")])
        groups.append([f"m{layer}"])
    reads = set(edges)
    points = [(group, (k + 1) / steps) for group in groups for k in range(steps)]
    gradients = dict.fromkeys(downstream, 0)
    for group, share in points:
        held = {u: share * clean[u] + (1 - share) * ablated[u] for u in group}
        leaves = {name: torch.zeros_like(clean["input"], requires_grad=True) for name in downstream}

        def added(name, outputs, leaves=leaves, held=held):
            moved = [held[u] - outputs[u] for u in held if (u, name) in reads]
            return leaves[name] + sum(moved) if moved else leaves[name]

        metric, _ = run(model, ids, answer_id, versus_id, added, graph=True)
        found = torch.autograd.grad(metric, list(leaves.values()), allow_unused=True)
        for name, gradient in zip(leaves, found, strict=True):
            if gradient is not None:
                gradients[name] = gradients[name] + gradient / len(points)
    return {(u, d): float(((ablated[u] - clean[u]) * gradients[d]).sum()) for u, d in edges}


def copied_scores(model, ids, corrupt_ids, answer_id, versus_id):
    """EAP's scores as EAP-IG's graph has them where key/value heads are grouped: each
    query head reads a key and a value of its own (``a{l}.h{h}<k>``), so an edge into a
    key/value head's input is an edge into each query head's copy. The copies are the
    model's own: its ``repeat_kv`` output, one (T, Dh) slice a query head; a copy's
    gradient is carried back to its key/value head's input (through the rotary embedding
    and the projection, by autograd) alone. (upstream, (layer, query head, letter)) ->
    score."""
    layers, heads, kv, _ = shape_of(model)
    group = heads // kv
    upstream, downstream, _ = nodes(model)
    _, clean = run(model, ids, answer_id, versus_id)
    _, corrupt = run(model, corrupt_ids, answer_id, versus_id)
    leaves = {name: torch.zeros_like(clean["input"], requires_grad=True) for name in downstream}
    repeated = []  # (what repeat_kv got, what it gave): a layer's keys, then its values
    modeling = sys.modules[type(attention_of(layers_of(model)[0])).__module__]
    real = modeling.repeat_kv

    def recorded(states, times):
        copies = real(states, times)
        repeated.append((states, copies))
        return copies

    own = model.config._attn_implementation
    model.set_attn_implementation("eager")  # the attention that calls repeat_kv
    try:
        with mock.patch.object(modeling, "repeat_kv", recorded):
            metric, _ = run(
                model, ids, answer_id, versus_id, lambda name, _o: leaves[name], graph=True
            )
    finally:
        model.set_attn_implementation(own)
    assert len(repeated) == 2 * layers, "a key and a value call of repeat_kv a layer"
    copies_gradients = torch.autograd.grad(
        metric, [copies for _, copies in repeated], retain_graph=True
    )
    scores = {}
    for call, ((states, _), gradient) in enumerate(zip(repeated, copies_gradients, strict=True)):
        layer, letter = divmod(call, 2)
        letter = "kv"[letter]
        for head in range(heads):
            unit = head // group
            alone = torch.zeros_like(states)  # (1, K, T, Dh): this copy's gradient only
            alone[:, unit] = gradient[:, head]
            (input_gradient,) = torch.autograd.grad(
                states, leaves[f"a{layer}.kv{unit}.{letter}"], alone, retain_graph=True
            )
            for name in upstream[: 1 + layer * (heads + 1)]:  # written before layer's reads
                change = corrupt[name] - clean[name]
                scores[name, (layer, head, letter)] = float((change * input_gradient).sum())
    return scores


# Circuits chosen from scores, written from EAP-IG's definitions (hannamw/EAP-IG's
# Graph.apply_topn, apply_greedy, apply_threshold and prune) over edges named as above, a
# node at a time: no array, none of attnviz's selection code. A head's own inputs are its
# query and its key/value head's key and value (shared by the heads of its group); an
# MLP's its input; the logits are always in the circuit, and the input node needs no
# edge into it.


def owners(layers, heads, kv):
    """Each downstream node's name -> the upstream nodes it is an input of."""
    group = heads // kv
    found = {}
    for name in nodes_of_shape(layers, heads, kv)[1]:
        parts = name.split(".")
        if name == "logits":
            found[name] = set()
        elif len(parts) == 1:  # an MLP's input
            found[name] = {name}
        elif parts[2] == "q":
            found[name] = {f"{parts[0]}.{parts[1]}"}
        else:
            unit = int(parts[1].lstrip("hkv"))
            members = range(unit * group, (unit + 1) * group) if kv != heads else [unit]
            found[name] = {f"{parts[0]}.h{head}" for head in members}
    return found


def top_edges(scores, count):
    """The ``count`` edges of largest |score| (``scores``: edge -> score, in the graph's
    order; ties keep it)."""
    ordered = sorted(scores, key=lambda edge: -abs(scores[edge]))  # a stable sort
    return set(ordered[:count])


def signed_edges(scores, count):
    """MIB's signed circuit (its evaluation's ``apply_topn(absolute=False)``): the
    ``count`` edges of largest score in MIB's sign, the logit difference as a loss, which
    is minus attnviz's (ties keep the graph's order)."""
    mib_scores = {edge: -score for edge, score in scores.items()}
    ordered = sorted(mib_scores, key=lambda edge: -mib_scores[edge])  # a stable sort
    return set(ordered[:count])


def ilp_edges(shape, scores, count):
    """The ``count`` edges of largest summed |score| that form a circuit without a dead
    end (one :func:`prune` leaves as it is), by trying every set of ``count`` edges: the
    shared task's integer program's answer, on graphs small enough to search."""
    owned = owners(*shape)
    best, found = -1.0, None
    for taken in itertools.combinations(scores, count):
        if prune(taken, owned) != set(taken):
            continue
        kept = sum(abs(scores[edge]) for edge in taken)
        if kept > best:
            best, found = kept, set(taken)
    return found


def threshold_edges(scores, threshold):
    return {edge for edge, score in scores.items() if abs(score) >= threshold}


def greedy_edges(scores, count, owned):
    """From the logits up: each step takes the candidate of largest |score|, the
    candidates being the edges into the logits and into any input of a node taken."""
    taken, joined = set(), set()
    candidates = [edge for edge in scores if edge[1] == "logits"]
    while count > 0 and candidates:
        best = max(candidates, key=lambda edge: abs(scores[edge]))
        candidates.remove(best)
        taken.add(best)
        count -= 1
        upstream = best[0]
        if upstream not in joined:
            joined.add(upstream)
            candidates += [
                edge
                for edge in scores
                if upstream in owned[edge[1]] and edge not in taken and edge not in candidates
            ]
    return taken


def prune(kept, owned):
    """Dead ends out, until nothing changes: a node stays where an edge leaves it and one
    enters one of its inputs (the input node needs none); an edge where both ends stay."""
    kept = set(kept)
    while True:
        leaving = {first for first, _ in kept}
        entering = {node for _, then in kept for node in owned[then]} | {"input"}
        staying = leaving & entering
        left = {
            (first, then)
            for first, then in kept
            if first in staying and (then == "logits" or owned[then] & staying)
        }
        if left == kept:
            return kept
        kept = left


def prune_by_span(kept, owned):
    """Dead ends out of (edge, span) pairs, span by span, until nothing changes: a node at
    a span stays where a pair leaves it at that span and one enters one of its inputs
    there (its query, its MLP's input) or at any span (its keys, its values: a head reads
    every position's); a pair where its node stays at its span and a node it is an input
    of stays at that span (a query, an MLP's input) or at any (a key, a value)."""

    def across(then):  # a key's or a value's input: read at every position
        return then.endswith((".k", ".v"))

    kept = set(kept)
    while True:
        leaving = {(first, span) for (first, _), span in kept}
        entering = {("input", span) for _, span in kept}
        for (_, then), span in kept:
            for node in owned[then]:
                if across(then):
                    entering |= {(node, other) for _, other in kept}
                else:
                    entering.add((node, span))
        staying = leaving & entering
        stays_somewhere = {node for node, _ in staying}
        left = set()
        for (first, then), span in kept:
            if across(then):  # read at every position: its node staying at any span
                fed = bool(owned[then] & stays_somewhere)
            else:
                fed = then == "logits" or any((node, span) in staying for node in owned[then])
            if (first, span) in staying and fed:
                left.add(((first, then), span))
        if left == kept:
            return kept
        kept = left


def chosen(shape, scores, select, asked, pruned):
    """The edges a circuit holds, chosen from ``scores`` (edge name pair -> score) by
    ``select`` with ``asked`` (a size, or a threshold), its dead ends out if ``pruned``,
    in a model of ``shape`` (layers, query heads, key/value heads)."""
    in_order = {edge: scores[edge] for edge in nodes_of_shape(*shape)[2]}  # the graph's order
    owned = owners(*shape)
    if select == "threshold":
        kept = threshold_edges(in_order, asked)
    elif select == "greedy":
        kept = greedy_edges(in_order, int(asked), owned)
    elif select == "signed":
        kept = signed_edges(in_order, int(asked))
    elif select == "ilp":
        kept = ilp_edges(shape, in_order, int(asked))
    else:
        kept = top_edges(in_order, int(asked))
    return prune(kept, owned) if pruned else kept


def node_circuit(shape, node_scores, select, asked, pruned):
    """A node circuit (EAP-IG's apply_topn(level="node") and apply_threshold): the nodes
    of largest |score| (of largest score in MIB's sign for ``signed``; of |score| at
    least ``asked`` for ``threshold``), and every edge from one of them
    into an input of one of them or into the logits; dead ends out if ``pruned``."""
    names, _, edges = nodes_of_shape(*shape)
    owned = owners(*shape)
    if select == "threshold":
        chosen = {name for name in names if abs(node_scores[name]) >= asked}
    elif select == "signed":  # MIB's sign, minus attnviz's
        chosen = set(sorted(names, key=lambda name: node_scores[name])[: int(asked)])
    else:
        chosen = set(sorted(names, key=lambda name: -abs(node_scores[name]))[: int(asked)])
    kept = {
        (first, then)
        for first, then in edges
        if first in chosen and (then == "logits" or owned[then] & chosen)
    }
    return prune(kept, owned) if pruned else kept


def circuits_measured(model, circuit):
    """(the edges it holds, its faithfulness) of the circuit and each of its curve's,
    each circuit's edges chosen by the reference here (and held to the circuit's own)."""
    scores = {(first, then): score for first, then, score in circuit.edges()}
    shape = shape_of(model)[:3]

    def kept_of(asked, select):
        if circuit.level == "node":
            named = dict(zip(circuit.graph.upstream, circuit.node_scores, strict=True))
            return node_circuit(shape, named, select, asked, circuit.prune)
        return chosen(shape, scores, select, asked, circuit.prune)

    kept = kept_of(circuit.asked, circuit.select)
    assert kept == {(first, then) for first, then, _ in circuit.kept_edges()}
    measured = [(kept, circuit.faithfulness)]
    for point in circuit.curve:
        kept = kept_of(point.asked, point.select)
        assert len(kept) == point.kept
        measured.append((kept, point.faithfulness))
    return measured


# MIB's integrated faithfulness (Mueller et al. 2025; hannamw/MIB-circuit-track's
# evaluation): circuits of 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50 and 100 percent of the
# graph's edges (or nodes), each the top int(percent / 100 × count); CPR the trapezoid
# area under their faithfulness over the fractions, CMD the one between it and 1.
MIB_PERCENT = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)


def mib_fractions():
    return [percent / 100 for percent in MIB_PERCENT]


def mib_reported(absolute, signed=None):
    """(CPR, CMD) as MIB's print_results.py reports them (hannamw/MIB-circuit-track, commit
    b759df3): CPR the area under the curve of its abs-False run (the circuits of largest
    signed score), where there is one, else under the abs-True run's (largest |score|);
    CMD the area between the abs-True run's curve and 1. Each argument: the faithfulness
    at each of MIB's fractions."""
    cpr, _ = mib_areas(absolute if signed is None else signed)
    _, cmd = mib_areas(absolute)
    return cpr, cmd


def mib_areas(faithfulness):
    """(CPR, CMD) of the faithfulness at each of MIB's fractions."""
    fractions = mib_fractions()
    under = between = 0.0
    for k in range(1, len(fractions)):
        width = fractions[k] - fractions[k - 1]
        under += width * (faithfulness[k - 1] + faithfulness[k]) / 2
        between += width * (abs(faithfulness[k - 1] - 1) + abs(faithfulness[k] - 1)) / 2
    return under, between


def kl_from(model, ids):
    """KL(clean ‖ run) of the next token as a function of a run's last logits, the clean
    run that of ``ids``: Σ p_clean (log p_clean − log p_run)."""
    with torch.no_grad():
        clean = model(input_ids=ids).logits[0, -1].double()
    p, log_p = clean.softmax(-1), clean.log_softmax(-1)

    def kl(last):
        return (p * (log_p - last.double().log_softmax(-1))).sum()

    return kl
