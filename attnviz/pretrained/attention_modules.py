"""Which modules of a model give which attention: one table from (family, mode) to
the stream of attention modules to read.

Each sub-model (a PreTrainedModel inside the model: an encoder, a decoder)
declares in ``_can_record_outputs`` which of its modules produce
``attentions`` and ``cross_attentions``; transformers builds its own
``output_attentions`` from exactly those modules, and so does attnviz.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from attnviz.choices import Mode
from attnviz.errors import UsageError


class Family(StrEnum):
    ENCODER = "encoder"  # BERT, RoBERTa: self-attention over the text
    DECODER = "decoder"  # GPT-2, Llama, Qwen: causal self-attention over the text
    ENCODER_DECODER = "encoder-decoder"  # BART, T5, Marian: encoder, decoder and cross


class Stream(StrEnum):
    SELF = "self"  # the encoder, or a decoder-only stack
    DECODER = "decoder"  # the decoder self-attention of an encoder-decoder
    CROSS = "cross"  # the decoder's attention over the encoder's output


NATURAL_MODES = {
    Family.ENCODER: (Mode.SELF,),
    Family.DECODER: (Mode.MASKED,),
    Family.ENCODER_DECODER: (Mode.SELF, Mode.MASKED, Mode.CROSS),
}


def stream_for(family: Family, mode: Mode) -> Stream:
    """The attention modules that give ``mode`` attention in a model of ``family``."""
    if mode is Mode.CROSS:
        return Stream.CROSS
    if mode is Mode.MASKED and family is Family.ENCODER_DECODER:
        return Stream.DECODER
    return Stream.SELF


def resolve_mode(family: Family, name: str, mode: Mode | None, has_target: bool) -> Mode:
    """The mode to read: the one asked for if the model has it, else the model's own."""
    natural = NATURAL_MODES[family]
    if mode is None:
        mode = Mode.CROSS if family is Family.ENCODER_DECODER and has_target else natural[0]
    if mode not in natural:
        kind = f"an {family.value}" if family is Family.ENCODER else "a decoder"
        raise UsageError(
            f"{name} is {kind} model: it has {' and '.join(natural)} attention only, "
            f"not {mode}; use --mode {natural[0]}"
        )
    needs_target = family is Family.ENCODER_DECODER and mode in (Mode.MASKED, Mode.CROSS)
    if needs_target and not has_target:
        raise UsageError(
            f"{mode} mode of an encoder-decoder model needs --target: the decoder's tokens"
        )
    if not needs_target and has_target:
        raise UsageError(
            f"--target is read only by the decoder of an encoder-decoder model "
            f"({name} in {mode} mode has no use for it)"
        )
    return mode


def family_of(config: Any) -> Family:
    """Encoder, decoder or encoder-decoder, from the model's configuration."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if getattr(config, "is_encoder_decoder", False):
        return Family.ENCODER_DECODER
    model_type = getattr(config, "model_type", "")
    causal_only = (
        model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )
    if causal_only or getattr(config, "is_decoder", False):
        return Family.DECODER
    return Family.ENCODER


# What transformers records an output from: (class, class name suffix, layer name, output index).
RecorderSpec = tuple[type | None, str | None, str | None, int]


def _recorder_specs(module: Any) -> dict[str, list[RecorderSpec]]:
    """The specs of the attention outputs a (sub-)model declares."""
    from transformers.utils.output_capturing import OutputRecorder

    specs: dict[str, list[RecorderSpec]] = {}
    for key, entries in (getattr(type(module), "_can_record_outputs", None) or {}).items():
        if key not in ("attentions", "cross_attentions"):
            continue
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, OutputRecorder):
                spec = (entry.target_class, entry.class_name, entry.layer_name, entry.index)
            elif isinstance(entry, str):
                spec = (None, entry, None, 1)
            else:
                spec = (entry, None, None, 1)
            specs.setdefault(key, []).append(spec)
    return specs


def _matches(module: Any, name: str, spec: RecorderSpec) -> bool:
    target_class, class_name, layer_name, _ = spec
    if not (
        (target_class is not None and isinstance(module, target_class))
        or (class_name is not None and name.endswith(class_name))
    ):
        return False
    return layer_name is None or f".{layer_name.strip('.')}." in f".{name}."


def attention_streams(model: Any, family: Family) -> dict[Stream, list[tuple[Any, int]]]:
    """Every attention module, by stream, with the index of its weights in its output."""
    from transformers import PreTrainedModel

    submodels = [(name, module) for name, module in model.named_modules()]
    submodels = [(n, m) for n, m in submodels if isinstance(m, PreTrainedModel)]
    streams: dict[Stream, list[tuple[Any, int]]] = {}
    for prefix, submodel in submodels:
        specs = _recorder_specs(submodel)
        nested = [
            n for n, _ in submodels if n != prefix and (not prefix or n.startswith(f"{prefix}."))
        ]
        for key, spec_list in specs.items():
            stream = _stream_name(key, prefix, family)
            for name, module in submodel.named_modules():
                full = f"{prefix}.{name}" if prefix else name
                if any(full == n or full.startswith(f"{n}.") for n in nested):
                    continue  # belongs to a nested sub-model with its own specs
                for spec in spec_list:
                    if _matches(module, full, spec):
                        streams.setdefault(stream, []).append((module, spec[3]))
                        break
    return streams


def _stream_name(key: str, prefix: str, family: Family) -> Stream:
    if key == "cross_attentions":
        return Stream.CROSS
    if family is Family.ENCODER_DECODER and prefix.split(".")[-1].startswith("decoder"):
        return Stream.DECODER
    return Stream.SELF


def layer_kinds(config: Any, stream: Stream) -> list[str] | None:
    """Each layer's attention in ``stream`` as the model's config declares it: "global",
    or "sliding N" (a query reads its N latest keys, itself included), or the config's own
    word for another kind; None where every layer is global. Encoder-decoders' streams
    are global."""
    if stream is not Stream.SELF:
        return None
    config = config.get_text_config()
    window = getattr(config, "sliding_window", None)
    declared = getattr(config, "layer_types", None)
    if declared is None:  # a config from before layer types: one window for every layer
        if not window:
            return None
        declared = ["sliding_attention"] * config.num_hidden_layers
    names = {"full_attention": "global", "sliding_attention": f"sliding {window}"}
    kinds = [names.get(kind, str(kind).removesuffix("_attention")) for kind in declared]
    return None if set(kinds) == {"global"} else kinds
