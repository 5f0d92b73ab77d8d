"""One head's attention, step by step, with the real numbers of the user's sentence.

The numbers come from the same stack ``show`` runs: the inputs of the chosen
attention module are captured while the stack runs, and every step is then
computed from them in the open, one head at a time, as on a blackboard. The
explained weights and output are checked against what the module returned.

Shape letters: T query tokens, S key tokens, D model width, Dh head width (d_k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnviz.errors import AttnvizError, UsageError
from attnviz.selection import resolve


def _plain(values: np.ndarray) -> list:
    """Numbers for JSON, which has no −∞: a key hidden by the mask is written as null."""
    if values.ndim > 1:
        return [_plain(row) for row in values]
    return [None if value == -math.inf else float(value) for value in values]


@dataclass
class Step:
    name: str  # a short key: "X", "W_Q", "Q", "scores", …
    formula: str  # how it is computed, e.g. "Q = X · W_Q + b_Q"
    matrix: np.ndarray
    rows: list[str]  # a label per row
    columns: list[str]  # a label per column
    note: str = ""  # why this step, in a sentence or two

    @property
    def shape(self) -> str:
        return " × ".join(map(str, self.matrix.shape))


@dataclass
class Explanation:
    model: str
    mode: str
    layer: int
    head: int
    query_tokens: list[str]
    key_tokens: list[str]
    d_model: int
    d_k: int
    steps: list[Step] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)  # each output row as a sum of values

    def step(self, name: str) -> Step:
        return next(step for step in self.steps if step.name == name)

    def to_dict(self) -> dict[str, Any]:
        """Every intermediate matrix by name; -∞ (hidden by the mask) is written as null."""
        return {
            "schema_version": 1,
            "model": self.model,
            "mode": self.mode,
            "layer": self.layer,
            "head": self.head,
            "query_tokens": self.query_tokens,
            "key_tokens": self.key_tokens,
            "d_model": self.d_model,
            "d_k": self.d_k,
            "steps": {
                step.name: {
                    "formula": step.formula,
                    "shape": list(step.matrix.shape),
                    "rows": step.rows,
                    "columns": step.columns,
                    "matrix": _plain(np.atleast_2d(step.matrix)),
                    "note": step.note,
                }
                for step in self.steps
            },
            "sentences": self.sentences,
        }


def _dims(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def weighted_sum_sentence(query: str, weights: np.ndarray, keys: list[str], limit: int = 8) -> str:
    """``cool = 0.20·v(attention) + 0.50·v(is) + 0.30·v(cool)``: zero weights left out."""
    terms = [f"{weight:.2f}·v({key})" for weight, key in zip(weights, keys, strict=True) if weight]
    if len(terms) > limit:
        terms = [*terms[: limit - 1], f"… ({len(terms) - limit + 1} more)"]
    return f"{query} = " + " + ".join(terms)


def explain_builtin(
    text: str,
    *,
    mode: str = "self",
    target: str | None = None,
    layer: int | str = 0,
    head: int | str = 0,
    config: Any = None,
    lowercase: bool = True,
) -> Explanation:
    """Walk through head ``head`` of layer ``layer`` of the built-in stack on ``text``."""
    import torch

    from attnviz.builtin import BuiltinConfig, BuiltinTransformer
    from attnviz.core import Mode, check_text
    from attnviz.tokens import tokenize

    config = config or BuiltinConfig()
    mode = Mode(mode).value
    check_text(text, "text")
    if (mode == "cross") != (target is not None):
        raise UsageError("cross mode needs --target, and --target needs cross mode")
    (layer_index,) = _one(layer, config.layers, "layer")
    (head_index,) = _one(head, config.heads, "head")
    source = [token.text for token in tokenize(text, lowercase=lowercase)]
    queries = source
    targets = None
    if mode == "cross":
        check_text(target, "target")
        targets = queries = [token.text for token in tokenize(target, lowercase=lowercase)]
    stack = BuiltinTransformer(config)
    block = stack.encoder[layer_index] if mode != "cross" else stack.decoder[layer_index]
    module = block.attention if mode != "cross" else block.cross_attention
    seen: dict[str, Any] = {}

    def record_inputs(_module, args, kwargs):  # the attention's own inputs, as it received them
        seen["inputs"], seen["causal"] = args[:3], kwargs.get("causal", False)

    def record_outputs(_module, _args, _kwargs, output):
        seen["output"], seen["weights"] = output

    handles = [
        module.register_forward_pre_hook(record_inputs, with_kwargs=True),
        module.register_forward_hook(record_outputs, with_kwargs=True),
    ]
    try:
        stack.attention_maps(source, mode=mode, target_tokens=targets, layers=[layer_index])
    finally:
        for handle in handles:
            handle.remove()
    with torch.inference_mode():
        explanation = _walk_through(
            module,
            [tensor[0] for tensor in seen["inputs"]],
            causal=seen["causal"],
            head=head_index,
            queries=queries,
            keys=source,
        )
    explanation.model, explanation.mode, explanation.layer = config.name, mode, layer_index
    _check_against(explanation, seen["weights"][0, head_index], seen["output"][0])
    return explanation


def _one(selection: int | str, count: int, what: str) -> list[int]:
    chosen = resolve(selection, count, what)
    if len(chosen) != 1:
        raise UsageError(f"explain walks through one {what}: give a single --{what} index")
    return chosen


def _walk_through(
    module: Any, inputs: list[Any], *, causal: bool, head: int, queries: list[str], keys: list[str]
) -> Explanation:
    import torch

    x_query, x_key, x_value = inputs  # (T, D), (S, D), (S, D)
    same_input = x_query is x_key or torch.equal(x_query, x_key)
    w_q, b_q, w_k, b_k, w_v, b_v = module.head_projections(head)  # W: (D, Dh), b: (Dh,)
    d_model, d_k = w_q.shape
    q = x_query @ w_q + b_q  # (T, Dh)
    k = x_key @ w_k + b_k  # (S, Dh)
    v = x_value @ w_v + b_v  # (S, Dh)
    scores = q @ k.T  # (T, S)
    scaled = scores / math.sqrt(d_k)
    hidden = torch.ones_like(scaled, dtype=torch.bool).triu(1) if causal else None
    mask = (
        torch.zeros_like(scaled)
        if hidden is None
        else torch.zeros_like(scaled).masked_fill(hidden, -math.inf)
    )
    weights = torch.softmax(scaled + mask, dim=-1)  # (T, S)
    head_output = weights @ v  # (T, Dh)
    every_head = []
    for other in range(module.num_heads):
        o_q, ob_q, o_k, ob_k, o_v, ob_v = module.head_projections(other)
        o_scaled = (x_query @ o_q + ob_q) @ (x_key @ o_k + ob_k).T / math.sqrt(d_k)
        o_weights = torch.softmax(o_scaled + mask, dim=-1)
        every_head.append(o_weights @ (x_value @ o_v + ob_v))
    concatenated = torch.cat(every_head, dim=-1)  # (T, H·Dh)
    w_o = module.out_proj.weight.T  # (H·Dh, D)
    b_o = module.out_proj.bias if module.out_proj.bias is not None else torch.zeros(d_model)
    projected = concatenated @ w_o + b_o  # (T, D)

    dims, head_dims = _dims("d", d_model), _dims("k", d_k)
    steps: list[Step] = []

    def add(
        name: str, formula: str, matrix: Any, rows: list[str], columns: list[str], note: str = ""
    ) -> None:
        steps.append(Step(name, formula, matrix.numpy(), rows, columns, note))

    x_note = (
        "Each row is a token's vector as this attention layer receives it: its embedding plus "
        "its position, carried through the layers below and normalised (LayerNorm)."
    )
    if same_input:
        x_name = kv_name = "X"
        add("X", "X", x_query, queries, dims, x_note)
    else:
        x_name, kv_name = "X_q", "X_kv"
        add(
            "X_q",
            "X_q: the target tokens, whose rows become queries",
            x_query,
            queries,
            dims,
            x_note + " Here they come from the decoder, over the target text.",
        )
        add(
            "X_kv",
            "X_kv: the source tokens, whose rows become keys and values",
            x_key,
            keys,
            dims,
            "They come from the encoder, over the source text.",
        )
    add(
        "W_Q",
        f"W_Q of head {head}",
        w_q,
        dims,
        head_dims,
        "This head's query projection: what a token looks for.",
    )
    add(
        "W_K",
        f"W_K of head {head}",
        w_k,
        dims,
        head_dims,
        "The key projection: what a token offers to be found by.",
    )
    add(
        "W_V",
        f"W_V of head {head}",
        w_v,
        dims,
        head_dims,
        "The value projection: what a token passes on when it is attended to.",
    )
    add("Q", f"Q = {x_name} · W_Q + b_Q", q, queries, head_dims)
    add("K", f"K = {kv_name} · W_K + b_K", k, keys, head_dims)
    add("V", f"V = {kv_name} · W_V + b_V", v, keys, head_dims)
    add(
        "scores",
        "Q · Kᵀ",
        scores,
        queries,
        keys,
        "Row t, column s: how well query t matches key s, as a dot product.",
    )
    add(
        "scaled",
        f"Q · Kᵀ / √d_k   (√{d_k} = {math.sqrt(d_k):.3f})",
        scaled,
        queries,
        keys,
        "Dot products of d_k-dimensional vectors grow like √d_k; unscaled, they would push "
        "the softmax into saturation: all weight on one key, and vanishing gradients.",
    )
    add("mask", "M", mask, queries, keys, _mask_note(causal, same_input))
    add(
        "weights",
        "A = softmax(Q · Kᵀ / √d_k + M), row by row",
        weights,
        queries,
        keys,
        "Each weight is the exp of its score over the sum of its row's exps: non-negative, and "
        "every row sums to 1." + (" exp(−∞) = 0, so hidden keys get exactly 0." if causal else ""),
    )
    add(
        "head_output",
        f"head_{head} = A · V",
        head_output,
        queries,
        head_dims,
        "Each output row is a weighted sum of V's rows, weighted by that row of A.",
    )
    last = module.num_heads - 1
    add(
        "concat",
        f"C = [head_0 … head_{last}]",
        concatenated,
        queries,
        _dims("c", concatenated.shape[1]),
        "Every head does the same with its own W_Q, W_K, W_V; their outputs sit side by side.",
    )
    add(
        "W_O",
        "W_O",
        w_o,
        _dims("c", w_o.shape[0]),
        dims,
        "The output projection mixes the heads back into one d_model-wide vector per token.",
    )
    add(
        "output",
        "output = C · W_O + b_O",
        projected,
        queries,
        dims,
        "This is what the layer adds to each token's vector (the residual connection).",
    )
    sentences = [
        weighted_sum_sentence(query, row, keys)
        for query, row in zip(queries, weights.numpy(), strict=True)
    ]
    return Explanation(
        model="",
        mode="",
        layer=0,
        head=head,
        query_tokens=queries,
        key_tokens=keys,
        d_model=d_model,
        d_k=d_k,
        steps=steps,
        sentences=sentences,
    )


def _mask_note(causal: bool, same_input: bool) -> str:
    if causal:
        return (
            "Masked (causal) attention: −∞ above the diagonal, so a token cannot see the tokens "
            "after it; 0 elsewhere."
        )
    if not same_input:
        return (
            "Cross-attention: rows are target tokens, columns source tokens; every target token "
            "may look at the whole source, so nothing is masked."
        )
    return "Self-attention: every token may look at every token, so nothing is masked (all 0)."


def _check_against(explanation: Explanation, weights: Any, output: Any) -> None:
    """The walk-through must reproduce the stack's own numbers; a mismatch is a bug."""
    if not np.allclose(explanation.step("weights").matrix, weights.numpy(), atol=1e-5):
        raise AttnvizError("the explained weights differ from the stack's own (a bug)")
    if not np.allclose(explanation.step("output").matrix, output.numpy(), atol=1e-4):
        raise AttnvizError("the explained output differs from the stack's own (a bug)")


