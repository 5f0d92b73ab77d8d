"""What heads and top read, given as one ``source`` argument: TEXT through a model, or
maps saved with --from (what show, batch or generate wrote), the model options refused
with the saved maps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.bundles import bundle
from attnviz.cli.settings import Job, Reading
from attnviz.errors import UsageError
from attnviz.inputs import read_texts
from attnviz.outputs import refuse_unused
from attnviz.writers import ONE_TEXT

if TYPE_CHECKING:
    from attnviz.cli.shared import Shared
    from attnviz.maps import AttentionMaps

Read = TypeVar("Read")  # what a command reads of a text or of saved maps


@dataclass(frozen=True)
class TextOrSaved(Reading):
    """A :class:`Reading` of TEXT (with --target in cross mode, --pair for an encoder's
    sentence B), or maps saved with --from narrowed to its --layer and --head; each field
    declares its option."""

    text: d.OptionalTextArgument = None
    saved: d.FromOption = None
    target: d.TargetOption = None
    pair: d.PairOption = None

    def request(self, shared: Shared, **asked: Any) -> Job:
        """What to ask of the model for TEXT (``asked``: the products)."""
        return shared.request(self, text=self.text, target=self.target, pair=self.pair, **asked)

    def read(
        self,
        shared: Shared,
        extract: Callable[[str], Read],
        several: str = ONE_TEXT,
        of_maps: Callable[[AttentionMaps], Any] = lambda maps: maps,
    ) -> Read:
        """What ``extract`` reads of TEXT through the model; or ``of_maps`` of the saved
        maps, with no option of a model run given. Several texts are refused with
        ``several``: what to do instead."""
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.maps_files import read_maps

        if (self.text is None) == (self.saved is None):
            raise UsageError(
                "give TEXT to run a model on, or --from FILE with saved maps: one of them"
            )
        if self.saved is not None:
            given = shared.run_options_given(self, self.target, self.pair)
            refuse_unused(given, "a model run on TEXT", "saved maps (--from)")
            saved = out.only_one(read_maps(self.saved), out.ONE_MAPS)
            return of_maps(out.select_held(saved, self.layer, self.head))
        return extract(out.only_one(read_texts(self.text), several))


# Gives heads and top TEXT or --from, and the model, mode, layers and heads to read.
text_or_saved = bundle("source", TextOrSaved)
NOTHING_READ = TextOrSaved()
