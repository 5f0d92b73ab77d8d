"""The options of what heads do to an answer (``--answer``, ``--corrupt``, ``--ablation``,
``--knockout`` …), one :class:`Effects` bundle, and the commands' cuts of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

from attnviz.choices import (
    ABLATION_LABELS,
    MEASURES,
    Ablation,
    Measure,
    Method,
)
from attnviz.cli import declarations as d
from attnviz.cli.bundles import bundle, given_flags
from attnviz.errors import UsageError
from attnviz.head_columns import HeadColumn, Needs
from attnviz.inputs import read_option_text
from attnviz.outputs import refuse_unused

if TYPE_CHECKING:  # imported where used: `attnviz --help` imports this module
    from attnviz.analysis.heads import TopHeads
    from attnviz.results import Result


EFFECTS_PANEL = "What heads do to an answer"
in_effects = d.panel(EFFECTS_PANEL)
AblateOption = d.choice_option(
    Ablation,
    ("--ablation", "--ablate"),
    "What replaces a head's output for its ablation",
    ABLATION_LABELS,
    rich_help_panel=EFFECTS_PANEL,
)


@dataclass(frozen=True)
class Effects:
    """What each head does to an answer: the options that ask for it."""

    answer: Annotated[
        str | None,
        in_effects(
            "--answer",
            metavar="TEXT",
            help="The words a causal language model should go on with, a space first where "
            "the text would have one: the metric is its first token's log-probability at the "
            "last position. @FILE reads a file, as TEXT does.",
        ),
    ] = None
    ablate: AblateOption = Ablation.ZERO
    versus: Annotated[
        str | None,
        in_effects(
            "--versus",
            metavar="TEXT",
            help="A second answer: the metric becomes logit(answer) - logit(versus) at the "
            "last position (each its first token). @FILE reads a file.",
        ),
    ] = None
    metric: Annotated[
        Measure | None,
        in_effects(
            "--metric",
            case_sensitive=False,
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
        in_effects(
            "--corrupt",
            metavar="TEXT",
            help="The text with one fact changed, as many tokens: its run takes the clean "
            "activations (heads, trace), or gives its values to a circuit's edges (circuit). "
            "@FILE reads a file (a long text), as TEXT does.",
        ),
    ] = None
    normalize: Annotated[
        bool,
        in_effects(
            "--normalize",
            help="With --corrupt: patch effects as the fraction of the corruption's change they "
            "bring back, (patched - corrupted) / (clean - corrupted): 1 all of it, 0 none.",
        ),
    ] = False
    method: Annotated[
        Method,
        in_effects(
            "--method",
            case_sensitive=False,
            help="exact: a forward pass per change; gradient: attribution patching's linear "
            "estimate from one backward pass (any length).",
        ),
    ] = Method.EXACT
    knockout: Annotated[
        str | None,
        in_effects(
            "--knockout",
            metavar="ROWS:SPAN",
            help="Instead of heads, layers: the change in the answer's log-probability when "
            "the query ROWS may not read the SPAN keys (each as --rows names tokens; ROWS "
            "holds no colon: last:France, -1:3-5) in --window layers around each layer.",
        ),
    ] = None
    window: Annotated[
        int,
        in_effects(
            "--window",
            metavar="N",
            min=1,
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
        from attnviz.asked import no_next_token

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

    def asked(self, statistics: bool, **alone: Any) -> dict[str, Any]:
        """What a request reads of each input for these options: its maps or, with
        ``statistics``, the heads' statistics; the heads' effects on an answer beside them;
        a knockout alone; or a product read alone, ``alone`` its request fields (a trace
        at a site, the lens, a circuit, activations), measured as these options say."""
        if alone:
            return {"maps": False, "method": self.method, "metric": self.metric, **alone}
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
