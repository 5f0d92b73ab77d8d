"""From the model options of a command to an extractor and what to ask of it.

Every model command takes the same pretrained-model and built-in-stack options
through :func:`model_settings`, and turns them, with its selection, into a
:class:`Job`: the model's spec and the :class:`~attnviz.request.Request` of what
to read, checked before anything heavy is imported; the spec is then opened into
an :class:`~attnviz.extractor.Extractor`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnviz.asked import check_asked
from attnviz.builtin.config import BuiltinConfig
from attnviz.choices import (
    ABLATION_LABELS,
    MEASURES,
    Ablation,
    Aggregate,
    Attention,
    Measure,
    Method,
    Site,
    labelled,
)
from attnviz.cli import declarations as d
from attnviz.cli.bundles import bundle, given_flags, request_fields
from attnviz.cli.option_kinds import memory_size
from attnviz.errors import UsageError
from attnviz.head_columns import HeadColumn, Needs
from attnviz.inputs import read_option_text
from attnviz.outputs import refuse_unused
from attnviz.request import Input, Request, asked_for
from attnviz.safe_text import display_label

if TYPE_CHECKING:  # imported where used: `attnviz --help` imports this module
    from attnviz.analysis.heads import TopHeads
    from attnviz.circuit_options import CircuitOptions
    from attnviz.cli.output import Environment
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
    download: d.DownloadOption = False
    trust_remote_code: d.TrustRemoteCodeOption = False
    allow_pickle: d.AllowPickleOption = False
    verbose: d.VerboseOption = False
    device: d.DeviceOption = "auto"
    model_dtype: d.ModelDtypeOption = "auto"
    device_map: d.DeviceMapOption = None
    attention: d.AttentionOption = Attention.AUTO
    memory: d.MemoryOption = None  # the library's default block budget
    num_layers: d.NumLayersOption = None
    num_heads: d.NumHeadsOption = None
    d_model: d.DModelOption = None
    seed: d.SeedOption = None
    positions: d.PositionsOption = None
    projections: d.ProjectionsOption = None
    keep_case: d.KeepCaseOption = False

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


EFFECTS_PANEL = "What heads do to an answer"


@dataclass(frozen=True)
class Effects:
    """What each head does to an answer: the options that ask for it."""

    answer: Annotated[
        str | None,
        typer.Option(
            "--answer",
            metavar="TEXT",
            rich_help_panel=EFFECTS_PANEL,
            help="The words a causal language model should go on with, a space first where "
            "the text would have one: the metric is its first token's log-probability at the "
            "last position. @FILE reads a file, as TEXT does.",
        ),
    ] = None
    ablate: Annotated[
        Ablation,
        typer.Option(
            "--ablate",
            case_sensitive=False,
            rich_help_panel=EFFECTS_PANEL,
            help="What replaces a head's output for its ablation: "
            + labelled(ABLATION_LABELS)
            + ".",
        ),
    ] = Ablation.ZERO
    versus: Annotated[
        str | None,
        typer.Option(
            "--versus",
            metavar="TEXT",
            rich_help_panel=EFFECTS_PANEL,
            help="A second answer: the metric becomes logit(answer) - logit(versus) at the "
            "last position (each its first token). @FILE reads a file.",
        ),
    ] = None
    metric: Annotated[
        Measure | None,
        typer.Option(
            "--metric",
            case_sensitive=False,
            rich_help_panel=EFFECTS_PANEL,
            help="What effects are measured by at the last position: "
            + ", ".join(
                f"{kind} ({measured.label.format(answer='answer', versus='versus')}"
                + (", with --versus" if measured.versus else "")
                + ")"
                for kind, measured in MEASURES.items()
            )
            + ". By default log_prob, or logit_difference with --versus.",
        ),
    ] = None
    corrupt: Annotated[
        str | None,
        typer.Option(
            "--corrupt",
            metavar="TEXT",
            rich_help_panel=EFFECTS_PANEL,
            help="The text with one fact changed, as many tokens: its run takes the clean "
            "activations (heads, trace), or gives its values to a circuit's edges (circuit). "
            "@FILE reads a file (a long text), as TEXT does.",
        ),
    ] = None
    normalize: Annotated[
        bool,
        typer.Option(
            "--normalize",
            rich_help_panel=EFFECTS_PANEL,
            help="With --corrupt: patch effects as the fraction of the corruption's change they "
            "bring back, (patched - corrupted) / (clean - corrupted): 1 all of it, 0 none.",
        ),
    ] = False
    method: Annotated[
        Method,
        typer.Option(
            "--method",
            case_sensitive=False,
            rich_help_panel=EFFECTS_PANEL,
            help="exact: a forward pass per change; gradient: attribution patching's linear "
            "estimate from one backward pass (any length).",
        ),
    ] = Method.EXACT
    knockout: Annotated[
        str | None,
        typer.Option(
            "--knockout",
            metavar="ROWS:SPAN",
            rich_help_panel=EFFECTS_PANEL,
            help="Instead of heads, layers: the change in the answer's log-probability when "
            "the query ROWS may not read the SPAN keys (each as --rows names tokens; ROWS "
            "holds no colon: last:France, -1:3-5) in --window layers around each layer.",
        ),
    ] = None
    window: Annotated[
        int,
        typer.Option(
            "--window",
            metavar="N",
            min=1,
            rich_help_panel=EFFECTS_PANEL,
            help="How many layers each knockout blocks, centred on its layer.",
        ),
    ] = 1

    def given(self) -> list[str]:
        return given_flags(self)

    def read(self, text: str | None) -> Effects:
        """The texts of the answer, the second answer and the corrupted text read where
        one names a file (``@FILE``, ``@-``), as TEXT is read beside them."""
        return replace(
            self,
            answer=read_option_text(self.answer, "--answer", text),
            versus=read_option_text(self.versus, "--versus", text),
            corrupt=read_option_text(self.corrupt, "--corrupt", text),
        )

    def knocked(self) -> tuple[str, str]:
        """The rows and the span of --knockout ROWS:SPAN."""
        assert self.knockout is not None
        rows, colon, span = self.knockout.partition(":")
        if not colon or not rows.strip() or not span.strip():
            raise UsageError(
                f"--knockout takes ROWS:SPAN, such as last:France or -1:3-5, not {self.knockout!r}"
            )
        return rows, span

    def check(self, model: str, sort: HeadColumn | None = None, saved: bool = False) -> None:
        """Refuse, before a model loads, what cannot have an answer, and a sort by an
        effect on none. With ``saved`` maps (--from) no model runs: the command refuses
        --answer there, as it refuses every model option."""
        if sort is not None and sort.needs is Needs.ANSWER and self.answer is None:
            raise UsageError(
                f"--sort {sort} ranks heads by their effect on an answer: give --answer"
            )
        if sort is HeadColumn.ABLATION and self.ablate is Ablation.NONE:
            raise UsageError("--sort ablation reads the ablation sweep, which --ablate none skips")
        if sort is not None and sort.needs is Needs.CORRUPT and self.corrupt is None:
            raise UsageError(
                f"--sort {sort} ranks heads by what they bring back from a corrupted run: "
                "give --answer and --corrupt"
            )
        if self.answer is None:
            refuse_unused(
                self.given(), "--answer", "statistics alone", "give --answer, or leave it out"
            )
            return
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.extractor import no_next_token

        if self.normalize and self.corrupt is None:
            raise UsageError("--normalize reads patch effects as a fraction: give --corrupt")
        if self.knockout is None:
            refuse_unused(given_flags(self, ["window"]), "--knockout", "heads' effects")
        else:
            patched = ["ablate", "versus", "metric", "corrupt", "method", "normalize"]
            refuse_unused(given_flags(self, patched), "heads' effects", "a knockout")
            self.knocked()
        if model == d.BUILTIN and not saved:
            raise no_next_token(d.BUILTIN)

    def ranked(self, top: TopHeads | None, found: Result) -> TopHeads | None:
        """The heads --top-heads draws, with their effects on the answer where found."""
        return top if top is None or found.effects is None else replace(top, effects=found.effects)

    def drawing(self, model: str, top: TopHeads | None, page: bool = False) -> None:
        """Refuse, before a model loads, an answer where no heads are ranked by it (the
        ``page`` tints every head by its effects instead), and a corrupted text where no
        page shows what it brings back."""
        self.check(model)
        if not page:
            refuse_unused(given_flags(self, ["corrupt"]), "the page (-o FILE.html)", "a picture")
        if self.answer is not None and not page and (top is None or not top.by_effect):
            raise UsageError(
                "--answer ranks the heads a picture draws: give --top-heads N "
                "(--by ablation or dla)"
            )

    def asked(
        self,
        statistics: bool,
        trace: Site | None = None,
        by_position: bool = False,
        lens: bool = False,
        circuit: CircuitOptions | None = None,
    ) -> dict[str, Any]:
        """What a request reads of each input for these options: its maps or, with
        ``statistics``, the heads' statistics; the heads' effects on an answer beside them;
        a knockout alone; or a ``trace`` at a site, the lens or a ``circuit``, alone."""
        if circuit is not None:
            return {"maps": False, "circuit": circuit, "metric": self.metric}
        if lens or trace is not None:  # each alone
            at = {} if trace is None else {"trace": trace, "by_position": by_position}
            return {"maps": False, "lens": lens, "method": self.method, "metric": self.metric, **at}
        if self.answer is None:  # --method alone is refused by the request
            return {"maps": not statistics, "statistics": statistics, "method": self.method}
        if self.knockout is not None:
            return {"maps": False, "knockout": self.knocked(), "window": self.window}
        return {
            "maps": not statistics,
            "statistics": statistics,
            "effects": True,
            "ablate": self.ablate,
            "method": self.method,
            "metric": self.metric,
        }

    def knocked_error(self, error: UsageError) -> UsageError:
        """A knockout's span missing from the text, said with how ROWS:SPAN was split
        where SPAN holds a colon too."""
        if self.knockout is None:
            return error
        rows, span = self.knocked()
        if ":" not in span or f"{span!r} is not in the text" not in str(error):
            return error
        return UsageError(
            f"--knockout {self.knockout!r} is ROWS {rows!r} and SPAN {span!r} (ROWS ends at "
            f"the first colon), and {span!r} is not in the text"
        )


# Gives a command the options of head effects on an answer as one ``effects`` argument.
effect_options = bundle("effects", Effects)
# The same without the knockout's and the corrupted text's, for pictures of the heads an
# answer needs (ranked by ablation or dla).
answer_options = bundle(
    "effects", Effects, leave_out=("knockout", "window", "corrupt", "normalize")
)
# The same with the corrupted text's, for export: its page tints each head by its patch.
page_effect_options = bundle("effects", Effects, leave_out=("knockout", "window", "normalize"))
# The answer's options that a trace reads (it lists layers × positions, not heads).
trace_options = bundle("effects", Effects, leave_out=("ablate", "knockout", "window"))
NO_EFFECTS = Effects()

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
        from attnviz.cli.output import NO_TERMINAL, passes_shown

        with passes_shown(environment or NO_TERMINAL) as listener:
            (found,) = extractor.run([self.input(text)], self.request, progress=listener)
        return found

    def maps(self, extractor: Extractor, text: str) -> AttentionMaps:
        """The maps of one text, for a request that reads maps."""
        return asked_for(self.run(extractor, text).maps)


def load_shown(spec: ExtractorSpec, environment: Environment) -> Extractor:
    """Load the model of ``spec``; a pretrained one under a spinner on a terminal."""
    if spec.model == d.BUILTIN or not environment.stderr_is_terminal:
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
    trace: Site | None = None,
    by_position: bool = False,
    lens: bool = False,
    circuit: CircuitOptions | None = None,
) -> Job:
    """Check the model options together, and what can be checked without a model: the
    text, target and answer (the text unless read from stdin), how the selection is
    written, and what the aggregation asks of the maps. The request reads the maps, or
    the heads' ``statistics``, and what ``effects`` asks of an answer."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.loading import ExtractorSpec, builtin_named

    model = reading.model
    named = builtin_named(model)  # builtin:seed=1, the name that the stack's maps record
    if named is not None:
        model = d.BUILTIN
    given = settings.stack()
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
    if model != d.BUILTIN and given:
        raise UsageError(
            "--num-layers, --num-heads, --d-model, --seed, --positions, --projections and "
            "--keep-case configure the built-in stack; they do not apply to --model"
        )
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
        **effects.asked(statistics, trace, by_position, lens, circuit),
    )
    return Job(
        spec=ExtractorSpec(model, config, settings.load_options() if model != d.BUILTIN else None),
        request=asked,
        first=check_asked(asked, first),
        read_now=read_now,
    )
