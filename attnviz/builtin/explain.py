"""One head of the built-in stack, step by step, with the real numbers of the user's sentence.

The numbers come from the same stack ``show`` runs: the inputs of the chosen
attention module are captured while the stack runs, and every step is then
computed from them in the open, one head at a time, as on a blackboard. The
explained weights and output are checked against what the module returned.

Shape letters: T query tokens, S key tokens, D model width, Dh head width
(d_k in the formulas), H heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from attnviz.choices import Mode
from attnviz.errors import AttnvizError
from attnviz.schema import fields_document, json_numbers

if TYPE_CHECKING:
    from attnviz.builtin.attention import MultiHeadAttention
    from attnviz.builtin.model import BuiltinTransformer


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
    mode: Mode
    layer: int
    head: int
    query_tokens: list[str]
    key_tokens: list[str]
    d_model: int
    head_dim: int
    steps: list[Step] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)  # each output row as a sum of values

    def step(self, name: str) -> Step:
        return next(step for step in self.steps if step.name == name)

    def to_dict(self) -> dict[str, Any]:
        """Every intermediate matrix by name; -∞ (hidden by the mask) is written as null."""
        steps = {
            step.name: {
                "formula": step.formula,
                "shape": list(step.matrix.shape),
                "rows": step.rows,
                "columns": step.columns,
                "matrix": json_numbers(np.atleast_2d(step.matrix)),
                "note": step.note,
            }
            for step in self.steps
        }
        return fields_document(self, steps=steps)


def weighted_sum_sentence(query: str, weights: np.ndarray, keys: list[str], limit: int = 8) -> str:
    """``cool = 0.20·v(attention) + 0.50·v(is) + 0.30·v(cool)``: zero weights left out."""
    terms = [f"{weight:.2f}·v({key})" for weight, key in zip(weights, keys, strict=True) if weight]
    if len(terms) > limit:
        terms = [*terms[: limit - 1], f"… ({len(terms) - limit + 1} more)"]
    return f"{query} = " + " + ".join(terms)


_X_NOTE = (
    "Each row is a token's vector as this attention layer receives it: its embedding plus "
    "its position, carried through the layers below and normalised (LayerNorm)."
)

# The walk-through, in order: name, formula, row labels, column labels, note.
# Formulas and notes are filled in with the values of the walk-through at hand
# ({x}, {kv}, {head}, {last}, {d_k}, {root}, {mask_note}, {hidden_note}).
# Labels name a list: queries, keys, dims (d_model), head_dims, concat.
STEPS: tuple[tuple[str, str, str, str, str], ...] = (
    ("X", "X", "queries", "dims", _X_NOTE),
    ("X_q", "X_q: the target tokens, whose rows become queries", "queries", "dims",
     _X_NOTE + " Here they come from the decoder, over the target text."),
    ("X_kv", "X_kv: the source tokens, whose rows become keys and values", "keys", "dims",
     "They come from the encoder, over the source text."),
    ("W_Q", "W_Q of head {head}", "dims", "head_dims",
     "This head's query projection: what a token looks for."),
    ("W_K", "W_K of head {head}", "dims", "head_dims",
     "The key projection: what a token offers to be found by."),
    ("W_V", "W_V of head {head}", "dims", "head_dims",
     "The value projection: what a token passes on when it is attended to."),
    ("Q", "Q = {x} · W_Q + b_Q", "queries", "head_dims", ""),
    ("K", "K = {kv} · W_K + b_K", "keys", "head_dims", ""),
    ("V", "V = {kv} · W_V + b_V", "keys", "head_dims", ""),
    ("scores", "Q · Kᵀ", "queries", "keys",
     "Row t, column s: how well query t matches key s, as a dot product."),
    ("scaled", "Q · Kᵀ / √d_k   (√{d_k} = {root:.3f})", "queries", "keys",
     "Dot products of d_k-dimensional vectors grow like √d_k; unscaled, they would push "
     "the softmax into saturation: all weight on one key, and vanishing gradients."),
    ("mask", "M", "queries", "keys", "{mask_note}"),
    ("weights", "A = softmax(Q · Kᵀ / √d_k + M), row by row", "queries", "keys",
     "Each weight is the exp of its score over the sum of its row's exps: non-negative, and "
     "every row sums to 1.{hidden_note}"),
    ("head_output", "head_{head} = A · V", "queries", "head_dims",
     "Each output row is a weighted sum of V's rows, weighted by that row of A."),
    ("concat", "C = [head_0 … head_{last}]", "queries", "concat",
     "Every head does the same with its own W_Q, W_K, W_V; their outputs sit side by side."),
    ("W_O", "W_O", "concat", "dims",
     "The output projection mixes the heads back into one d_model-wide vector per token."),
    ("output", "output = C · W_O + b_O", "queries", "dims",
     "This is what the layer adds to each token's vector (the residual connection)."),
)  # fmt: skip


def explain(
    stack: BuiltinTransformer,
    source: list[str],
    queries: list[str] | None,
    *,
    mode: Mode,
    layer: int,
    head: int,
) -> Explanation:
    """Walk through head ``head`` of layer ``layer`` of the built-in ``stack`` on the
    text's tokens ``source`` (and a target's, ``queries``, in cross mode); the caller
    names the model."""
    import torch

    queries = source if queries is None else queries
    cross = mode is Mode.CROSS
    block = stack.decoder[layer] if cross else stack.encoder[layer]
    module = cast("MultiHeadAttention", block.cross_attention if cross else block.attention)
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
        stack.attention_maps(
            source, mode=mode, target_tokens=queries if cross else None, layers=[layer]
        )
    finally:
        for handle in handles:
            handle.remove()
    with torch.inference_mode():
        matrices = _compute(module, [tensor[0] for tensor in seen["inputs"]], seen["causal"], head)
    explanation = _explanation(matrices, seen["causal"], head, module.num_heads, queries, source)
    explanation.mode, explanation.layer = mode, layer
    _check_against(explanation, seen["weights"][0, head], seen["output"][0])
    return explanation


def _compute(module: Any, inputs: list[Any], causal: bool, head: int) -> dict[str, np.ndarray]:
    """Every matrix of the walk-through, by step name, computed from the module's inputs."""
    import torch

    x_query, x_key, x_value = inputs  # (T, D), (S, D), (S, D)
    w_q, b_q, w_k, b_k, w_v, b_v = module.head_projections(head)  # W: (D, Dh), b: (Dh,)
    q = x_query @ w_q + b_q  # (T, Dh)
    k = x_key @ w_k + b_k  # (S, Dh)
    v = x_value @ w_v + b_v  # (S, Dh)
    scores = q @ k.T  # (T, S)
    scaled = scores / math.sqrt(w_q.shape[1])
    mask = torch.zeros_like(scaled)  # (T, S)
    if causal:
        mask = mask.masked_fill(torch.ones_like(mask, dtype=torch.bool).triu(1), -math.inf)
    weights = torch.softmax(scaled + mask, dim=-1)  # (T, S)
    every_head = []
    for other in range(module.num_heads):
        o_q, ob_q, o_k, ob_k, o_v, ob_v = module.head_projections(other)
        o_scaled = (x_query @ o_q + ob_q) @ (x_key @ o_k + ob_k).T / math.sqrt(o_q.shape[1])
        every_head.append(torch.softmax(o_scaled + mask, dim=-1) @ (x_value @ o_v + ob_v))
    concatenated = torch.cat(every_head, dim=-1)  # (T, H·Dh)
    w_o = module.out_proj.weight.T  # (H·Dh, D)
    bias = module.out_proj.bias
    b_o = bias if bias is not None else torch.zeros(w_o.shape[1])
    same_input = x_query is x_key or torch.equal(x_query, x_key)
    inputs_by_name = {"X": x_query} if same_input else {"X_q": x_query, "X_kv": x_key}
    matrices = {
        **inputs_by_name,
        "W_Q": w_q,
        "W_K": w_k,
        "W_V": w_v,
        "Q": q,
        "K": k,
        "V": v,
        "scores": scores,
        "scaled": scaled,
        "mask": mask,
        "weights": weights,
        "head_output": weights @ v,  # (T, Dh)
        "concat": concatenated,
        "W_O": w_o,
        "output": concatenated @ w_o + b_o,  # (T, D)
    }
    return {name: matrix.detach().numpy() for name, matrix in matrices.items()}


