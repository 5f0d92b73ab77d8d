"""From the model options of a command to an extractor and what to ask of it.

Every model command takes the same pretrained-model and built-in-stack options
through :func:`model_settings`, and turns them, with its selection, into a
:class:`Job`: the model's spec and the :class:`~attnviz.request.Request` of what
to read, checked before anything heavy is imported; the spec is then opened into
an :class:`~attnviz.extractor.Extractor`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attnviz.asked import check_asked
from attnviz.builtin.config import BuiltinConfig
from attnviz.choices import (
    Aggregate,
    Attention,
)
from attnviz.cli import declarations as d
from attnviz.cli import model_options as m
from attnviz.cli.answer_settings import NO_EFFECTS, Effects
from attnviz.cli.bundles import bundle, given_flags, request_fields
from attnviz.cli.option_kinds import memory_size
from attnviz.errors import UsageError
from attnviz.inputs import Input
from attnviz.outputs import refuse_unused
from attnviz.request import Request, asked_for
from attnviz.safe_text import display_label

if TYPE_CHECKING:  # imported where used: `attnviz --help` imports this module
    from attnviz.analysis.heads import TopHeads
    from attnviz.cli.environment import Environment
    from attnviz.extractor import Extractor
    from attnviz.loading import ExtractorSpec
    from attnviz.maps import AttentionMaps
    from attnviz.pretrained.loading import LoadOptions
    from attnviz.results import Result


@dataclass(frozen=True)
class ModelSettings:
    """The pretrained-model and built-in-stack options, as every model command takes them:
    each field declares its option, in the order --help lists them."""

    special: d.SpecialOption = True
    words: d.WordsOption = False
    raw_pieces: d.RawPiecesOption = False
    chat: d.ChatOption = False
    system: d.SystemOption = None
    download: m.DownloadOption = False
    trust_remote_code: m.TrustRemoteCodeOption = False
    allow_pickle: m.AllowPickleOption = False
    verbose: m.VerboseOption = False
    device: m.DeviceOption = "auto"
    model_dtype: m.ModelDtypeOption = "auto"
    device_map: m.DeviceMapOption = None
    attention: m.AttentionOption = Attention.AUTO
    memory: m.MemoryOption = None  # the library's default block budget
    num_layers: m.NumLayersOption = None
    num_heads: m.NumHeadsOption = None
    d_model: m.DModelOption = None
    seed: d.SeedOption = None
    positions: m.PositionsOption = None
    projections: m.ProjectionsOption = None
    keep_case: m.KeepCaseOption = False

    def stack(self) -> dict[str, Any]:
        """The built-in stack options that were given, as BuiltinConfig fields."""
        stack: dict[str, Any] = {"num_layers": self.num_layers, "num_heads": self.num_heads}
        stack |= {"d_model": self.d_model, "seed": self.seed, "positions": self.positions}
        stack |= {"projections": self.projections, "lowercase": False if self.keep_case else None}
        return {name: value for name, value in stack.items() if value is not None}

    def given(self) -> list[str]:
        """The options given, not left at their defaults, as the command line spells them."""
        return given_flags(self)

    def without_stack(self) -> ModelSettings:
        cleared: dict[str, Any] = dict.fromkeys(self.stack(), None)
        return replace(self, **cleared, keep_case=False)

    def load_options(self) -> LoadOptions:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.pretrained.loading import LoadOptions

        return LoadOptions(
            download=self.download,
            trust_remote_code=self.trust_remote_code,
            allow_pickle=self.allow_pickle,
            verbose=self.verbose,
            device=self.device,
            dtype=self.model_dtype,
            device_map=self.device_map,
            attention=self.attention,
            **({} if self.memory is None else {"memory": memory_size(self.memory)}),
        )

    def run_options(self) -> list[str]:
        """The options of how a pretrained model runs its attention that were given."""
        given = {"--attention": self.attention is not Attention.AUTO, "--memory": self.memory}
        return [flag for flag, was_given in given.items() if was_given]


@dataclass(frozen=True)
class MapProducts:
    """What a command that writes maps keeps of a long input: chosen rows or pooled bins."""

    rows: d.RowsOption = None
    pool: d.PoolOption = None
    span: d.SpanOption = None
    weigh: d.WeighOption = None

    def given(self) -> list[str]:
        """The options given, as typed: saved maps (--from) have no use for them."""
        return given_flags(self)

    def check(self, aggregate: Aggregate | None) -> None:
        """Refuse now, before a model runs, what the aggregation would refuse of every
        input: rollout and flow of chosen rows, of pooled bins (the rollout of bins is
        not the binned rollout) or of value-weighted maps."""
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.analysis.aggregate import CHAINED, rows_refused

        if aggregate in CHAINED and self.weigh is not None:
            raise UsageError(
                f"{aggregate} chains rows that sum to 1 through the layers: give --weigh or "
                f"--aggregate {aggregate}, not both"
            )
        if aggregate in CHAINED and self.rows is not None:
            raise UsageError(rows_refused(aggregate, "--rows keeps chosen rows"))
        if aggregate in CHAINED and self.pool is not None:
            raise UsageError(rows_refused(aggregate, "--pool keeps pooled bins"))

    def ranking(self, top: TopHeads | None) -> None:
        """Refuse, before a model loads, heads ranked by a statistic of value-weighted maps,
        whose rows are no distributions (an effect on an answer ranks them well)."""
        if self.weigh is None or top is None or top.by_effect:
            return
        raise UsageError(
            f"--by {top.by} reads each row as a distribution, which value-weighted maps are "
            "not: rank by ablation or dla with --answer, or leave out --weigh"
        )

    def drawn(self, settings: ModelSettings, aggregate: Aggregate | None = None) -> MapProducts:
        """For a picture, the page or the terminal: a long input pooled by itself (unless
        rows, bins or a span were chosen, tokens regrouped, or a rollout or flow asked
        for, which chains whole maps), so that it can be drawn."""
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.analysis.aggregate import CHAINED

        if given_flags(self, ["rows", "pool", "span"]) or settings.words or not settings.special:
            return self
        return self if aggregate in CHAINED else replace(self, pool=d.AUTO_POOL)


DEFAULT_SETTINGS = ModelSettings()


@dataclass(frozen=True)
class Reading:
    """What a model command reads: which model, in which attention mode, which layers and
    heads; each field declares its option. A command whose options differ (generate's
    model, explain's one layer and head) makes its own."""

    model: d.ModelOption = d.BUILTIN
    mode: d.ModeOption = None
    layer: d.LayerOption = "all"
    head: d.HeadOption = "all"


# Gives a command the model, mode, layer and head options as one ``reading`` argument.
reading_options = bundle("reading", Reading)
# The same without --mode and --head, for lens and trace: every head of the layers asked,
# in the model's own mode.
layer_reading = bundle("reading", Reading, leave_out=("mode", "head"))
DEFAULT_READING = Reading()


# Gives a command that writes maps the long-input options as one ``products`` argument.
map_products = bundle("products", MapProducts)
# The same without --pool and --weigh, for statistics, which read exact rows of weights.
row_products = bundle("products", MapProducts, leave_out=("pool", "weigh"))
NO_PRODUCTS = MapProducts()

# Gives a command the model and built-in-stack options as one ``settings`` argument.
model_settings = bundle("settings", ModelSettings)
_STACK_OPTIONS = ("num_layers", "num_heads", "d_model", "seed", "positions", "projections")
# The same without the built-in stack's, for commands only pretrained models can serve.
pretrained_settings = bundle("settings", ModelSettings, leave_out=(*_STACK_OPTIONS, "keep_case"))
# trace patches the model's own positions: no token is dropped (--no-special) nor merged
# (--words) in its rows.
trace_settings = bundle(
    "settings", ModelSettings, leave_out=(*_STACK_OPTIONS, "keep_case", "words", "special")
)
# generate writes tokens that are no word of a given text: --words has nothing to merge.
generation_settings = bundle(
    "settings", ModelSettings, leave_out=(*_STACK_OPTIONS, "keep_case", "words")
)
# needle builds its prompts from tokens, and reads one row per head: every token kept as
# it is, no labels, no blocks of rows.
needle_settings = bundle(
    "settings",
    ModelSettings,
    leave_out=(*_STACK_OPTIONS, "keep_case", "words", "special", "raw_pieces", "system", "memory"),
)


@dataclass(frozen=True)
class Job:
    """Which model to load, what to read from it for every input, and the parts every
    input shares (a target, sentence B, an answer)."""

    spec: ExtractorSpec
    request: Request
    # The parts every input shares, with TEXT as given or, when not read yet (stdin), a
    # stand-in: checked before a model loads.
    first: Input
    read_now: bool  # first holds TEXT as given

    def fingerprint(self) -> dict[str, Any]:
        """What decides the maps, as plain JSON values (a batch's manifest records it)."""
        return {**self.spec.fingerprint(), **self.request.fingerprint()}

    def open(self, environment: Environment) -> Extractor:
        """Load the model now, before any output starts; under a spinner on a terminal."""
        return load_shown(self.spec, environment)

    def input(self, text: str) -> Input:
        """One text with the parts every input shares, checked (once: TEXT was before)."""
        if self.read_now and self.first.text == text:
            return self.first
        return replace(self.first, text=text)

    def run(
        self, extractor: Extractor, text: str, environment: Environment | None = None
    ) -> Result:
        """What the request reads of one text, its long passes shown on a terminal's
        stderr (given the ``environment``)."""
        # rich: only where a command runs a model (`attnviz --help` imports this module)
        from attnviz.cli.environment import NO_TERMINAL, passes_shown

        with passes_shown(environment or NO_TERMINAL) as listener:
            (found,) = extractor.run([self.input(text)], self.request, progress=listener)
        return found

    def maps(self, extractor: Extractor, text: str) -> AttentionMaps:
        """The maps of one text, for a request that reads maps."""
        return asked_for(self.run(extractor, text).maps)


def load_shown(spec: ExtractorSpec, environment: Environment) -> Extractor:
    """Load the model of ``spec``; a pretrained one under a spinner on a terminal, or
    (where it is converted first) with a line of its progress now and then in a log."""
    if spec.model == d.BUILTIN:
        return spec.load()
    if not environment.stderr_is_terminal:
        # rich: only where a model loads (`attnviz --help` imports this module)
        from attnviz.cli.environment import passes_shown
        from attnviz.progress import reporting

        with passes_shown(environment) as listener, reporting(listener):
            return spec.load()
    from rich.console import Console
    from rich.text import Text

    console = Console(stderr=True, markup=False, highlight=False, force_terminal=True)
    # A name or a path the user gave: never markup, never an instruction to the terminal.
    with console.status(Text(f"loading {display_label(spec.model)} …")):
        return spec.load()


def request(
    reading: Reading,
    *,
    settings: ModelSettings,
    text: str | None = None,
    target: str | None = None,
    pair: str | None = None,
    products: MapProducts = NO_PRODUCTS,
    aggregate: Aggregate | None = None,
    effects: Effects = NO_EFFECTS,
    statistics: bool = False,
    **alone: Any,
) -> Job:
    """Check the model options together, and what can be checked without a model: the
    text, target and answer (the text unless read from stdin), how the selection is
    written, and what the aggregation asks of the maps. The request reads the maps, or
    the heads' ``statistics``, and what ``effects`` asks of an answer; or a product read
    alone, ``alone`` its request fields (``trace=`` and ``by_position=``, ``lens=``,
    ``circuit=``, ``activations=`` and ``edits=``)."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.loading import ExtractorSpec, builtin_named

    model = reading.model
    named = builtin_named(model)  # builtin:seed=1, the name that the stack's maps record
    if named is not None:
        model = d.BUILTIN
    given = settings.stack()
    _check_for(model, settings, given)
    products.check(aggregate)
    effects = effects.read(text)
    parts = (target, pair, effects.answer, effects.versus, effects.corrupt)
    # Without TEXT (stdin, saved maps, the probe), the parts every input is read with are
    # checked with a stand-in text, and again with each line.
    read_now = text is not None and text != d.STDIO
    first = Input(text if text is not None and read_now else d.STDIO, *parts)
    try:
        config = replace(named, **given) if named else BuiltinConfig(**given) if given else None
    except ValueError as error:
        raise UsageError(str(error)) from None
    asked = Request(
        mode=reading.mode,
        layers=reading.layer,
        heads=reading.head,
        **request_fields(settings),
        **request_fields(products),
        **effects.asked(statistics, **alone),
    )
    return Job(
        spec=ExtractorSpec(model, config, settings.load_options() if model != d.BUILTIN else None),
        request=asked,
        first=check_asked(asked, first),
        read_now=read_now,
    )


def _check_for(model: str, settings: ModelSettings, stack: dict[str, Any]) -> None:
    """The model options apply to the model asked: placement and chat to a pretrained
    model, the ``stack`` options given to the built-in one."""
    placed = (settings.device, settings.model_dtype, settings.device_map) != ("auto", "auto", None)
    if model == d.BUILTIN and placed:
        raise UsageError(
            "--device, --model-dtype and --device-map place a pretrained model; the built-in "
            "stack runs on the CPU in float32"
        )
    if placed:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.pretrained.placement import check_placement

        check_placement(settings.device, settings.model_dtype)
    if model == d.BUILTIN:
        refuse_unused(settings.run_options(), "pretrained models (--model)", "the built-in stack")
    if model == d.BUILTIN and settings.chat:
        raise UsageError("--chat renders the text with a pretrained instruct model's template")
    if model != d.BUILTIN and stack:
        raise UsageError(
            "--num-layers, --num-heads, --d-model, --seed, --positions, --projections and "
            "--keep-case configure the built-in stack; they do not apply to --model"
        )
