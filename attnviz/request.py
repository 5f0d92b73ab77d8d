"""What to read from a model for every input: one :class:`Request`, from the command
line (or a notebook) to the extractors.

An option of extraction is spelled in its declaration (``attnviz.cli``), here, and
where it is used: the request is built and checked once, then read as it is by the
built-in stack, a pretrained model, generation, the Ray workers and the manifest of
a batch. The long-context products (chosen rows, pooled maps, span scores) are
further fields of this object.

Only the standard library and attnviz's lowest modules are imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, TypeVar, get_args, get_type_hints

from attnviz.activations import check_edits, check_names
from attnviz.choices import (
    ABLATION_LABELS,
    Ablation,
    Measure,
    Method,
    Mode,
    Site,
    Weighting,
    chosen,
)
from attnviz.circuits.options import CircuitOptions
from attnviz.errors import SchemaError, UsageError
from attnviz.selection import Selection, check_pool, checked_positions, checked_selection


@dataclass(frozen=True)
class Request:
    """Which attention to read and how to label its tokens; checked when made.

    ``mode`` is self, masked (causal) or cross, by default the model's own.
    ``layers`` and ``heads`` take an index, a list, a range such as ``"0-2"``,
    ``"all"`` or None (all). Pretrained models only: ``special=False`` drops
    special tokens and renormalises rows; ``words`` merges sub-word pieces into
    words; ``raw_pieces`` labels tokens with the tokenizer's own pieces; ``chat``
    renders the text as one user message through the chat template, after a
    ``system`` message if one is given.

    Long inputs: ``rows`` keeps only some query rows, over every key (``"last"``,
    ``-1``, ``"100-120"``, a list, or the tokens of a text such as ``"What is"``);
    ``pool`` pools neighbouring tokens so that each map has at most ``pool`` ×
    ``pool`` bins (rows averaged, columns summed); ``span`` names key tokens (as
    ``rows`` names query tokens) whose weight each head's ``span`` statistic sums:
    how much a head reads of a passage, a retrieval score.

    ``weigh="value"`` multiplies each weight by the norm of what its key writes through
    the head, ``a_ij · ‖W_O^h v_j‖``: rows no longer sum to 1.

    What is read of each input: its ``maps``; each head's ``statistics`` (a head table);
    each head's ``effects`` on the input's answer (``ablate``: its output zeroed, or
    replaced by its mean over the text; and, where the input has a corrupted twin, each
    head's ``patch``); or, alone: with ``knockout`` (query rows, span keys), the change
    in the answer when those rows may not read those keys in ``window`` layers around
    each layer; with ``trace`` (a site), the patching effect of each layer × position (of
    each layer × head at a head's site: at every position, or ``by_position``); with
    ``lens``, the logit lens: each layer's residual stream read through the final norm and
    the unembedding, at every position; with ``circuit`` (what it asks), every edge
    between heads scored on the answer and a circuit's faithfulness (asked of texts
    together: :meth:`~attnviz.extractor.Extractor.circuit`); with ``activations`` (site
    names, :mod:`attnviz.activations`), each named site's tensor in one run of the text,
    with ``edits`` (a name to an edit) put in place of the sites they name. ``method``
    measures effects
    exactly or by their gradient estimate. Several products may be asked at once: one
    pass over a text serves them.
    """

    mode: Mode | None = None
    layers: Selection = None
    heads: Selection = None
    special: bool = True
    words: bool = False
    raw_pieces: bool = False
    chat: bool = False
    system: str | None = None
    rows: Selection = None
    pool: int | None = None
    span: Selection = None
    weigh: Weighting | None = None
    maps: bool = True
    statistics: bool = False
    effects: bool = False
    ablate: Ablation = Ablation.ZERO
    knockout: tuple[Selection, Selection] | None = None
    window: int = 1
    trace: Site | None = None
    by_position: bool = False
    lens: bool = False
    circuit: CircuitOptions | None = None
    # names of sites (attnviz.activations), and the edits of the run that reads them
    activations: tuple[str, ...] | None = None
    edits: Mapping[str, Any] | None = None
    method: Method = Method.EXACT
    # a Measure (or its name), or a function of the last position's logits, (B, vocabulary)
    # float32, giving (B,): what effects and traces are measured by; None: the
    # log-probability, or with a versus answer the logit difference
    metric: Measure | Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.mode is not None:
            object.__setattr__(self, "mode", chosen(Mode, self.mode, "mode"))
        if self.weigh is not None:
            object.__setattr__(self, "weigh", chosen(Weighting, self.weigh, "weighting"))
        object.__setattr__(self, "layers", checked_selection(self.layers, "layer"))
        object.__setattr__(self, "heads", checked_selection(self.heads, "head"))
        for name in ("special", "words", "raw_pieces", "chat", "by_position", "lens", *_ASKED):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} is True or False, not {getattr(self, name)!r}")
        if self.system is not None and not isinstance(self.system, str):
            raise UsageError(f"system is a text, not {type(self.system).__name__}")
        if self.system is not None and not self.chat:
            raise UsageError("--system is the first message of a chat: add --chat")
        self._check_products()
        self._check_asked()

    def _check_products(self) -> None:
        for name, what in (("rows", "row"), ("span", "span")):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, checked_positions(value, name, what))
        check_pool(self.pool)
        if self.rows is not None and self.pool is not None:
            raise UsageError("--rows and --pool are two views of long maps: give one of them")
        if self.span is not None and self.pool is not None:
            raise UsageError("--span is scored on exact rows, not pooled bins: use --rows with it")
        reshaped = [
            name for name, on in (("--words", self.words), ("--no-special", not self.special)) if on
        ]
        positioned = [name for name in ("rows", "pool", "span") if getattr(self, name) is not None]
        if reshaped and positioned:
            raise UsageError(
                f"{reshaped[0]} reshapes whole maps: with --{positioned[0]}, the tokens are read "
                "as the tokenizer gives them"
            )
        if reshaped and self.weigh is not None:
            raise UsageError(
                f"{reshaped[0]} renormalises attention rows, which value-weighted maps are "
                "not: with --weigh, the tokens are read as the tokenizer gives them"
            )

    def _check_asked(self) -> None:
        object.__setattr__(
            self, "ablate", chosen(Ablation, self.ablate, "ablation", ABLATION_LABELS)
        )
        object.__setattr__(self, "method", chosen(Method, self.method, "method"))
        if self.metric is not None and not callable(self.metric):
            object.__setattr__(self, "metric", chosen(Measure, self.metric, "metric"))
        answered = self.effects or self.trace is not None or self.circuit is not None
        if self.metric is not None and not answered:
            raise UsageError("--metric says how effects are measured: give --answer")
        if self.trace is not None:
            object.__setattr__(self, "trace", chosen(Site, self.trace, "site"))
        if self.activations is not None:
            object.__setattr__(self, "activations", check_names(self.activations))
        if self.edits is not None:
            if self.activations is None:
                raise UsageError("edits change a run that reads activations: ask for them")
            object.__setattr__(self, "edits", check_edits(self.edits))
        if self.circuit is not None and not isinstance(self.circuit, CircuitOptions):
            raise UsageError(f"circuit is CircuitOptions, not {type(self.circuit).__name__}")
        window = self.window
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise UsageError(f"--window is a number of layers, at least 1, not {window!r}")
        if self.knockout is not None:
            if not isinstance(self.knockout, tuple | list) or len(self.knockout) != 2:
                raise UsageError(f"knockout is (rows, span), not {self.knockout!r}")
            rows, span = self.knockout
            knocked = (
                checked_positions(rows, "knockout", "row"),
                checked_positions(span, "knockout", "span"),
            )
            object.__setattr__(self, "knockout", knocked)
        self._check_alone()
        if self.by_position and (self.trace is None or not self.trace.of_heads):
            heads = ", ".join(site.value for site in Site if site.of_heads)
            raise UsageError(
                f"--by-position splits a head's effect by position: trace --site {heads} (a "
                "layer's site is read by position already)"
            )
        if self.method is Method.GRADIENT and not (self.effects or self.trace is not None):
            raise UsageError("--method says how effects are measured: give --answer")
        if self.method is Method.GRADIENT and self.knockout is not None:
            raise UsageError("a knockout is measured exactly: --method gradient does not apply")
        if self.ablate is not Ablation.ZERO and not self.effects:
            raise UsageError("--ablate says how a head's effect is read: give --answer")
        if self.window != 1 and self.knockout is None:
            raise UsageError("--window is the knockout's: give --knockout ROWS:SPAN")
        if self.statistics and self.pool is not None:
            raise UsageError("statistics are read from exact rows: --pool does not apply to them")
        if self.statistics and self.weigh is not None:
            raise UsageError(
                "head statistics read each row as a distribution: --weigh does not apply to them"
            )

    def _check_alone(self) -> None:
        """Something is asked, and a product that lists more than one number per head
        (a knockout, a trace, the lens, a circuit) is asked alone."""
        asked = [name for name in _ALONE_OR_NOT if getattr(self, name) not in (None, False)]
        if not asked:
            raise UsageError("nothing is asked: a request reads maps, statistics or effects")
        alone_lists = (
            ("knockout", "layers"),
            ("trace", "layers × positions"),
            ("lens", "layers × positions"),
            ("circuit", "edges"),
        )
        if self.activations is not None and asked != ["activations"]:
            other = next(name for name in asked if name != "activations")
            raise UsageError(f"activations are read by one run of their own, not with {other}")
        for alone, lists in alone_lists:
            if getattr(self, alone) not in (None, False) and asked != [alone]:
                other = next(name for name in asked if name != alone)
                raise UsageError(f"a {alone} lists {lists}, not {other}: ask for it alone")

    @property
    def next_token_reader(self) -> str:
        """What of this request reads a model's next token, as a refusal by a model
        without one names it: the lens, a circuit, a trace, or the answer."""
        if self.lens:
            return "the lens"
        if self.circuit is not None:
            return "a circuit"
        if self.trace is not None:
            return "a trace"
        return "--answer"

    @property
    def whole(self) -> bool:
        """True when every query row of every map is asked for, unpooled."""
        return self.rows is None and self.pool is None

    def recorded(self) -> Recorded:
        """What the maps made for this request record of it (the selection, rows and span
        are recorded as the positions they resolve to)."""
        return Recorded(chat=self.chat, system=self.system, weighting=self.weigh)

    @classmethod
    def of(cls, request: Request | None, options: Mapping[str, Any]) -> Request:
        """``request``, or one made of keyword ``options`` (a notebook's ``mode="masked"``);
        not both, and no option that a request does not have."""
        if request is not None and not isinstance(request, Request):
            raise UsageError(f"request is an attnviz Request, not {type(request).__name__}")
        if request is not None and options:
            raise UsageError(
                f"give the request or its options ({', '.join(options)}), not both: "
                "dataclasses.replace(request, ...) changes a request"
            )
        unknown = [name for name in options if name not in _FIELDS]
        if unknown:
            raise UsageError(f"unknown option {unknown[0]!r}: a request has {', '.join(_FIELDS)}")
        return request if request is not None else cls(**options)

    def fingerprint(self) -> dict[str, Any]:
        """What the request decides, as plain JSON values (a batch's manifest records it):
        the fields of release 0.1 always, a field added since only where it is given, so
        that an earlier batch's manifest still matches."""
        values: dict[str, Any] = {}
        for declared in fields(self):
            value = getattr(self, declared.name)
            if declared.name in PRODUCED:  # what is read of the maps, not what decides them
                continue
            if declared.name not in _RELEASE_0_1 and value == declared.default:
                continue
            values[declared.name] = (
                value.value if isinstance(value, Enum) else
                list(value) if isinstance(value, tuple) else value
            )  # fmt: skip
        return values


_FIELDS = tuple(declared.name for declared in fields(Request))
# The model's likeliest next tokens an answer keeps, with their probabilities (heads
# --predictions shows some of them).
PREDICTIONS = 100
# The fields every fingerprint holds, given or not, as release 0.1's manifests do.
_RELEASE_0_1 = ("mode", "layers", "heads", "special", "words", "raw_pieces", "chat", "system")
_ASKED = ("maps", "statistics", "effects")  # what a request reads of each input
_ALONE_OR_NOT = (*_ASKED, "knockout", "trace", "lens", "circuit", "activations")
# The fields that say what is read of the maps, not which maps: a command sets them by
# what it answers (the rest are its options, each under its field's name).
PRODUCED = (
    *_ASKED,
    "ablate",
    "knockout",
    "window",
    "trace",
    "by_position",
    "lens",
    "circuit",
    "activations",
    "edits",
    "method",
    "metric",
)


def asking(request: Request | None, options: dict[str, Any], **asked: Any) -> Request:
    """The request of a method named after what it reads: ``request`` (or one made of
    ``options``) asking for ``asked`` alone."""
    products: dict[str, Any] = {"maps": False, "statistics": False, "effects": False}
    products |= {"knockout": None, "trace": None, "activations": None, "edits": None, **asked}
    if request is None:  # made whole, so that it is checked with what it asks
        return Request.of(None, {**options, **products})
    return replace(Request.of(request, options), **products)


Product = TypeVar("Product")


def asked_for(product: Product | None) -> Product:
    """A product of a result whose request asked for it (every such result holds it)."""
    assert product is not None
    return product


@dataclass(frozen=True)
class Recorded:
    """What maps keep of the request that made them, beyond the tokens and positions they
    hold. Saved maps write and read these fields by this declaration alone (each under
    its name, left out at its default; its type checks what a file holds): a new
    recorded option is a field here and the request's value for it in
    :meth:`Request.recorded`. A field whose metadata has a ``note`` (a format string of its
    value) is said by every picture of the maps, the terminal's and the page's, where it
    is not at its default (:meth:`notes`)."""

    chat: bool = False  # the text was read as one user message in the chat template,
    system: str | None = None  # after this system prompt
    # "value": each weight times the norm of what its key writes through the head,
    # a_ij · ‖W_O^h v_j‖ (--weigh value); rows no longer sum to 1. None: attention weights.
    weighting: Weighting | None = None

    def __post_init__(self) -> None:
        hints = get_type_hints(Recorded)
        for declared in fields(self):
            kinds = get_args(hints[declared.name]) or (hints[declared.name],)
            kind = next(kind for kind in kinds if kind is not type(None))
            value = getattr(self, declared.name)
            if value is None and type(None) in kinds:
                continue
            if issubclass(kind, Enum):
                try:
                    object.__setattr__(self, declared.name, kind(value))
                except ValueError:
                    names = ", ".join(member.value for member in kind)
                    raise SchemaError(f"{declared.name} is one of {names}, not {value!r}") from None
            elif type(value) is not kind:
                raise SchemaError(f"{declared.name} must be {_KINDS[kind]}, not {value!r}")
        if self.system is not None and not self.chat:
            raise SchemaError("system is the system prompt of a chat: it needs chat true")

    def notes(self) -> list[str]:
        """What pictures say of the fields with a ``note``, where not at their default."""
        return [
            declared.metadata["note"].format(value)
            for declared in fields(self)
            if "note" in declared.metadata
            and (value := getattr(self, declared.name)) != declared.default
        ]

    def document(self) -> dict[str, Any]:
        """The fields a saved document holds: those not at their default, as JSON values."""
        return {
            declared.name: value.value if isinstance(value, Enum) else value
            for declared in fields(self)
            if (value := getattr(self, declared.name)) != declared.default
        }

    @classmethod
    def read(cls, document: Mapping[str, Any]) -> Recorded:
        """The record a saved document holds (checked: a SchemaError says what is wrong)."""
        return cls(
            **{
                declared.name: document[declared.name]
                for declared in fields(cls)
                if declared.name in document
            }
        )


_KINDS = {bool: "true or false", str: "a string"}
