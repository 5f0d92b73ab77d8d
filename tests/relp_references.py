"""Relevance patching (RelP, Rezaei Jafari et al. 2025) written from its rules, none of
attnviz's code: the model's modules given forwards whose autograd backward is LRP's, as
RelP's TransformerLens does it (FarnoushRJ/RelP): a norm divides by its RMS (or standard
deviation) detached (LN-rule); an MLP's activation returns x' · (act(x) / x').detach(), x'
the input stabilised away from 0 (identity rule); a gated MLP's product p passes on
p / 2 + (p / 2).detach() (half rule); attention's softmax output is detached (AH-rule).
EAP through those forwards (circuit_references.estimated_scores) is RelP's score.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch

from tests.hook_references import eager_weights, layers_of

STABILISED = 1e-6  # RelP's stabilize: z + ((z == 0) + sign(z)) · 1e-6


def _stabilised(z):
    return z + ((z == 0.0).to(z) + z.sign()) * STABILISED


def _held_layer_norm(norm):
    def forward(x):
        centred = x - x.mean(-1, keepdim=True)
        deviation = (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
        return centred / deviation.detach() * norm.weight + norm.bias

    return forward


def _held_rms_norm(norm):
    one = 1.0 if "Gemma" in type(norm).__name__ else 0.0  # Gemma scales by 1 + w
    eps = getattr(norm, "variance_epsilon", None) or norm.eps

    def forward(x):
        wide = x.float()
        rms = (wide.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        return (wide / rms.detach() * (one + norm.weight.float())).to(x.dtype)

    return forward


def _identity_activation(activation):
    real = activation.forward

    def forward(x):
        moved = _stabilised(x)
        return moved * (real(x) / moved).detach()

    return forward


def _half_gated(mlp):
    def forward(x):
        product = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
        return mlp.down_proj(product / 2 + (product / 2).detach())

    return forward


@contextlib.contextmanager
def relp_rules(model):
    """While open, ``model``'s backward is RelP's: every norm, every MLP's activation and
    gate, and attention's weights, each by its rule."""
    forwards = []
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            forwards.append((module, _held_layer_norm(module)))
        elif type(module).__name__.endswith("RMSNorm"):
            forwards.append((module, _held_rms_norm(module)))
    for block in layers_of(model):
        mlp = block.mlp
        activation = mlp.act_fn if hasattr(mlp, "act_fn") else mlp.act
        forwards.append((activation, _identity_activation(activation)))
        if hasattr(mlp, "gate_proj"):
            forwards.append((mlp, _half_gated(mlp)))
    with contextlib.ExitStack() as stack:
        for module, forward in forwards:
            stack.enter_context(mock.patch.object(module, "forward", forward))
        stack.enter_context(eager_weights(model, lambda _layer, weights: weights.detach()))
        yield
