"""One door to models: :func:`load` gives an :class:`~attnviz.extractor.Extractor`,
which holds one loaded model and turns texts into
:class:`~attnviz.maps.AttentionMaps`.

>>> import attnviz
>>> extractor = attnviz.load()              # the built-in stack; or load("minilm")
>>> maps = extractor.extract("Hello I love you", mode="masked", layers=0)
>>> maps.weights.shape                       # (layers, heads, query tokens, key tokens)
(1, 4, 4, 4)

An extractor is described by an :class:`ExtractorSpec` (model name, built-in
configuration, load options): small and picklable, so that a worker process
can build its own extractor from it. This module sits above both kinds of
extractor: they are handed their spec and never import it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnviz.builtin.config import BUILTIN, BuiltinConfig
from attnviz.builtin.extractor import BuiltinExtractor
from attnviz.errors import UsageError
from attnviz.pretrained.extractor import PretrainedExtractor
from attnviz.pretrained.loading import LoadOptions, load_model, wrap_model

if TYPE_CHECKING:
    from attnviz.extractor import Extractor
    from attnviz.maps import AttentionMaps
    from attnviz.pretrained.loading import PretrainedModel


@dataclass(frozen=True)
class ExtractorSpec:
    """What an extractor is built from."""

    model: str = BUILTIN  # "builtin", an alias, a directory or a Hugging Face id
    config: BuiltinConfig | None = None  # the built-in stack's size and seed
    load_options: LoadOptions | None = None  # how a pretrained model may be loaded
    # A model handed over already loaded (a notebook's, perhaps changed since it was
    # read from disk): load() gives it back as it is, never its checkpoint. Such a spec
    # does not travel to another process.
    in_memory: PretrainedModel | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        named = builtin_named(self.model)
        if named is not None:  # "builtin:seed=1": the stack that the name describes
            if self.config is not None:
                raise UsageError(
                    f"{self.model} names the built-in stack's settings: leave out config"
                )
            object.__setattr__(self, "model", BUILTIN)
            object.__setattr__(self, "config", named)
        if self.model != BUILTIN and self.config is not None:
            raise UsageError("the built-in stack's settings do not apply to a pretrained model")

    def load(self) -> Extractor:
        """Build the extractor: the built-in stack, or the pretrained model loaded now."""
        if self.model == BUILTIN:
            return BuiltinExtractor(self.config or BuiltinConfig(), self)

        if self.in_memory is not None:
            return PretrainedExtractor(self.in_memory, self)
        return PretrainedExtractor(load_model(self.model, self.load_options or LoadOptions()), self)

    def __reduce__(self) -> Any:
        if self.in_memory is not None:
            raise UsageError(
                f"{self.model} was handed over loaded, in this process's memory: another "
                "process cannot build it from its name; save it with save_pretrained and "
                "give the folder"
            )
        return (ExtractorSpec, (self.model, self.config, self.load_options))

    def fingerprint(self) -> dict[str, Any]:
        """Which model, as plain JSON values (a batch's manifest records it)."""
        config = self.config
        return {
            "model": self.model,
            "model_dtype": None if self.load_options is None else self.load_options.dtype,
            "config": None if config is None else {k: str(v) for k, v in vars(config).items()},
        }


def builtin_named(model: str) -> BuiltinConfig | None:
    """The built-in stack that a model name such as ``builtin:seed=1`` describes (the
    name that its maps record), or None for any other name."""
    if not model.startswith(f"{BUILTIN}:"):
        return None
    try:
        return BuiltinConfig.from_name(model)
    except ValueError as error:
        raise UsageError(str(error)) from None


def load(
    model: str | Any = BUILTIN,
    *,
    tokenizer: Any = None,
    config: BuiltinConfig | None = None,
    load_options: LoadOptions | None = None,
) -> Extractor:
    """Load a model once, to extract from as many texts as you like.

    ``model`` is ``"builtin"`` (the seeded stack, sized by ``config``), an alias
    such as ``"minilm"``, a directory saved with ``save_pretrained`` or a
    Hugging Face id from the local cache (``load_options`` may allow a download,
    pickle weights or remote code). It may also be a transformers model already
    loaded (with eager attention), given with its ``tokenizer``: it is used as it
    is, on its own device and in its own dtype.
    """
    if not isinstance(model, str):
        if config is not None or load_options is not None:
            raise UsageError("config= and load_options= go with a model's name, not a loaded one")
        loaded = wrap_model(model, tokenizer)
        return PretrainedExtractor(loaded, ExtractorSpec(loaded.name, in_memory=loaded))
    if tokenizer is not None:
        raise UsageError("tokenizer= goes with a loaded model=; a named model brings its own")
    return ExtractorSpec(model, config, load_options).load()


def extract(
    text: str,
    *,
    model: str = BUILTIN,
    config: BuiltinConfig | None = None,
    load_options: LoadOptions | None = None,
    **request: Any,
) -> AttentionMaps:
    """``load(model, ...).extract(text, ...)``: for one text. To read many, load once."""
    return load(model, config=config, load_options=load_options).extract(text, **request)
