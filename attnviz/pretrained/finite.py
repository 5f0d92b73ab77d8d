"""A model whose numbers are not finite, refused with where they first go wrong.

A checkpoint with a NaN weight, or float16 activations that overflow, makes every effect
on an answer NaN: a table of NaN, JSON that is no JSON, or a crash deep in a tolerance
check. The metric of each run is checked as it is read; where it is not finite, one more
forward pass (the error path only) finds the first module, in the order the pass runs
them, whose output holds NaN or infinity, and whether one of its own weights does.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

from attnviz.errors import AttnvizError

CORRUPTED_RUN = "corrupted run"  # what errors call the run on --corrupt's text


def check_metric(value: float, model: Any, arguments: dict, run: str) -> None:
    """Refuse a ``run``'s metric that is NaN or infinite, naming where it went wrong."""
    if not math.isfinite(value):
        raise not_finite(model, arguments, f"the answer's metric on the {run} is {value}")


def check_effects(values: Any, name: str, *axes: tuple[str, Sequence[int]]) -> None:
    """Refuse an array of effects, an axis per ``axes``, that holds NaN or infinity (an
    estimate's gradient can where the metric did not), naming its first such cell by each
    axis's own numbers (``("layer", layers)``)."""
    import numpy as np

    bad = np.argwhere(~np.isfinite(values))
    if len(bad):
        cell = tuple(int(index) for index in bad[0])
        where = ", ".join(
            f"{axis} {numbers[index]}" for (axis, numbers), index in zip(axes, cell, strict=True)
        )
        raise AttnvizError(
            f"the {name} of {where} is {values[cell]}: the model's numbers are not "
            "finite there (NaN or infinity), so its effects mean nothing"
        )


def not_finite(model: Any, arguments: dict, what: str) -> AttnvizError:
    """The error for a model whose ``what`` is not finite, with where it first goes wrong."""
    where = first_not_finite(model, arguments)
    found = "" if where is None else f"; NaN or infinity first appears in {where}"
    return AttnvizError(
        f"{what}: the model's numbers are not finite{found}, so its effects on an answer "
        "mean nothing (a broken checkpoint, or float16 overflowing: try --model-dtype float32)"
    )


def first_not_finite(model: Any, arguments: dict) -> str | None:
    """The first module whose output holds NaN or infinity in a forward pass over
    ``arguments`` (a leaf's hook runs before its parent's: the innermost is found), with
    its own weights named where one of them is not finite; None if none is seen."""
    import torch

    found: list[str] = []

    def watch(name: str) -> Any:
        def hook(module: Any, _args: tuple, output: Any) -> None:
            if not found and any(not torch.isfinite(each).all() for each in _tensors(output)):
                found.append(_described(name, module))

        return hook

    with contextlib.ExitStack() as hooks, torch.inference_mode():
        for name, module in model.named_modules():
            handle = module.register_forward_hook(watch(name or "the model"))
            hooks.callback(handle.remove)
        model(**arguments, use_cache=False)
    return found[0] if found else None


def _described(name: str, module: Any) -> str:
    import torch

    broken = [
        weight
        for weight, value in module.named_parameters(recurse=False)
        if not torch.isfinite(value).all()
    ]
    held = f" (its {broken[0]} holds NaN or infinity)" if broken else ""
    return f"the output of {name}{held}"


def _tensors(output: Any) -> Iterator[Any]:
    """The floating-point tensors in a module's output (a tensor, a tuple, a model output)."""
    import torch

    if isinstance(output, torch.Tensor):
        if output.is_floating_point():
            yield output
    elif isinstance(output, tuple | list):
        for each in output:
            yield from _tensors(each)
    elif isinstance(output, dict):
        for each in output.values():
            yield from _tensors(each)
