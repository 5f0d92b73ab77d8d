"""What the modules of a pretrained extractor's products (effects, traces, the lens,
circuits, generation, the walk-through, the needle) read of the extractor, as a protocol
below it: they take the extractor without naming its class, and the extractor calls
them (models are reached one way down)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from attnviz.choices import Mode
    from attnviz.maps import AttentionMaps
    from attnviz.pretrained.encoding import ModelInputs
    from attnviz.pretrained.loading import PretrainedModel
    from attnviz.request import Input, Request


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
        self,
        mode: Mode,
        modules: list,
        layer_indices: list[int],
        inputs: ModelInputs,
        request: Request,
        given: list[Input],
    ) -> list[AttentionMaps]:
        """The maps of encoded inputs."""
        ...

    def _prepared(
        self, inputs: list[Input], request: Request, what: str = "text"
    ) -> tuple[Mode, list, list[int], ModelInputs]:
        """The mode, its modules, the layers asked and the forward pass's inputs."""
        ...

    def extract(
        self,
        text: str,
        request: Request | None = None,
        *,
        target: str | None = None,
        pair: str | None = None,
        **options: Any,
    ) -> AttentionMaps:
        """The attention maps of ``text``."""
        ...