def _explanation(
    matrices: dict[str, np.ndarray],
    causal: bool,
    head: int,
    num_heads: int,
    queries: list[str],
    keys: list[str],
) -> Explanation:
    same_input = "X" in matrices
    d_model, head_dim = matrices["W_Q"].shape
    labels = {
        "queries": queries,
        "keys": keys,
        "dims": [f"d{i}" for i in range(d_model)],
        "head_dims": [f"k{i}" for i in range(head_dim)],
        "concat": [f"c{i}" for i in range(matrices["concat"].shape[1])],
    }
    values = {
        "x": "X" if same_input else "X_q",
        "kv": "X" if same_input else "X_kv",
        "head": head,
        "last": num_heads - 1,
        "d_k": head_dim,
        "root": math.sqrt(head_dim),
        "mask_note": _mask_note(causal, same_input),
        "hidden_note": " exp(−∞) = 0, so hidden keys get exactly 0." if causal else "",
    }
    steps = [
        Step(
            name,
            formula.format(**values),
            matrices[name],
            labels[rows],
            labels[columns],
            note.format(**values),
        )
        for name, formula, rows, columns, note in STEPS
        if name in matrices
    ]
    weights = matrices["weights"]
    return Explanation(
        model="",
        mode=Mode.SELF,
        layer=0,
        head=head,
        query_tokens=queries,
        key_tokens=keys,
        d_model=d_model,
        head_dim=head_dim,
        steps=steps,
        sentences=[
            weighted_sum_sentence(query, row, keys)
            for query, row in zip(queries, weights, strict=True)
        ],
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
