"""Multi-head attention written from the math.

Shape letters used in comments: B batch, H heads, T query tokens, S key tokens,
D model width (d_model), Dh width of one head (d_k).

For one head h:  A_h = softmax(Q_h K_hᵀ / √d_k + M),  head_h = A_h V_h,
with Q_h = X_q W_Q^h, K_h = X_k W_K^h, V_h = X_k W_V^h, and M holding -∞ where
a query may not look (the future, in causal attention) and 0 elsewhere. The
heads are concatenated and projected: output = [head_1 … head_H] W_O.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnviz.choices import Projections


def causal_mask(
    num_queries: int, num_keys: int, device: torch.device | None = None
) -> torch.Tensor:
    """True where a query may not look: every key after the query's own position."""
    if num_queries != num_keys:
        raise ValueError(
            f"causal attention needs as many queries as keys (got {num_queries} and {num_keys})"
        )
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu(diagonal=1)


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ / √d_k + M) v over the last two dimensions; returns (output, weights).

    q (..., T, Dh), k and v (..., S, Dh), mask (T, S) boolean, True = hidden.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, Dh) x (..., Dh, S) -> (..., T, S)
    if mask is not None:
        # exp(-inf) is exactly 0, so hidden keys get exactly zero weight.
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (..., T, S), every row sums to 1
    return weights @ v, weights  # (..., T, S) x (..., S, Dh) -> (..., T, Dh)


class MultiHeadAttention(nn.Module):
    """Multi-head attention that returns its per-head weights.

    ``projections="learned"`` gives each head its own slice of learned W_Q, W_K,
    W_V (Dh = D / H). ``projections="identity"`` is the plain attention
    Q = K = V = X: every head sees the whole input (Dh = D) and W_O averages
    the heads.
    """

    def __init__(
        self, d_model: int, num_heads: int, *, projections: Projections | str = "learned"
    ) -> None:
        super().__init__()
        projections = Projections(projections)
        if num_heads < 1:
            raise ValueError("num_heads must be at least 1")
        self.d_model = d_model
        self.num_heads = num_heads
        self.projections = projections
        if projections is Projections.LEARNED:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model ({d_model}) must be divisible by num_heads ({num_heads})"
                )
            self.head_dim = d_model // num_heads
            self.q_proj = nn.Linear(d_model, d_model)
            self.k_proj = nn.Linear(d_model, d_model)
            self.v_proj = nn.Linear(d_model, d_model)
            self.out_proj = nn.Linear(d_model, d_model)
        else:
            self.head_dim = d_model
            # Typed as the learned ones: what reads their weights asks for those first.
            self.q_proj = self.k_proj = self.v_proj = nn.Identity()  # type: ignore[assignment]
            self.out_proj = nn.Linear(num_heads * d_model, d_model, bias=False)
            averaging = torch.eye(d_model).repeat(1, num_heads) / num_heads  # (D, H·D)
            self.out_proj.weight = nn.Parameter(averaging, requires_grad=False)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (inputs then batch first)."""
        if not module._qkv_same_embed_dim:
            raise ValueError(
                "only modules whose keys and values have the model width are supported"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported")
        if module.in_proj_bias is None:
            raise ValueError("modules without biases are not supported")
        attention = cls(module.embed_dim, module.num_heads)
        q_weight, k_weight, v_weight = module.in_proj_weight.detach().chunk(3)
        q_bias, k_bias, v_bias = module.in_proj_bias.detach().chunk(3)
        with torch.no_grad():
            for linear, weight, bias in (
                (attention.q_proj, q_weight, q_bias),
                (attention.k_proj, k_weight, k_bias),
                (attention.v_proj, v_weight, v_bias),
                (attention.out_proj, module.out_proj.weight, module.out_proj.bias),
            ):
                linear.weight.copy_(weight)
                linear.bias.copy_(bias)
        return attention

    def head_projections(self, head: int) -> tuple[torch.Tensor, ...]:
        """W_Q, b_Q, W_K, b_K, W_V, b_V of one head, each W as (D, Dh) so that Q = X W + b."""
        if self.projections is Projections.IDENTITY:
            eye, zero = torch.eye(self.d_model), torch.zeros(self.d_model)
            return eye, zero, eye, zero, eye, zero
        rows = slice(head * self.head_dim, (head + 1) * self.head_dim)
        return tuple(
            tensor
            for linear in (self.q_proj, self.k_proj, self.v_proj)
            for tensor in (linear.weight[rows].T, linear.bias[rows])
        )

    def value_norms(self, value: torch.Tensor) -> torch.Tensor:
        """What each key writes through each head: ‖W_O^h v_j‖, the norm of its value vector
        after the head's slice of the output projection. value (B, S, D) -> (B, H, S)."""
        v = self._split_heads(self.v_proj(value))  # (B, H, S, Dh)
        w_o = self.out_proj.weight.view(self.d_model, self.num_heads, self.head_dim)  # (D, H, Dh)
        written = torch.einsum("bhsk,dhk->bhsd", v, w_o)  # (B, H, S, D)
        return torch.linalg.vector_norm(written, dim=-1)  # (B, H, S)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        if self.projections is Projections.IDENTITY:
            return x.unsqueeze(1).expand(B, self.num_heads, T, D)  # (B, H, T, D)
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """All heads in one batched matmul.

        query (B, T, D), key and value (B, S, D) -> output (B, T, D), weights (B, H, T, S).
        """
        B, T, _ = query.shape
        S = key.size(1)
        q = self._split_heads(self.q_proj(query))  # (B, H, T, Dh)
        k = self._split_heads(self.k_proj(key))  # (B, H, S, Dh)
        v = self._split_heads(self.v_proj(value))  # (B, H, S, Dh)
        mask = causal_mask(T, S, query.device) if causal else None
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, Dh), (B, H, T, S)
        concatenated = heads.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)
        return self.out_proj(concatenated), weights  # (B, T, D), (B, H, T, S)

    def forward_per_head(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same computation one head at a time, as it is written on the blackboard.

        Slower than :meth:`forward`; kept as the readable reference the tests hold it to.
        """
        T, S = query.size(1), key.size(1)
        mask = causal_mask(T, S, query.device) if causal else None
        head_outputs, head_weights = [], []
        for head in range(self.num_heads):
            w_q, b_q, w_k, b_k, w_v, b_v = self.head_projections(head)
            q = query @ w_q + b_q  # (B, T, Dh)
            k = key @ w_k + b_k  # (B, S, Dh)
            v = value @ w_v + b_v  # (B, S, Dh)
            scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))  # (B, T, S)
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (B, T, S)
            head_outputs.append(weights @ v)  # (B, T, Dh)
            head_weights.append(weights)
        concatenated = torch.cat(head_outputs, dim=-1)  # (B, T, H·Dh)
        return self.out_proj(concatenated), torch.stack(head_weights, dim=1)  # (B, H, T, S)
