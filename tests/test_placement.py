"""Big models (issue 13): device and dtype choices, half-precision maps, memory checked
before the forward pass. Tested on the CPU; the device logic takes the machine as data."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnviz
from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.memory import Room
from attnviz.pretrained.loading import LoadOptions
from attnviz.pretrained.placement import Machine, choose_device, choose_dtype

TEXT = "The man walked the dog because the dog was tired"


@pytest.mark.parametrize(
    ("asked", "machine", "chosen"),
    [
        ("auto", Machine(), "cpu"),
        ("auto", Machine(cuda_devices=2), "cuda:0"),
        ("auto", Machine(mps=True), "mps"),
        ("auto", Machine(cuda_devices=1, mps=True), "cuda:0"),
        ("cuda", Machine(cuda_devices=1), "cuda:0"),
        ("cuda:1", Machine(cuda_devices=2), "cuda:1"),
        ("CPU", Machine(cuda_devices=2), "cpu"),
        ("mps", Machine(mps=True), "mps"),
    ],
)
def test_device_choice(asked, machine, chosen):
    assert choose_device(asked, machine) == chosen


@pytest.mark.parametrize(
    ("asked", "machine", "message"),
    [
        ("cuda", Machine(), "no CUDA GPU is visible"),
        ("cuda:2", Machine(cuda_devices=2), "cuda:0 to cuda:1"),
        ("mps", Machine(), "Metal .MPS. is not available"),
        ("tpu", Machine(), "give auto, cpu, cuda, cuda:N or mps"),
        ("cpu:1", Machine(), "only cuda devices are numbered"),
    ],
)
def test_devices_the_machine_lacks_are_usage_errors(asked, machine, message):
    with pytest.raises(UsageError, match=message):
        choose_device(asked, machine)


class Config:
    dtype = "bfloat16"


@pytest.mark.parametrize(
    ("asked", "device", "chosen"),
    [
        ("auto", "cpu", "float32"),  # half precision is slow or missing on CPUs
        ("auto", "cuda:0", "bfloat16"),  # the checkpoint's own
        ("float16", "cpu", "float16"),
        ("float32", "cuda:0", "float32"),
    ],
)
def test_dtype_choice(asked, device, chosen):
    assert choose_dtype(asked, Config(), device) == chosen


@pytest.mark.parametrize("which", ["bert", "gpt2", "llama", "bart"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_maps_are_close_to_float32_and_rows_still_sum_to_1(tiny, which, dtype):
    mode = "cross" if which == "bart" else None
    target = "Bonjour je t'aime" if which == "bart" else None
    full = attnviz.load(tiny[which]).extract(TEXT, mode=mode, target=target)
    half_model = attnviz.load(tiny[which], load_options=LoadOptions(dtype=dtype))
    assert str(half_model.loaded.model.dtype) == f"torch.{dtype}"
    half = half_model.extract(TEXT, mode=mode, target=target)
    assert half.weights.dtype == np.float32  # maps leave the model as float32
    np.testing.assert_allclose(half.weights, full.weights, atol=1e-2)
    assert np.abs(half.weights.sum(-1) - 1).max() < 2e-2
    back = attnviz.AttentionMaps.from_dict(json.loads(json.dumps(half.to_dict())))
    np.testing.assert_array_equal(back.weights, half.weights)  # saved maps read back


def test_a_device_map_through_accelerate_gives_the_same_maps(tiny):
    pytest.importorskip("accelerate")
    placed = attnviz.load(tiny["gpt2"], load_options=LoadOptions(device_map="auto"))
    plain = attnviz.load(tiny["gpt2"])
    np.testing.assert_array_equal(placed.extract(TEXT).weights, plain.extract(TEXT).weights)


def test_only_the_selected_heads_leave_the_model(tiny):
    extractor = attnviz.load(tiny["llama"])
    whole = extractor.extract(TEXT, layers=1)
    some = extractor.extract(TEXT, layers=1, heads=[1, 3])
    assert some.heads == [1, 3]
    np.testing.assert_array_equal(some.weights[0], whole.weights[0][[1, 3]])


def test_maps_that_cannot_fit_are_refused_before_the_forward_pass(tiny, monkeypatch):
    extractor = attnviz.load(tiny["gpt2"])
    calls = []
    monkeypatch.setattr(extractor.loaded.model, "forward", lambda *a, **k: calls.append(1))
    monkeypatch.setattr("attnviz.memory.room", lambda: Room(1000, "available"))
    with pytest.raises(UsageError, match="select fewer layers"):
        extractor.extract(TEXT)
    assert not calls  # nothing ran


def test_an_operation_missing_in_half_precision_is_a_usage_error(tiny, monkeypatch):
    extractor = attnviz.load(tiny["gpt2"], load_options=LoadOptions(dtype="float16"))

    def forward(*args, **kwargs):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")

    monkeypatch.setattr(extractor.loaded.model, "forward", forward)
    with pytest.raises(UsageError, match="--model-dtype float32"):
        extractor.extract(TEXT)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model-dtype", "half"], "give auto, float32, bfloat16, float16"),
        (["--device", "gpu"], "give auto, cpu, cuda, cuda:N or mps"),
    ],
)
def test_placement_options_are_checked_before_loading(runner, tiny, arguments, message):
    result = runner.invoke(app, ["show", "--model", tiny["gpt2"], TEXT, *arguments])
    assert result.exit_code == 2 and message in result.stderr


def test_cuda_without_a_gpu_is_a_usage_error(runner, tiny):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    result = runner.invoke(app, ["show", "--model", tiny["gpt2"], TEXT, "--device", "cuda"])
    assert result.exit_code == 2 and "no CUDA GPU is visible" in result.stderr


def test_the_builtin_stack_refuses_placement(runner):
    result = runner.invoke(app, ["show", TEXT, "--model-dtype", "bfloat16"])
    assert result.exit_code == 2 and "the built-in stack runs on the CPU" in result.stderr


def test_model_dtype_reaches_the_loaded_model_from_the_command_line(runner, tiny):
    result = runner.invoke(
        app, ["show", "--model", tiny["gpt2"], TEXT, "--model-dtype", "bfloat16", "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    full = attnviz.load(tiny["gpt2"]).extract(TEXT)
    weights = np.array(json.loads(result.stdout)["weights"])
    assert 0 < np.abs(weights - full.weights).max() < 1e-2  # computed in bfloat16
