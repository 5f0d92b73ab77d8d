"""Activations by name: what a pass reads at any site of a model's layers (a decoder's,
an encoder's, an encoder-decoder's encoder or decoder), and what it may put there
instead (:meth:`attnviz.Extractor.activations`, ``attnviz acts``).

A name is one of

- a layer's site (:class:`~attnviz.choices.Site`: ``resid``, ``attn``, ``resid_mid``,
  ``mlp``, ``resid_post``, ``q``, ``k``, ``v``, ``z``, ``pattern``) at one layer,
  ``resid_post@12`` (a negative layer counts from the end), or bare, ``resid_post``: at
  every layer asked, each named ``resid_post@L``;
- a node of the circuit graph: ``a3.h1`` (head 1 of layer 3: its output, its slice of
  ``z``), ``m3`` (layer 3's MLP output as the residual stream is given it: ``mlp@3``,
  after the post norm of Gemma's layers), ``input`` (what the first layer reads,
  ``resid@0``) or ``logits``.

Shapes, for P positions kept of T (every position unless some are asked), D the model's
width, H its query heads, K its key/value heads, Dh a head's size, V the vocabulary:
``(P, D)`` for ``resid``, ``attn``, ``resid_mid``, ``mlp``, ``resid_post``, ``input`` and
``m3``; ``(P, H, Dh)`` for ``q`` and ``z``, ``(P, K, Dh)`` for ``k`` and ``v``; ``(P, Dh)``
for a head; ``(H, P, T)`` for a pattern (a row per query kept, every key); ``(P, V)`` for
the logits. An edit is given the whole site, T positions in place of P, and gives back as
much: a tensor (or array) of that shape, a function of the run's own value, or a word of
:class:`~attnviz.choices.Ablation` (``zero``, ``mean`` over the positions, ``patch``: the
value of the run on ``patch_from``).

Only the standard library and attnviz's lowest modules are imported here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnviz.atomic_files import open_output
from attnviz.choices import Ablation, Site, chosen
from attnviz.errors import UsageError

INPUT, LOGITS = "input", "logits"  # the circuit graph's first and last nodes
_AT = re.compile(r"(?P<site>[a-z_]+)@(?P<layer>-?\d+)")
_HEAD = re.compile(r"a(?P<layer>-?\d+)\.h(?P<head>\d+)")
_MLP = re.compile(r"m(?P<layer>-?\d+)")
_EDITS = (Ablation.ZERO, Ablation.MEAN, Ablation.PATCH)  # what an edit may name


@dataclass(frozen=True)
class Named:
    """One name, parsed: its site (None for the logits), its layer (None: every layer
    asked), and its head (a node of the circuit graph's, its slice of z); ``written``
    for the graph's MLP node, the MLP's output as the residual stream is given it."""

    name: str
    site: Site | None
    layer: int | None = None
    head: int | None = None
    written: bool = False

    def at(self, layer: int) -> Named:
        """This site at one of the layers asked, named ``site@layer``."""
        assert self.site is not None
        return Named(f"{self.site.value}@{layer}", self.site, layer)


def site_names() -> list[str]:
    """Every form a name takes, as an error lists them."""
    return [*(site.value for site in Site), "SITE@L", "aL.hH", "mL", INPUT, LOGITS]


def parsed(name: object) -> Named:
    """``name`` parsed; a usage error naming the forms a name takes where it is none."""
    if not isinstance(name, str):
        raise UsageError(f"a site is named by a string, not {type(name).__name__}")
    values = {site.value: site for site in Site}
    if name in values:
        return Named(name, values[name])
    if name == INPUT:
        return Named(name, Site.RESID, 0)
    if name == LOGITS:
        return Named(name, None)
    if (at := _AT.fullmatch(name)) and at["site"] in values:
        return Named(name, values[at["site"]], int(at["layer"]))
    if head := _HEAD.fullmatch(name):
        return Named(name, Site.Z, int(head["layer"]), int(head["head"]))
    if mlp := _MLP.fullmatch(name):
        return Named(name, Site.MLP, int(mlp["layer"]), written=True)
    raise UsageError(
        f"no site is named {name!r}: name one of {', '.join(site_names())} (L a layer, H a "
        "head: resid_post@12, a3.h1, m0)"
    )


def check_names(names: Sequence[str]) -> tuple[str, ...]:
    """The names asked, each parsed once to refuse what names no site (none: the run's
    logits and metric alone)."""
    if isinstance(names, str):
        names = [names]
    asked = tuple(names)
    for name in asked:
        parsed(name)
    return asked


def check_edits(edits: Mapping[str, Any]) -> dict[str, Any]:
    """Each edit's site named, none of the logits, and each edit a tensor, an array, a
    function or one of the words :data:`_EDITS`."""
    if not isinstance(edits, Mapping):
        raise UsageError(f"edits map site names to edits, not {type(edits).__name__}")
    checked: dict[str, Any] = {}
    for name, edit in edits.items():
        if parsed(name).site is None:
            raise UsageError("the logits are read, not edited: edit a site below them")
        if isinstance(edit, str | Ablation):
            edit = chosen(Ablation, edit, f"edit of {name}", _EDITS)
        elif not (callable(edit) or hasattr(edit, "shape")):
            raise UsageError(
                f"the edit of {name} is {type(edit).__name__}: give a tensor or an array of "
                "the site's shape, a function of its value, or zero, mean or patch"
            )
        checked[name] = edit
    return checked


Tensor = Any  # a torch.Tensor: torch is imported by the passes, not here


@dataclass(frozen=True)
class Activations(Mapping[str, Tensor]):
    """What one run read, by name: each site's tensor on the model's device, in its dtype
    (``.cpu()``, ``.float()`` are the caller's), at the positions kept. ``logits`` is the
    run's last position's, (V,) (None for a model that reads no next token); ``metric``
    the answer's metric in the run, where an answer was given; ``edited`` the names the
    run edited."""

    model: str
    tokens: tuple[str, ...]
    positions: tuple[int, ...]
    tensors: Mapping[str, Tensor]
    logits: Tensor | None
    metric: float | None = None
    edited: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> Tensor:
        if name not in self.tensors:
            kept = ", ".join(self.tensors) or "none"
            raise KeyError(f"{name!r} was not read: this run read {kept}")
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __repr__(self) -> str:  # a notebook's line: names and shapes, not the numbers
        shapes = ", ".join(f"{name} {tuple(value.shape)}" for name, value in self.items())
        said = [f"{len(self.tokens)} tokens", f"{len(self.positions)} positions kept"]
        if self.metric is not None:
            said.append(f"metric {self.metric:.4g}")
        return f"Activations({self.model}, {', '.join(said)}: {shapes or 'no site'})"

    def arrays(self) -> dict[str, Any]:
        """Each tensor as a float32 numpy array on the CPU (a bfloat16 one widened)."""
        return {name: value.detach().float().cpu().numpy() for name, value in self.items()}

    def save(self, path: str) -> None:
        """The arrays, the tokens and the positions kept as one ``.npz`` file."""
        import numpy as np

        with open_output(path, binary=True) as stream:
            np.savez(
                stream,
                **self.arrays(),
                tokens=np.array(self.tokens),
                positions=np.array(self.positions),
            )

    def document(self) -> dict[str, Any]:
        """The run as JSON: the tokens, the positions kept, each name's shape and numbers,
        and the metric where an answer was given."""
        found: dict[str, Any] = {"model": self.model, "tokens": list(self.tokens)}
        found["positions"] = list(self.positions)
        found["activations"] = {
            name: {"shape": list(array.shape), "values": array.tolist()}
            for name, array in self.arrays().items()
        }
        if self.metric is not None:
            found["metric"] = self.metric
        if self.edited:
            found["edited"] = list(self.edited)
        return found
