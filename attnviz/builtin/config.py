"""The size and seed of the built-in stack: plain data, importable without torch,
so that a request can be checked against it before any model is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnviz.choices import Projections
from attnviz.errors import UsageError


@dataclass(frozen=True)
class BuiltinConfig:
    num_layers: int = 2  # transformer layers (encoder and decoder each, in cross mode)
    num_heads: int = 4  # attention heads per layer
    d_model: int = 64  # width of every token vector
    seed: int = 0  # seeds every weight and every token embedding
    positions: bool = True  # add sinusoidal position encodings to the embeddings
    projections: Projections = Projections.LEARNED  # or IDENTITY: Q = K = V = X
    lowercase: bool = True  # case-fold tokens, so that "The" and "the" share an embedding

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "d_model", "seed"):
            value = getattr(self, name)
            if type(value) is not int:  # bool is no size either
                raise UsageError(f"{name} is a whole number, not {type(value).__name__}")
        for name in ("positions", "lowercase"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} is True or False, not {getattr(self, name)!r}")
        if self.num_layers < 1 or self.num_heads < 1 or self.d_model < 1:
            raise UsageError("num_layers, num_heads and d_model must be at least 1")
        if not 0 <= self.seed < 2**63:
            raise UsageError(f"seed {self.seed} is out of range: 0 to 2**63 - 1")
        try:
            object.__setattr__(self, "projections", Projections(self.projections))
        except ValueError:
            names = ", ".join(member.value for member in Projections)
            raise UsageError(f"projections must be one of {names}") from None
        if self.projections is Projections.LEARNED and self.d_model % self.num_heads:
            raise UsageError(
                f"d_model ({self.d_model}) must be a multiple of num_heads ({self.num_heads}), "
                "so that every head gets d_model / num_heads dimensions"
            )

    @property
    def weight_bytes(self) -> int:
        """What the stack's weights take in memory (float32): per layer, the encoder's
        attention (4·D²) and feed-forward (2·D·d_ff), and the decoder's two attentions and
        feed-forward; the estimate a request is checked against before anything is built."""
        attention = 4 * self.d_model * self.d_model
        if self.projections is Projections.IDENTITY:
            attention = self.num_heads * self.d_model * self.d_model
        feed_forward = 2 * self.d_model * self.d_ff
        return 4 * self.num_layers * (3 * attention + 2 * feed_forward)

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model

    @property
    def head_dim(self) -> int:
        """The width of one head (Dh; d_k in the formulas)."""
        if self.projections is Projections.IDENTITY:
            return self.d_model  # every head sees the whole vector
        return self.d_model // self.num_heads

    @property
    def name(self) -> str:
        """A model name that says how to rebuild exactly this stack."""
        name = f"{BUILTIN}:layers={self.num_layers},heads={self.num_heads},d_model={self.d_model}"
        name += f",seed={self.seed}"
        if not self.positions:
            name += ",no-positions"
        if self.projections is not Projections.LEARNED:
            name += f",projections={self.projections.value}"
        if not self.lowercase:
            name += ",keep-case"
        return name

    @classmethod
    def from_name(cls, name: str) -> BuiltinConfig:
        """The stack that a :attr:`name` describes: ``builtin:`` and any of its settings
        (``builtin:seed=1``), the rest as by default. Raises ValueError."""
        kind, _, settings = name.partition(":")
        if kind != BUILTIN:
            raise UsageError(f"{name} does not name the built-in stack: it starts with {BUILTIN}")
        fields: dict[str, Any] = {}
        for setting in filter(None, settings.split(",")):
            key, equals, value = setting.partition("=")
            if not equals and key in _FLAGS:
                fields.update([_FLAGS[key]])
            elif equals and key in _NUMBERS:
                if not value.isdigit():
                    raise UsageError(f"{name}: {key} takes a whole number, not {value!r}")
                fields[_NUMBERS[key]] = int(value)
            elif equals and key == "projections":
                fields["projections"] = value
            else:
                raise UsageError(
                    f"{name}: the built-in stack has no setting {setting!r}; it takes layers=, "
                    "heads=, d_model=, seed=, projections=, no-positions and keep-case"
                )
        return cls(**fields)


BUILTIN = "builtin"  # the stack's model name, and how its sized names begin
_NUMBERS = {"layers": "num_layers", "heads": "num_heads", "d_model": "d_model", "seed": "seed"}
_FLAGS = {
    "no-positions": ("positions", False),
    "positions": ("positions", True),
    "keep-case": ("lowercase", False),
}
