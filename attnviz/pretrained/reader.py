"""What the modules of a pretrained extractor's products (effects, traces, the lens,
circuits, generation, the walk-through, the needle) read of the extractor, as a protocol
below it: they take the extractor without naming its class, and the extractor calls
them (models are reached one way down)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from attnviz.choices import Mode
    from attnviz.inputs import Input
    from attnviz.maps import AttentionMaps
    from attnviz.pretrained.encoding import Prepared
    from attnviz.pretrained.loading import PretrainedModel
    from attnviz.request import Request


class ModelReader(Protocol):
    """:class:`attnviz.pretrained.extractor.PretrainedExtractor`, as its products see it."""

    loaded: PretrainedModel

    @property
    def name(self) -> str:
        """The model's name as the maps record it."""
        ...

    def modules(self, mode: Mode) -> list:
        """The attention modules that give ``mode`` attention, in layer order."""
        ...

    def maps_of(
        self, prepared: Prepared, request: Request, given: list[Input]
    ) -> list[AttentionMaps]:
        """The maps of a prepared batch."""
        ...

    def prepared(self, inputs: list[Input], request: Request, what: str = "text") -> Prepared:
        """The batch ready for its forward pass."""
        ...

    def extract(self, text: str, request: Request | None = None, **options: Any) -> AttentionMaps:
        """The attention maps of ``text`` (its target and request fields as ``options``)."""
        ...
