"""Where a stack's heads write: each layer's block, attention and output projection, and
where its residual lies between the attention and the MLP; a decoder's final norm and
unembedding (:func:`anatomy_of`, for what reads the next token). :func:`stack_anatomy`
finds the same of any stack a mode reads: an encoder's, an encoder-decoder's encoder or
decoder, a decoder without its language-model head.

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
    """Where a stack's heads write: each layer's block and output projection, the final
    norm and the unembedding (None for a stack that reads no next token)."""

    attentions: list[Any]  # (L) the attention modules: each holds its q, k, v projections
    blocks: list[Any]  # (L) the decoder layer each attention module sits in
    projections: list[Any]  # (L) each attention module's output projection
    # (L) the norm a layer puts its attention's output through before adding it to the
    # residual (Gemma 2 and 3, OLMo 2: "sandwich" norms), or None (GPT-2, Llama)
    post_norms: list[Any]
    # (L) the module whose output is the residual between the attention and the MLP: a
    # sublayer wrapping the attention and its residual (BERT, T5) or the norm after the
    # attention of a post-norm layer (BART); None where it is the layer's input plus what
    # the attention adds (pre-norm decoders)
    mids: list[Any]
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
    return stack_anatomy(loaded, [module for module, _ in loaded.streams.get(Stream.SELF, [])])


def stack_anatomy(loaded: PretrainedModel, modules: list[Any]) -> Anatomy:
    """The layers of the stack whose attention ``modules`` (its stream's) are given: a
    decoder's final norm and unembedding where it reads a next token, else None."""
    model = loaded.model
    names = {module: name for name, module in model.named_modules()}
    by_name = dict(model.named_modules())
    blocks = [by_name[_block_name(names[module], by_name)] for module in modules]
    attentions = [_core(module) for module in modules]
    next_token = loaded.family is Family.DECODER and model.get_output_embeddings() is not None
    return Anatomy(
        attentions,
        blocks,
        [_projection(model, attention, loaded.name) for attention in attentions],
        [_post_norm(block) for block in blocks],
        [
            _mid(model, block, attention, names)
            for block, attention in zip(blocks, attentions, strict=True)
        ],
        _head_count(model.config),
        _final_norm(model) if next_token else None,
        model.get_output_embeddings() if next_token else None,
    )


def _core(module: Any) -> Any:
    """The attention itself in a stream's module: the module, or the one attention it
    wraps with its norm and residual (T5's ``SelfAttention`` in ``T5LayerSelfAttention``)."""
    inner = [child for child in module.children() if type(child).__name__.endswith("Attention")]
    return inner[0] if len(inner) == 1 else module


# Layers that normalise the residual after each sublayer (post-norm) where their modules are
# named as pre-norm layers' are (mBART's, Pegasus's): by class, or by config (OPT's)
_POST_NORM_LAYERS = ("Bart", "Marian", "PLBart", "BlenderbotSmall")


def _mid(model: Any, block: Any, attention: Any, names: dict[Any, str]) -> Any:
    """The module whose output is ``block``'s residual after ``attention``'s sublayer, or
    None where that residual is the layer's input plus the attention's output."""
    path = names[attention].removeprefix(names[block] + ".").split(".")
    if len(path) > 1:  # BERT's attention.self, T5's layer.0.SelfAttention, GPT-Neo's attn.attention
        wrapper = block.get_submodule(".".join(path[:-1]))
        if _holds_norm(wrapper, attention):  # it adds the residual and normalises
            return wrapper
    post_norm = type(block).__name__.startswith(_POST_NORM_LAYERS) or (
        getattr(model.config, "do_layer_norm_before", True) is False
    )
    return getattr(block, f"{path[0]}_layer_norm", None) if post_norm else None


def _holds_norm(wrapper: Any, attention: Any) -> bool:
    """Whether ``wrapper`` holds a norm besides those inside ``attention``."""
    inside = {id(module) for module in attention.modules()}
    return any(
        "norm" in type(module).__name__.lower() and id(module) not in inside
        for module in wrapper.modules()
    )


def _block_name(attention: str, modules: dict[str, Any]) -> str:
    """The name of the layer an attention module sits in: the item of the outermost
    ModuleList (T5's attention sits in a list of sublayers inside its block)."""
    import torch

    parts = attention.split(".")
    for end in range(1, len(parts)):
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
