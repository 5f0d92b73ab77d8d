"""What a command shares with others, given to it as one argument: its environment and
the bundles of options it takes (:mod:`attnviz.cli.bundles`), so that a command's
signature lists its own options and ``shared``, and names each bundle once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from attnviz.cli.answer_settings import NO_EFFECTS, Effects
from attnviz.cli.bundles import Bundle, in_place_of
from attnviz.cli.declarations import BUILTIN
from attnviz.cli.engine import LOCAL, EngineSettings
from attnviz.cli.environment import NO_TERMINAL, Environment, with_environment
from attnviz.cli.pictures import ALL_HEADS, DEFAULT_PICTURE, HeadChoice, PictureSettings
from attnviz.cli.settings import (
    DEFAULT_SETTINGS,
    NO_PRODUCTS,
    Job,
    MapProducts,
    ModelSettings,
    Reading,
    request,
)


@dataclass(frozen=True)
class Shared:
    """A command's environment and its bundles of options; a bundle it does not take
    holds its defaults (those of :data:`NOTHING_SHARED`)."""

    environment: Environment
    settings: ModelSettings
    products: MapProducts
    effects: Effects
    choice: HeadChoice
    picture: PictureSettings
    run_on: EngineSettings

    def request(self, reading: Reading, **asked: Any) -> Job:
        """:func:`~attnviz.cli.settings.request` with this command's model settings,
        products and effects (``asked`` may give others)."""
        bundled: dict[str, Any] = {
            "settings": self.settings,
            "products": self.products,
            "effects": self.effects,
        }
        return request(reading, **(bundled | asked))

    def run_options_given(
        self, reading: Reading, target: str | None, pair: str | None
    ) -> list[str]:
        """The options of a model run given to a command, as the command line spells
        them: saved maps (--from) have no use for them."""
        given = ["--model"] if reading.model != BUILTIN else []
        named = (("--mode", reading.mode), ("--target", target), ("--pair", pair))
        given += [flag for flag, value in named if value is not None]
        return given + self.settings.given() + self.products.given() + self.effects.given()


NOTHING_SHARED = Shared(
    NO_TERMINAL, DEFAULT_SETTINGS, NO_PRODUCTS, NO_EFFECTS, ALL_HEADS, DEFAULT_PICTURE, LOCAL
)


def sharing(*bundles: Bundle) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving a command its environment and ``bundles`` as one ``shared``
    argument (a :class:`Shared`): the bundles' options take its place in the signature,
    and so in ``--help``, in this order."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        def shared(made: dict[str, Any]) -> Shared:
            return replace(NOTHING_SHARED, **made)

        given = in_place_of("shared", (_ENVIRONMENT, *bundles), shared)(command)
        return with_environment(given)

    return decorate


# The environment travels through with_environment's ``environment`` argument.
_ENVIRONMENT = Bundle(
    "environment", {"environment": (Environment, NO_TERMINAL)}, lambda environment: environment
)
