"""Where a model runs and in which precision: the device, the dtype of its weights, and
whether the maps asked for fit in memory before the forward pass starts.

The choices are plain functions of what the machine has, so that they are tested
without a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from attnviz import memory
from attnviz.errors import UsageError

DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICE = re.compile(r"(auto|cpu|mps|cuda)(?::(\d+))?")


@dataclass(frozen=True)
class Machine:
    """What accelerators this process can use."""

    cuda_devices: int = 0
    mps: bool = False

    @classmethod
    def here(cls) -> Machine:
        import torch

        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
        mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
        return cls(cuda_devices=cuda, mps=mps)


def check_placement(device: str, dtype: str) -> None:
    """How --device and --model-dtype are written, checked before anything is loaded."""
    if _DEVICE.fullmatch(device.strip().lower()) is None:
        raise UsageError(f"--device {device!r}: give auto, cpu, cuda, cuda:N or mps")
    if dtype not in DTYPES:
        raise UsageError(f"--model-dtype {dtype!r}: give {', '.join(DTYPES)}")


PLACEMENTS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's device_map


def check_device_map(asked: str | None) -> None:
    """A --device-map accelerate knows: one of its placements, or one device for every
    layer; refused before any weights load."""
    if asked is None or asked in PLACEMENTS:
        return
    match = _DEVICE.fullmatch(asked)
    if match is None or match.group(1) == "auto" or (match.group(2) and match.group(1) != "cuda"):
        raise UsageError(
            f"--device-map {asked!r}: give {', '.join(PLACEMENTS[:-1])} or {PLACEMENTS[-1]} "
            "(or one device for every layer: cpu, cuda:N, mps)"
        )


def choose_device(asked: str, machine: Machine) -> str:
    """``auto``: the first GPU (CUDA, else Apple's MPS), else the CPU. An asked device the
    machine lacks is a usage error that says what it has."""
    match = _DEVICE.fullmatch(asked.strip().lower())
    if match is None:
        raise UsageError(f"--device {asked!r}: give auto, cpu, cuda, cuda:N or mps")
    kind, number = match.group(1), match.group(2)
    if number is not None and kind != "cuda":
        raise UsageError(f"--device {asked!r}: only cuda devices are numbered (cuda:0, cuda:1)")
    if kind == "auto":
        return "cuda:0" if machine.cuda_devices else "mps" if machine.mps else "cpu"
    if kind == "cuda":
        index = int(number or 0)
        if not machine.cuda_devices:
            raise UsageError(
                f"--device {asked}: no CUDA GPU is visible to torch here (a CPU build of torch, "
                "or no driver): use --device cpu, or install torch for CUDA"
            )
        if index >= machine.cuda_devices:
            raise UsageError(
                f"--device {asked}: this machine has {machine.cuda_devices} CUDA GPU(s), "
                f"cuda:0 to cuda:{machine.cuda_devices - 1}"
            )
        return f"cuda:{index}"
    if kind == "mps" and not machine.mps:
        raise UsageError(
            "--device mps: Apple's Metal (MPS) is not available here: use --device cpu"
        )
    return kind


def choose_dtype(asked: str, config: Any, device: str) -> str:
    """The dtype to load weights in. auto: the checkpoint's own on a GPU, float32 on the CPU,
    where half precision is slow or missing for some operations."""
    if asked not in DTYPES:
        raise UsageError(f"--model-dtype {asked!r}: give {', '.join(DTYPES)}")
    if asked != "auto":
        return asked
    if device == "cpu":
        return "float32"
    own = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(own).removeprefix("torch.") if own is not None else "float32"
    return name if name in DTYPES else "float32"


def check_maps_fit(
    model: Any,
    *,
    layers: int,
    heads: int,
    all_heads: int,
    inputs: int,
    queries: int,
    keys: int,
    eager: bool = True,
) -> None:
    """Refuse, before the forward pass, maps that cannot fit: the selected ones are kept on the
    CPU in float32; with ``eager`` attention each layer's whole attention is also built on the
    model's device in its dtype."""
    kept = layers * heads * inputs * queries * keys * 4
    if (free := memory.short_of(kept)) is not None:
        raise UsageError(
            f"the maps asked for need about {_gib(kept)} ({layers} layers × {heads} heads × "
            f"{queries} × {keys} tokens × {inputs} inputs, float32) but this process has {free}: "
            "keep some rows (--rows last) or pool the maps (--pool 256), select fewer "
            "layers (--layer) or heads (--head), or a smaller --batch-size"
        )
    device = getattr(model, "device", None)
    if not eager or device is None or device.type != "cuda":
        return
    import torch

    free_gpu, _ = torch.cuda.mem_get_info(device)
    one_layer = all_heads * inputs * queries * keys * model.dtype.itemsize * 3  # scores, weights
    if one_layer > free_gpu:
        raise UsageError(
            f"one layer's attention needs about {_gib(one_layer)} on {device} but {_gib(free_gpu)} "
            "is free: a shorter text or a smaller --batch-size"
        )


def _gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"