@dataclass
class QueryExplanation:
    """One query row of a pretrained model's head, from its dot products to its weights."""

    model: str
    mode: str
    layer: int
    head: int
    query_index: int
    query_token: str
    key_tokens: list[str]
    scale: float  # what the model multiplies the dot products by (1/√d_k for most)
    dots: np.ndarray  # q · k for every key
    scaled: np.ndarray  # dots · scale
    mask: np.ndarray  # what the model adds before the softmax: 0, −∞ (hidden), or a bias
    weights: np.ndarray  # softmax(scaled + mask), computed here
    model_weights: np.ndarray  # the model's own attention row, for comparison

    @property
    def largest_difference(self) -> float:
        return float(np.abs(self.weights - self.model_weights).max())

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "model": self.model,
            "mode": self.mode,
            "layer": self.layer,
            "head": self.head,
            "query_index": self.query_index,
            "query_token": self.query_token,
            "key_tokens": self.key_tokens,
            "scale": self.scale,
            "dots": _plain(self.dots),
            "scaled": _plain(self.scaled),
            "mask": _plain(self.mask),
            "weights": _plain(self.weights),
            "model_weights": _plain(self.model_weights),
            "largest_difference": self.largest_difference,
        }


_RECORDING = "attnviz_recording"


def explain_pretrained(
    loaded: Any,
    text: str,
    *,
    mode: str | None = None,
    target: str | None = None,
    layer: int | str = 0,
    head: int | str = 0,
    query: int = 0,
) -> QueryExplanation:
    """The dot products of one query with every key, scaled, masked and softmaxed, for a
    pretrained model, next to the model's own attention row.

    The queries and keys are taken from inside the model: attnviz registers an
    attention function (and its mask) with transformers that records what the
    chosen module passes to attention (after rotary embeddings and the like)
    and runs the model's own eager attention. The model's own row comes from a
    separate, ordinary eager run, so a disagreement would show.
    """
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    from attnviz.pretrained import Family, _encode, _labels, extract_pretrained, resolve_mode

    mode = resolve_mode(loaded, mode, target)
    stream = {"self": "self", "masked": "self", "cross": "cross"}[mode]
    if loaded.family is Family.ENCODER_DECODER and mode == "masked":
        stream = "decoder"
    modules = loaded.streams.get(stream) or []
    (layer_index,) = _one(layer, len(modules), "layer")
    target_module = modules[layer_index][0]
    inside = {id(module) for module in target_module.modules()}
    seen: dict[str, Any] = {}

    def recording(module, query_states, key_states, value, attention_mask, *args, **kwargs):
        run = __import__(type(module).__module__, fromlist=["_"]).eager_attention_forward
        output, weights = run(
            module, query_states, key_states, value, attention_mask, *args, **kwargs
        )
        if id(module) in inside and "query" not in seen:
            scaling = kwargs.get("scaling", args[0] if args else None)
            additive = [
                part for part in (attention_mask, kwargs.get("position_bias")) if part is not None
            ]
            seen.update(
                query=query_states,
                key=key_states,
                mask=sum(additive) if additive else None,
                scaling=scaling,
            )
        return output, weights

    AttentionInterface.register(_RECORDING, recording)
    # The same masks eager attention gets: causal and padding masks as additive −∞.
    AttentionMaskInterface.register(_RECORDING, eager_mask)
    tokenizer = loaded.tokenizer
    source = _encode(tokenizer, text, loaded.max_length, "text")
    inputs = {"input_ids": torch.tensor([source["input_ids"]])}
    queries = keys = (source, text)
    if loaded.family is Family.ENCODER_DECODER:
        if mode == "self":
            inputs["decoder_input_ids"] = torch.zeros(1, 1, dtype=torch.long)
        else:
            decoded = _encode(tokenizer, target, loaded.max_length, "target", target=True)
            inputs["decoder_input_ids"] = torch.tensor([decoded["input_ids"]])
            queries = (decoded, target)
            keys = queries if mode == "masked" else keys
    loaded.model.set_attn_implementation(_RECORDING)
    try:
        with torch.inference_mode():
            loaded.model(**inputs)
    except Exception as error:  # an architecture whose attention cannot be recorded this way
        raise AttnvizError(f"cannot follow the attention of {loaded.name}: {error}") from None
    finally:
        loaded.model.set_attn_implementation("eager")
    if "query" not in seen:
        raise AttnvizError(
            f"{type(target_module).__name__} of {loaded.name} computes its attention without "
            "transformers' attention functions: explain cannot follow it"
        )
    query_states, key_states = seen["query"][0], seen["key"][0]  # (H, T, Dh), (H_kv, S, Dh)
    own = extract_pretrained(loaded, text, mode=mode, target=target, layers=[layer_index])
    heads = query_states.shape[0]
    (head_index,) = _one(head, heads, "head")
    query_labels, _ = _labels(tokenizer, *queries)
    key_labels, _ = _labels(tokenizer, *keys)
    if not -len(query_labels) <= query < len(query_labels):
        raise UsageError(
            f"--query {query} is out of range: there are {len(query_labels)} query tokens "
            f"(0 to {len(query_labels) - 1})"
        )
    query = query % len(query_labels)
    kv_head = head_index // (heads // key_states.shape[0])  # grouped-query attention shares keys
    scale = seen["scaling"] if seen["scaling"] is not None else query_states.shape[-1] ** -0.5
    q = query_states[head_index, query].double()
    k = key_states[kv_head, : len(key_labels)].double()
    dots = k @ q  # (S,)
    scaled = dots * scale
    mask = torch.zeros_like(scaled)
    if seen["mask"] is not None:
        row = seen["mask"][0, head_index if seen["mask"].shape[1] > 1 else 0, query]
        mask = row[: len(key_labels)].double()
        mask = torch.where(mask <= torch.finfo(seen["mask"].dtype).min / 2, -math.inf, mask)
    weights = torch.softmax(scaled + mask, dim=-1)
    return QueryExplanation(
        model=loaded.name,
        mode=mode,
        layer=layer_index,
        head=head_index,
        query_index=query,
        query_token=query_labels[query],
        key_tokens=key_labels,
        scale=float(scale),
        dots=dots.numpy(),
        scaled=scaled.numpy(),
        mask=mask.numpy(),
        weights=weights.numpy(),
        model_weights=own.weights[0, head_index, query].astype(np.float64),
    )
