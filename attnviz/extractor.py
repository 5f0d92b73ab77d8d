"""One door to models: :func:`load` gives an :class:`Extractor`, which holds one
loaded model and turns texts into :class:`~attnviz.maps.AttentionMaps`.

>>> import attnviz
>>> extractor = attnviz.load()              # the built-in stack; or load("minilm")
>>> maps = extractor.extract("Hello I love you", mode="masked", layers=0)
>>> maps.weights.shape                       # (layers, heads, query tokens, key tokens)
(1, 4, 4, 4)

An extractor is described by an :class:`ExtractorSpec` (model name, built-in
configuration, load options): small and picklable, so that a worker process
can build its own extractor from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.builtin.config import BuiltinConfig
from attnviz.choices import Mode, chosen
from attnviz.errors import UsageError
from attnviz.pretrained.loading import LoadOptions

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps
    from attnviz.pretrained.generation import Generation

BUILTIN = "builtin"

Selection = str | int | Sequence[int] | None  # 2, "0,2", "0-2", [0, 2], "all" or None (all)
# A text; a (text, target) pair for cross mode; or (text, target, pair) with sentence B.
Item = str | tuple[str, str | None] | tuple[str, str | None, str | None]


@dataclass(frozen=True)
class ExtractorSpec:
    """What an extractor is built from."""

    model: str = BUILTIN  # "builtin", an alias, a directory or a Hugging Face id
    config: BuiltinConfig | None = None  # the built-in stack's size and seed
    load_options: LoadOptions | None = None  # how a pretrained model may be loaded

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
            from attnviz.builtin.extractor import BuiltinExtractor

            return BuiltinExtractor(self.config or BuiltinConfig())
        from attnviz.pretrained.extractor import PretrainedExtractor

        return PretrainedExtractor.load(self.model, self.load_options or LoadOptions())


def builtin_named(model: str) -> BuiltinConfig | None:
    """The built-in stack that a model name such as ``builtin:seed=1`` describes (the
    name that its maps record), or None for any other name."""
    if not model.startswith(f"{BUILTIN}:"):
        return None
    try:
        return BuiltinConfig.from_name(model)
    except ValueError as error:
        raise UsageError(str(error)) from None


class Extractor(ABC):
    """One loaded model: any number of texts in, their attention maps out."""

    spec: ExtractorSpec

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name as the maps record it."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    @staticmethod
    def from_model(model: Any, tokenizer: Any, name: str | None = None) -> Extractor:
        """An extractor around a transformers model already loaded (a notebook's), which
        must use eager attention; ``name`` is what maps record (default: its
        ``name_or_path``)."""
        from attnviz.pretrained.extractor import PretrainedExtractor

        return PretrainedExtractor.wrap(model, tokenizer, name)

    def extract(
        self,
        text: str,
        *,
        mode: Mode | str | None = None,
        target: str | None = None,
        layers: Selection = None,
        heads: Selection = None,
        special: bool = True,
        words: bool = False,
        raw_pieces: bool = False,
        pair: str | None = None,
        chat: bool = False,
        system: str | None = None,
    ) -> AttentionMaps:
        """The attention maps of ``text`` for the chosen layers and heads.

        ``mode`` is ``"self"``, ``"masked"`` (causal) or ``"cross"``, by default
        the model's own; in cross mode the tokens of ``target`` are the queries
        (rows) and the tokens of ``text`` the keys (columns). ``layers`` and
        ``heads`` take an index, a list, a range string such as ``"0-2"``,
        ``"all"`` or ``None`` (all). Pretrained models only: ``special=False``
        drops special tokens and renormalises rows; ``words=True`` merges
        sub-word pieces into words; ``raw_pieces=True`` labels tokens with the
        tokenizer's own pieces (``##ing``, ``Ġthe``) instead of cleaned text.
        ``pair`` is sentence B of a sentence pair for an encoder (``[CLS] A [SEP] B
        [SEP]``, with token types); ``chat`` renders the text as one user message
        through the tokenizer's chat template (after a ``system`` message), its
        tokens labelled special.
        """
        (maps,) = self.extract_many(
            [(text, target, pair)],
            mode=mode,
            layers=layers,
            heads=heads,
            special=special,
            words=words,
            raw_pieces=raw_pieces,
            chat=chat,
            system=system,
        )
        return maps

    @abstractmethod
    def extract_many(
        self,
        items: Iterable[Item],
        *,
        mode: Mode | str | None = None,
        layers: Selection = None,
        heads: Selection = None,
        special: bool = True,
        words: bool = False,
        raw_pieces: bool = False,
        batch_size: int = 16,
        chat: bool = False,
        system: str | None = None,
    ) -> Iterator[AttentionMaps]:
        """The maps of each item (a text, or a (text, target) pair), in order. Pretrained
        models run ``batch_size`` items per padded forward pass; each result equals what
        :meth:`extract` gives for that item alone. The request is checked before any work."""

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 20,
        sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: bool = True,
        mode: Mode | str | None = None,
        layers: Selection = None,
        heads: Selection = None,
        special: bool = True,
        raw_pieces: bool = False,
        chat: bool = False,
        system: str | None = None,
    ) -> Generation:
        """Let the model write up to ``max_new_tokens`` tokens after ``prompt`` (greedy, or
        sampled with ``sample``, reproducibly by ``seed``; ending at the end-of-sequence
        token unless ``stop=False``) and return the text with the maps of the whole
        sequence, ``maps.prompt_length`` marking where the generated rows begin.
        Decoders give masked attention; encoder-decoders the cross-attention of each
        written token over the prompt (``mode`` may ask for masked or self). ``chat``
        renders the prompt through the tokenizer's chat template (after ``system``)."""
        raise UsageError(f"{self.name} does not generate text: give a pretrained language model")

    @abstractmethod
    def explain(
        self,
        text: str,
        *,
        mode: Mode | str | None = None,
        target: str | None = None,
        layer: int | str = 0,
        head: int | str = 0,
        query: int | None = None,
        raw_pieces: bool = False,
    ) -> Any:
        """One head's attention step by step: the built-in stack walks through every
        matrix; a pretrained model explains one ``query`` row from its dot products
        (tokens labelled with the tokenizer's own pieces when ``raw_pieces``)."""


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
        return Extractor.from_model(model, tokenizer)
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


def parse_mode(mode: Mode | str | None) -> Mode | None:
    return None if mode is None else chosen(Mode, mode, "mode")


def check_text(text: str, what: str = "text") -> None:
    """An empty or blank text is a usage error, checked before any model runs."""
    if not text or not text.strip():
        raise UsageError(f"the {what} is empty: give some words to look at")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        # Python keeps a command line's bytes that are not UTF-8 as U+DC80..U+DCFF.
        code = ord(text[error.start])
        what_is_there = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a surrogate"
        raise UsageError(
            f"the {what} is not UTF-8 text: {what_is_there} at offset {error.start}"
        ) from None


def as_item(item: Item) -> tuple[str, str | None, str | None]:
    """(text, target, pair) of an item, each given part checked like the text."""
    if isinstance(item, str):
        item = (item,)
    text, target, pair = (*item, None, None)[:3]
    check_text(text, "text")
    if target is not None:
        check_text(target, "target")
    if pair is not None:
        check_text(pair, "pair")
    return text, target, pair


def as_pair(item: Item) -> tuple[str, str | None]:
    """(text, target) of an item, for models that read no sentence pairs."""
    text, target, pair = as_item(item)
    if pair is not None:
        raise UsageError("sentence pairs (--pair) are read by pretrained encoders such as BERT")
    return text, target
