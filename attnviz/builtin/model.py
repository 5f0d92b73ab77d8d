"""The built-in transformer: a small, seeded, readable stack that needs no download.

Shape letters: B batch, T tokens of the attending sequence, S tokens attended
over, D model width, H heads.

Pre-LayerNorm blocks, as in GPT-2: x = x + Attention(LN(x)); x = x + FFN(LN(x)).
Normalising before attention also makes ``projections="identity"`` behave as
the textbook says: every LN(x) row has the same length, so by Cauchy-Schwarz a
token's dot product is largest with itself and with exact repeats of itself.

Tokens have no vocabulary: each distinct token string gets a vector drawn from
a generator seeded by (seed, token), so any text in any script has embeddings
and a repeated word always gets the same one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Sequence

import torch
from torch import nn

from attnviz.builtin.attention import MultiHeadAttention
from attnviz.builtin.config import BuiltinConfig
from attnviz.choices import Mode, Projections


def sinusoidal_positions(num_tokens: int, d_model: int) -> torch.Tensor:
    """PE[t, 2i] = sin(t / 10000^(2i/D)), PE[t, 2i+1] = cos(t / 10000^(2i/D)); shape (T, D)."""
    position = torch.arange(num_tokens, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )  # (ceil(D/2),)
    table = torch.zeros(num_tokens, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


class FeedForward(nn.Sequential):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))


def _attention(config: BuiltinConfig) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.num_heads, projections=config.projections)


class EncoderLayer(nn.Module):
    """Self-attention (optionally causal) and a feed-forward network, each with a residual."""

    def __init__(self, config: BuiltinConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.d_model)
        self.attention = _attention(config)
        self.feed_forward_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config.d_model, config.d_ff)

    def forward(
        self, x: torch.Tensor, causal: bool, weigh: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D) -> (B, T, D) and the self-attention weights (B, H, T, T), each times
        its key's value norm ‖W_O^h v_j‖ if ``weigh``."""
        normed = self.attention_norm(x)
        attended, weights = self.attention(normed, normed, normed, causal=causal)
        if weigh:
            weights = weights * self.attention.value_norms(normed)[:, :, None, :]
        x = x + attended
        return x + self.feed_forward(self.feed_forward_norm(x)), weights


class DecoderLayer(nn.Module):
    """Causal self-attention, then cross-attention over the encoded source, then a
    feed-forward network, each with a residual, as in the original Transformer."""

    def __init__(self, config: BuiltinConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.d_model)
        self.attention = _attention(config)
        self.cross_norm = nn.LayerNorm(config.d_model)
        self.memory_norm = nn.LayerNorm(config.d_model)
        self.cross_attention = _attention(config)
        self.feed_forward_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config.d_model, config.d_ff)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, weigh: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D), memory (B, S, D) -> (B, T, D) and cross-attention weights (B, H, T, S),
        each times its key's value norm ‖W_O^h v_j‖ if ``weigh``."""
        normed = self.attention_norm(x)
        attended, _ = self.attention(normed, normed, normed, causal=True)
        x = x + attended
        source = self.memory_norm(memory)
        attended, weights = self.cross_attention(self.cross_norm(x), source, source)
        if weigh:
            weights = weights * self.cross_attention.value_norms(source)[:, :, None, :]
        x = x + attended
        return x + self.feed_forward(self.feed_forward_norm(x)), weights


class TokenEmbedding(nn.Module):
    """A vector per distinct token string, drawn from a generator seeded by (seed, token)."""

    def __init__(self, d_model: int, seed: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.seed = seed

    def vector(self, token: str) -> torch.Tensor:
        digest = hashlib.blake2b(f"{self.seed}\0{token}".encode(), digest_size=8).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        return torch.randn(self.d_model, generator=generator)

    def forward(self, tokens: Sequence[str]) -> torch.Tensor:
        """tokens (T strings) -> (1, T, D)"""
        vectors = {token: self.vector(token) for token in set(tokens)}
        return torch.stack([vectors[token] for token in tokens]).unsqueeze(0)


class BuiltinTransformer(nn.Module):
    """An encoder (self or causal attention) and a decoder (cross-attention), built from a seed."""

    def __init__(self, config: BuiltinConfig) -> None:
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.embedding = TokenEmbedding(config.d_model, config.seed)
            self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
            self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
            if config.projections is Projections.LEARNED:
                self._init_projections()
        self.eval()

    def _init_projections(self) -> None:
        # N(0, 1/D) weights give query-key products of unit variance after the
        # 1/√d_k scaling: the softmax is neither flat nor saturated, so the
        # heads of an untrained stack still show distinct patterns.
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                for linear in (module.q_proj, module.k_proj):
                    nn.init.normal_(linear.weight, std=self.config.d_model**-0.5)

    def embed(self, tokens: Sequence[str]) -> torch.Tensor:
        """Token embeddings plus, unless turned off, sinusoidal positions: (1, T, D)."""
        x = self.embedding(tokens)
        if self.config.positions:
            x = x + sinusoidal_positions(len(tokens), self.config.d_model)
        return x

    @torch.inference_mode()
    def attention_maps(
        self,
        tokens: Sequence[str],
        *,
        mode: Mode = Mode.SELF,
        target_tokens: Sequence[str] | None = None,
        layers: Collection[int] | None = None,
        weigh: bool = False,
    ) -> dict[int, torch.Tensor]:
        """Per-layer attention weights (H, T, S) for the layers asked for (all when None).

        ``self`` and ``masked`` run the encoder over ``tokens`` (masked = causal);
        ``cross`` encodes ``tokens`` as the source and returns the decoder's
        cross-attention of ``target_tokens`` over it. Work goes layer by layer,
        keeps only the maps asked for and stops after the last of them. ``weigh``
        multiplies each weight by what its key writes through the head, ‖W_O^h v_j‖.
        """
        mode = Mode(mode)
        wanted = set(range(self.config.num_layers) if layers is None else layers)
        last = max(wanted)
        maps: dict[int, torch.Tensor] = {}
        x = self.embed(tokens)  # (1, S, D)
        if mode is not Mode.CROSS:
            for index, layer in enumerate(self.encoder[: last + 1]):
                x, weights = layer(x, causal=mode is Mode.MASKED, weigh=weigh)
                if index in wanted:
                    maps[index] = weights[0]  # (H, T, T)
            return maps
        if not target_tokens:
            raise ValueError("cross mode needs target tokens")
        for layer in self.encoder:
            x, _ = layer(x, causal=False)
        y = self.embed(target_tokens)  # (1, T, D)
        for index, layer in enumerate(self.decoder[: last + 1]):
            y, weights = layer(y, x, weigh=weigh)
            if index in wanted:
                maps[index] = weights[0]  # (H, T, S)
        return maps
