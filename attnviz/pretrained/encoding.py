"""From texts to a forward pass and back: encoding, padding, the inputs each mode
needs, hooks that read the attention weights, and the checks that they are.

Shape letters: B inputs in a batch, L layers, H heads, T query tokens, S key tokens.

The weights are read with forward hooks on the model's own attention modules,
the same modules transformers hooks to build ``output_attentions``: only the
layers asked for are kept, and the forward pass stops once the last of them
has run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from attnviz.analysis.grid import lookahead, row_error
from attnviz.choices import Mode
from attnviz.errors import AttnvizError, UsageError, first_line, warn
from attnviz.pretrained.attention_modules import Family
from attnviz.pretrained.implementations import attention_implementation
from attnviz.pretrained.loading import PretrainedModel
from attnviz.pretrained.placement import check_maps_fit
from attnviz.pretrained.quiet import quiet
from attnviz.request import Request
from attnviz.selection import Selection, covering, resolve

if TYPE_CHECKING:
    import torch


# Numerical slack for checking that what a model returned is attention.
TOLERANCE = 1e-4
HALF_TOLERANCE = 2e-2  # for models run in bfloat16 or float16


@dataclass
class Side:
    """The token ids of one input on one side (encoder or decoder), and the text they encode."""

    encoding: Any  # the tokenizer's BatchEncoding, with offsets
    text: str
    pair: str | None = None  # sentence B of a sentence pair
    template: list[bool] | None = None  # tokens a chat template added around the text
    cut: bool = False  # the model cannot read it all: its last tokens were dropped
    whole_length: int | None = None  # where cut: how many tokens the whole text has

    @property
    def length(self) -> int:
        return len(self.encoding["input_ids"])

    @property
    def given_length(self) -> int:
        """The whole text's tokens, the model's cut or not."""
        return self.length if self.whole_length is None else self.whole_length

    def read(self) -> str:
        """The text as far as the model reads it: all of it, or up to the last token kept."""
        if not self.cut:
            return self.text
        return self.text[: max((end for _, end in self.encoding["offset_mapping"]), default=0)]

    def finder(self, option: str) -> Callable[[str], list[int]]:
        """Where a text lies among these tokens: the tokens of the text (sentence A; not the
        specials, not a chat template's) that cover its first occurrence."""
        segments = self.segments()
        template = self.template or [False] * self.length
        spans = [
            None if segment or added else (int(start), int(end))
            for (start, end), segment, added in zip(
                self.encoding["offset_mapping"], segments, template, strict=True
            )
        ]
        return lambda wanted: covering(self.text, wanted, spans, option)

    def segments(self) -> list[int]:
        """0 for each token of the text (sentence A), 1 for sentence B of a pair."""
        if self.pair is None:
            return [0] * self.length
        types = self.encoding.get("token_type_ids")
        if types is not None and any(types):
            return list(types)
        segments, current = [], 0  # tokenizers without token types: by sequence ids
        for sequence in self.encoding.sequence_ids():
            current = current if sequence is None else sequence
            segments.append(current)
        return segments


PLAIN = Request()


def chat_text(loaded: PretrainedModel, text: str, system: str | None) -> tuple[str, list[tuple]]:
    """The text as the model's chat template renders one user message (after ``system``),
    ready for the reply; and the character spans that are the user's and system's own."""
    tokenizer = loaded.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise UsageError(
            f"the tokenizer of {loaded.name} has no chat template: drop --chat (a base model "
            "reads plain text), or use an instruct model"
        )
    messages = [{"role": "user", "content": text}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    from jinja2 import TemplateError  # transformers renders templates with jinja2

    try:
        rendered = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
    except TemplateError as error:  # a template's own raise_exception: it refuses the chat
        hint = ": drop --system" if system is not None else ""
        raise UsageError(
            f"the chat template of {loaded.name} refuses this chat ({first_line(error)}){hint}"
        ) from None
    spans: list[tuple[int, int]] = []
    for part in [system, text] if system is not None else [text]:
        start = rendered.find(part, spans[-1][1] if spans else 0)
        if start >= 0:
            spans.append((start, start + len(part)))
    return rendered, spans


def encode(
    loaded: PretrainedModel,
    text: str,
    what: str,
    *,
    target: bool = False,
    reserve: int = 0,
    pair: str | None = None,
    request: Request = PLAIN,  # the text as it is, no chat template
) -> Side:
    """Tokenise with the model's own special tokens (a sentence pair as the tokenizer joins
    two sentences; a chat through its template); cut what the model cannot read (less
    ``reserve`` tokens kept free for generation), warning."""
    tokenizer = loaded.tokenizer
    spans = None
    if request.chat:
        text, spans = chat_text(loaded, text, request.system)
    call: dict[str, Any] = {"text_target": text} if target else {"text": text}
    if pair is not None:  # with the token types that tell the model which sentence is which
        call |= {"text_pair": pair, "return_token_type_ids": True}
    # A chat template writes the special tokens itself.
    special = {"add_special_tokens": not request.chat}
    # verbose=False: transformers would warn of the length itself; attnviz says it once.
    # (Not quiet(): its logging levels cost a tenth of a batch's time, once per input.)
    encoding = tokenizer(
        **call, return_offsets_mapping=True, truncation=False, verbose=False, **special
    )
    count = len(encoding["input_ids"])
    limit = loaded.max_length - reserve
    cut = count > limit
    if cut:
        kept_free = f" ({reserve} of them for new tokens)" if reserve else ""
        warn(
            f"the {what} has {count} tokens; the model reads at most {loaded.max_length}"
            f"{kept_free}: the last {count - limit} were dropped"
        )
        encoding = tokenizer(
            **call, return_offsets_mapping=True, truncation=True, max_length=limit, **special
        )
    template = None
    if spans is not None:  # a token outside the user's and system's words is the template's
        template = [
            begin == finish or not any(start <= begin and finish <= end for start, end in spans)
            for begin, finish in encoding["offset_mapping"]
        ]
    specials = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}  # <unk> stands for text
    own = (  # a token that holds a character of the text (a word marker alone holds none)
        not (template and template[index])
        and token not in specials
        and tokenizer.decode([token]).strip()
        for index, token in enumerate(encoding["input_ids"])
    )
    if not any(own):
        raise UsageError(
            f"the {what} tokenizes to nothing: {loaded.name}'s tokenizer drops every character "
            "of it (none is in its vocabulary)"
        )
    return Side(encoding, text, pair, template, cut, count if cut else None)


def padded(sides: Sequence[Side], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and their attention mask: 1 for tokens, 0 for padding."""
    import torch

    width = max(side.length for side in sides)
    ids = torch.full((len(sides), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sides), width), dtype=torch.long)
    for row, side in enumerate(sides):
        ids[row, : side.length] = torch.tensor(side.encoding["input_ids"])
        mask[row, : side.length] = 1
    return ids, mask


@dataclass
class ModelInputs:
    """The keyword arguments of one forward pass, and whose tokens are the rows and columns."""

    arguments: dict[str, Any]
    queries: list[Side]
    keys: list[Side]


class Prepared(NamedTuple):
    """A batch ready for its forward pass: the mode it is read in, that mode's attention
    modules in layer order, the layers asked for and the encoded inputs."""

    mode: Mode
    modules: list
    layers: list[int]
    inputs: ModelInputs


def model_inputs(
    loaded: PretrainedModel,
    items: Sequence[tuple[str, str | None, str | None]],
    mode: Mode,
    request: Request = PLAIN,  # the text as it is, no chat template
    what: str = "text",  # what messages call the text: "corrupted text" for a corrupted twin
) -> ModelInputs:
    """Encode (text, target, pair) items for ``mode``: the text (with sentence B of a pair)
    feeds the encoder (or the only stack), the target the decoder of an encoder-decoder."""
    import torch

    tokenizer = loaded.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    sources = [encode(loaded, text, what, pair=pair, request=request) for text, _, pair in items]
    input_ids, attention_mask = padded(sources, pad_id)
    arguments: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    typed = getattr(loaded.model.config, "type_vocab_size", 0) > 1  # RoBERTa has one type
    if typed and any(side.pair is not None for side in sources):
        types = torch.zeros_like(input_ids)  # which sentence each token belongs to
        for row, side in enumerate(sources):
            if side.pair is not None:
                types[row, : side.length] = torch.tensor(side.encoding["token_type_ids"])
        arguments["token_type_ids"] = types
    queries = keys = sources
    if loaded.family is Family.ENCODER_DECODER:
        if mode is Mode.SELF:  # only the encoder is read; the decoder gets one token
            arguments["decoder_input_ids"] = torch.zeros(len(items), 1, dtype=torch.long)
        else:
            targets = [
                encode(loaded, target or "", "target", target=True) for _, target, _ in items
            ]
            decoder_ids, decoder_mask = padded(targets, pad_id)
            arguments["decoder_input_ids"] = decoder_ids
            arguments["decoder_attention_mask"] = decoder_mask
            queries = targets
            keys = targets if mode is Mode.MASKED else sources
    return ModelInputs(arguments, queries, keys)


class _Done(Exception):
    """Raised from a hook once every wanted layer has been seen: the rest need not run."""


def head_count(config: Any) -> int | None:
    """How many query heads the model's attention layers have, as its configuration says."""
    for name in ("num_attention_heads", "n_head", "num_heads", "decoder_attention_heads"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def attention_of(
    loaded: PretrainedModel,
    modules: list[tuple[Any, int]],
    wanted: Sequence[int],
    arguments: dict[str, Any],
    heads: Selection = None,
) -> tuple[torch.Tensor, list[int]]:
    """Run the model once; return the weights of the ``wanted`` layers and chosen ``heads``,
    (L, B, H, T, S) in float32 on the CPU, and the head indices. Only those leave the
    model's device. Refuses, before running, maps that cannot fit in memory."""
    import torch

    check_whole_maps_fit(loaded, wanted, heads, arguments)
    captured: dict[int, torch.Tensor | None] = {}
    chosen: list[int] = []
    handles = []
    for layer, (module, index) in enumerate(modules):
        if layer not in wanted:
            continue

        def hook(_module, _args, output, layer=layer, index=index):
            weights = output[index] if isinstance(output, tuple) else output  # (B, H, T, S)
            if weights is None:
                captured[layer] = None
            else:
                chosen[:] = resolve(heads, weights.shape[1], "head")
                captured[layer] = weights.detach()[:, chosen].float().cpu()
            if len(captured) == len(wanted):
                raise _Done

        handles.append(module.register_forward_hook(hook))

    try:
        with (
            attention_implementation(loaded.model, "eager"),  # the one that returns weights
            forward(loaded),
            torch.inference_mode(),
            contextlib.suppress(_Done),
        ):
            loaded.model(**on_device(loaded, arguments))
    finally:
        for handle in handles:
            handle.remove()
    if any(captured.get(layer) is None for layer in wanted):
        raise AttnvizError(
            f"{loaded.name} returned no attention weights (its attention implementation "
            "computes none; it needs eager attention)"
        )
    return torch.stack([cast("torch.Tensor", captured[layer]) for layer in wanted]), chosen


def on_device(loaded: PretrainedModel, arguments: dict[str, Any]) -> dict[str, Any]:
    """The forward pass's tensors moved to the model's device."""
    import torch

    device = loaded.model.device
    return {
        name: value.to(device) if isinstance(value, torch.Tensor) else value
        for name, value in arguments.items()
    }


@contextlib.contextmanager
def forward(loaded: PretrainedModel) -> Iterator[None]:
    """Around a forward pass: transformers kept quiet, and a dtype the device cannot run
    said plainly."""
    import torch

    try:
        with quiet(loaded.verbose):
            yield
    except RuntimeError as error:
        if "not implemented for" in str(error) and loaded.model.dtype != torch.float32:
            dtype = str(loaded.model.dtype).removeprefix("torch.")
            raise UsageError(
                f"{loaded.name} cannot run in {dtype} on {loaded.model.device}: an operation it "
                f"uses has no {dtype} version there; use --model-dtype float32 (or bfloat16)"
            ) from None
        raise


def check_whole_maps_fit(
    loaded: PretrainedModel,
    wanted: Sequence[int],
    heads: Selection,
    arguments: dict[str, Any],
    *,
    eager: bool = True,
) -> None:
    """Refuse, before the model runs, whole maps of the ``wanted`` layers and chosen heads
    that cannot fit in memory (and, with ``eager`` attention, each layer's whole attention
    on a GPU)."""
    first = arguments.get("decoder_input_ids", arguments["input_ids"])
    total_heads = head_count(loaded.model.config)
    if total_heads is not None:
        queries = first.shape[1]
        keys = arguments["input_ids"].shape[1] if "decoder_input_ids" in arguments else queries
        check_maps_fit(
            loaded.model,
            layers=len(wanted),
            heads=len(resolve(heads, total_heads, "head")),
            all_heads=total_heads,
            inputs=first.shape[0],
            queries=max(queries, keys),
            keys=max(queries, keys),
            eager=eager,
        )


def row_tolerance(model: Any) -> float:
    """How far from 1 a row may sum in the model's precision: softmax rows computed in
    bfloat16 (8 bits of mantissa) or float16 are off by more than float32 rows."""
    import torch

    return TOLERANCE if model.dtype == torch.float32 else HALF_TOLERANCE


def weights_not_finite(name: str, layer: int | None = None) -> AttnvizError:
    """The error for a model whose attention weights hold NaN or infinity (its statistics
    would be NaN, its pictures blank)."""
    where = "" if layer is None else f" in layer {layer}"
    return AttnvizError(
        f"{name} returned attention weights that are not finite (NaN or infinity){where}: "
        "its numbers are broken (a NaN weight in the checkpoint, or float16 overflowing: try "
        "--model-dtype float32)"
    )


def check_weights(
    weights: np.ndarray,
    *,
    causal: bool,
    name: str,
    tolerance: float = 1e-4,
    positions: Sequence[int] | None = None,
    distributions: bool = True,
) -> None:
    """Refuse numbers that are not attention: rows must be distributions (unless weighted),
    causal maps must not look ahead (of rows at known query ``positions``, or square maps)."""
    if not np.isfinite(weights).all():
        raise weights_not_finite(name)
    worst = row_error(weights) if distributions else 0.0
    if worst > tolerance:
        raise AttnvizError(
            f"{name} returned attention whose rows do not sum to 1 (off by up to {worst:.3g}): "
            "these are not softmax weights"
        )
    if causal and lookahead(weights, positions) > tolerance:
        raise AttnvizError(f"{name} returned causal attention that looks ahead")
