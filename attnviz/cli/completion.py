"""Shell completion of the options that name models and devices: offered without
loading a model or importing torch."""

from __future__ import annotations

from collections.abc import Iterable

from attnviz.builtin.config import BUILTIN


def _starting(names: Iterable[str], incomplete: str) -> list[str]:
    """What shell completion offers: the names that begin with what was typed."""
    return [name for name in names if name.startswith(incomplete)]


def complete_model(incomplete: str) -> list[str]:
    """Shell completion of --model: builtin, the aliases, and the models in the local cache."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.pretrained import available_models

    return _starting([BUILTIN, *(model.name for model in available_models())], incomplete)


def complete_language_model(incomplete: str) -> list[str]:
    """Shell completion of generate's --model: the models that write text (not builtin,
    not an encoder; a cached model whose config does not say is offered)."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.pretrained import available_models

    writing = (model.name for model in available_models() if model.writes is not False)
    return _starting(writing, incomplete)


def complete_device(incomplete: str) -> list[str]:
    """Shell completion of --device (without importing torch to count GPUs)."""
    return _starting(("auto", "cpu", "cuda", "cuda:0", "mps"), incomplete)


def complete_device_map(incomplete: str) -> list[str]:
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.pretrained.placement import PLACEMENTS

    return _starting(PLACEMENTS, incomplete)
