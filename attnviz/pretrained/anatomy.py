"""Where a decoder's heads write: each layer's block and output projection, the final
norm and the unembedding, found in a loaded model (:func:`anatomy_of`).

Shape letters: L layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.errors import UsageError
from attnviz.pretrained.attention_modules import Family, Stream
from attnviz.pretrained.encoding import head_count
from attnviz.pretrained.value_norms import output_projection

if TYPE_CHECKING:
    from attnviz.pretrained.loading import PretrainedModel


@dataclass(frozen=True)
class Anatomy:
    """Where a decoder's heads write: each layer's block and output projection, the final
    norm and the unembedding."""

    attentions: list[Any]  # (L) the attention modules
    blocks: list[Any]  # (L) the decoder layer each attention module sits in
    projections: list[Any]  # (L) each attention module's output projection
    # (L) the norm a layer puts its attention's output through before adding it to the
    # residual (Gemma 2 and 3, OLMo 2: "sandwich" norms), or None (GPT-2, Llama)
    post_norms: list[Any]
    heads: int
    norm: Any
    unembedding: Any

    @property
    def head_size(self) -> int:
        """A head's size: its share of the output projection's input."""
        projection = self.projections[0]
        inputs = getattr(projection, "in_features", None) or projection.weight.shape[0]
        return head_size_of(int(inputs), self.heads)


def anatomy_of(loaded: PretrainedModel, reader: str = "--answer") -> Anatomy:
    """The modules a head's effect passes through; a usage error for a model that has no
    answer to read (an encoder, an encoder-decoder, a decoder without its head), naming
    what would have read it (``reader``: ``--answer``, ``the lens``)."""
    model = loaded.model
    unembedding = model.get_output_embeddings()
    if loaded.family is not Family.DECODER or unembedding is None:
        what = (
            "a decoder without its language-model head"
            if loaded.family is Family.DECODER
            else f"an {loaded.family.value} model"
        )
        raise UsageError(
            f"{loaded.name} is {what}: {reader} reads the next token of a causal language "
            "model (GPT-2, Llama, SmolLM2, …)"
        )
    names = {module: name for name, module in model.named_modules()}
    modules = dict(model.named_modules())
    attentions = [module for module, _ in loaded.streams.get(Stream.SELF, [])]
    blocks = [modules[_block_name(names[module], modules)] for module in attentions]
    projections = [_projection(model, module, loaded.name) for module in attentions]
    post_norms = [_post_norm(block) for block in blocks]
    return Anatomy(
        attentions,
        blocks,
        projections,
        post_norms,
        _head_count(model.config),
        _final_norm(model),
        unembedding,
    )


def _block_name(attention: str, modules: dict[str, Any]) -> str:
    """The name of the layer an attention module sits in: the item of a ModuleList."""
    import torch

    parts = attention.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if parts[end].isdigit() and isinstance(modules[".".join(parts[:end])], torch.nn.ModuleList):
            return ".".join(parts[: end + 1])
    raise UsageError(f"attnviz cannot find the layer that holds {attention}")


def _projection(model: Any, attention: Any, name: str) -> Any:
    projection = output_projection(model, attention)
    if projection is None:
        children = ", ".join(dict(attention.named_children())) or "no modules"
        raise UsageError(
            f"attnviz cannot find the output projection of {name}'s attention "
            f"({type(attention).__name__} has {children})"
        )
    return projection


def _post_norm(block: Any) -> Any:
    """The norm of the attention's output, in a layer that normalises each sublayer's
    output as well as its input (it then has a norm after its feed-forward sublayer too;
    Llama's ``post_attention_layernorm`` is the feed-forward's input norm)."""
    if hasattr(block, "post_feedforward_layernorm"):
        return getattr(block, "post_attention_layernorm", None)
    return None


def _head_count(config: Any) -> int:
    count = head_count(config)
    if count is None:
        raise UsageError("the model's configuration does not say how many heads it has")
    return count


def _final_norm(model: Any) -> Any:
    """The norm the last residual passes through before the unembedding: the one norm among
    the base model's own modules (Llama's ``norm``, GPT-2's ``ln_f``)."""
    norms = [
        module
        for _, module in model.base_model.named_children()
        if "norm" in type(module).__name__.lower()
    ]
    if len(norms) != 1:
        raise UsageError(
            f"attnviz cannot find the final norm of {type(model).__name__}: "
            f"{len(norms)} norms sit beside its layers"
        )
    return norms[0]


def head_size_of(width: int, heads: int) -> int:
    """One head's share of an output projection's ``width`` inputs."""
    if width % heads:
        raise UsageError(
            f"the output projection reads {width} numbers, which {heads} heads "
            "do not share evenly: attnviz cannot tell one head's output from another's"
        )
    return width // heads
