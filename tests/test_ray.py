"""The Ray engine (issue 15): the same files, statistics and manifest as the local
engine, on a local Ray with two CPUs. One Ray for the whole module, on one test
worker (the xdist group), started in this process: the commands join it."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from attnviz.cli import app
from tests.checks import manifest as records_in
from tests.circuit_references import OTHER, PAIR
from tests.processes import ATTNVIZ

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]
SENTENCES = [
    "Hello I love you",
    "The man walked the dog",
    "Attention is all you need",
    "The animal didn't cross the street because it was too tired",
    "a b c d",
    "Bonjour je t'aime",
]


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        # "local": a Ray of its own, never one found running on this machine
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
    yield ray
    ray.shutdown()


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


@contextlib.contextmanager
def torch_threads(count: int):
    """The local engine runs torch with as many threads as a Ray worker holds CPUs: torch
    sums in another order with another count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run(runner, *arguments):
    result = runner.invoke(app, [str(argument) for argument in arguments])
    return result


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def ray_folder():
    """A Ray folder of a test's own (RAY_TMPDIR): sessions, and the address that "auto"
    and Ray's default read; short, for Ray's socket paths. Whatever Ray the test started
    there is stopped afterwards, however the test ended."""
    folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    yield folder
    stop_processes(folder)
    shutil.rmtree(folder, ignore_errors=True)


def stop_processes(pattern: str, grace: float = 10.0) -> None:
    """End every process whose command line holds ``pattern`` (a Ray's raylet and GCS
    name their session folder and port): SIGTERM, then SIGKILL after ``grace`` seconds."""

    def found() -> list[int]:
        listed = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
        return [int(pid) for pid in listed.stdout.split() if int(pid) != os.getpid()]

    deadline = time.monotonic() + grace
    sent = signal.SIGTERM
    while pids := found():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sent)
        if time.monotonic() > deadline:
            sent = signal.SIGKILL
        time.sleep(0.2)


def unmeasured(environment: dict[str, str]) -> dict[str, str]:
    """The environment without coverage's measuring of a test run: for Ray's own processes,
    which take it from the process that starts them; not attnviz's code, they only get
    slower under it."""
    return {key: value for key, value in environment.items() if key != "COVERAGE_PROCESS_CONFIG"}


def stats_in_a_process(corpus, *extra: str, environment: dict[str, str]):
    command = [*ATTNVIZ, "stats", str(corpus), "--engine", "ray"]
    return subprocess.run(
        [*command, *extra, "-f", "json", "-q"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_cluster_started_with_ray_start_is_joined_by_its_address(corpus, ray_folder):
    """The manual's cluster recipe (docs/batch.md), on one machine: `ray start --head` with token
    authentication, then a command given the cluster's address and its token."""
    pytest.importorskip("ray")
    port = free_port()
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    environment = os.environ | token | {"RAY_TMPDIR": ray_folder}
    head = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
            f"--port={port}", "--num-cpus=1", "--node-ip-address=127.0.0.1",
            "--include-dashboard=false"]  # fmt: skip
    cluster = subprocess.Popen(
        head, env=unmeasured(environment), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while cluster.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            time.sleep(0.1)
        result = stats_in_a_process(
            corpus, "--ray-address", f"127.0.0.1:{port}", environment=environment
        )
    finally:
        cluster.send_signal(signal.SIGINT)  # `ray start --block` stops its cluster so
        try:
            cluster.wait(timeout=60)
        except subprocess.TimeoutExpired:  # under load: it is stopped all the same
            cluster.kill()
            cluster.wait()
        stop_processes(f"gcs_server.*{port}")  # its processes end a moment later, or are ended
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert json.loads(result.stdout)["inputs"] == len(SENTENCES)


def test_without_an_address_a_ray_of_its_own_starts_whatever_an_ended_ray_left(corpus, ray_folder):
    """An ended Ray (killed, or a process that never shut it down) leaves its address in
    the Ray folder; Ray's default would try that address for minutes."""
    pytest.importorskip("ray")
    (Path(ray_folder) / "ray").mkdir()
    ended = f"127.0.0.1:{free_port()}"
    (Path(ray_folder) / "ray" / "ray_current_cluster").write_text(ended)
    environment = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # Unmeasured: the Ray of its own would be too; the lines it runs are measured by the
    # test above (a Ray started under coverage takes half as long again).
    environment = unmeasured(environment) | {"RAY_TMPDIR": ray_folder}
    result = stats_in_a_process(corpus, environment=environment)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["inputs"] == len(SENTENCES)


@pytest.mark.parametrize(("cpus", "model"), [(1, "builtin"), (2, "bert")])
def test_ray_writes_the_very_files_and_manifest_the_local_engine_writes(
    runner, local_ray, tmp_path, cpus, model
):
    """18 inputs in batches of 2: a Ray task holds two of the local engine's batches, cut
    where the local engine cuts them (a pretrained model's padded batches give other bits
    when grouped otherwise). Pictures drawn on a worker are held to the local ones with the
    built-in stack; with the same maps (the json) they are the same pictures, and drawing
    them again for the pretrained model took a third of this test."""
    pictures = ["-f", "png", "--view", "layer"]
    if model == "bert":
        from tests import tiny_models

        model = str(tiny_models.bert(tmp_path / "bert"))
        pictures = []
    corpus = tmp_path / "corpus.txt"
    endings = ("", " again", " once more")
    corpus.write_text("\n".join(s + ending for ending in endings for s in SENTENCES) + "\n")
    common = ["--model", model, "-f", "json", *pictures, "--batch-size", "2", "-q"]
    with torch_threads(cpus):
        local = run(runner, "batch", corpus, "-o", tmp_path / "local", *common)
    assert local.exit_code == 0, local.stderr
    ray_options = ["--engine", "ray", "--num-cpus-per-worker", cpus]
    remote = run(runner, "batch", corpus, "-o", tmp_path / "ray", *common, *ray_options)
    assert remote.exit_code == 0, remote.stderr
    names = sorted(path.name for path in (tmp_path / "local").iterdir())
    assert names == sorted(path.name for path in (tmp_path / "ray").iterdir())
    for name in names:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), (
            name
        )


def test_ray_statistics_equal_the_local_ones(runner, local_ray, corpus):
    with torch_threads(1):  # a worker's one CPU
        local = run(runner, "stats", corpus, "-f", "json", "-q")
    remote = run(
        runner, "stats", corpus, "-f", "json", "-q", "--engine", "ray", "--batch-size", "2"
    )
    assert local.exit_code == 0 and remote.exit_code == 0, remote.stderr
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    assert mine["inputs"] == theirs["inputs"] == len(SENTENCES)
    assert mine["model"] == theirs["model"] == "builtin:layers=2,heads=4,d_model=64,seed=0"
    for a, b in zip(mine["heads"], theirs["heads"], strict=True):
        assert (a["layer"], a["head"], a["statistic"]) == (b["layer"], b["head"], b["statistic"])
        for key in ("mean", "std"):
            assert a[key] == pytest.approx(b[key], abs=1e-9)
        assert (a["p05"], a["p50"], a["p95"]) == (b["p05"], b["p50"], b["p95"])


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_stats_tells_its_progress_as_inputs_are_merged(
    runner, local_ray, corpus, engine, monkeypatch
):
    monkeypatch.setattr("attnviz.cli.stats.PROGRESS_SECONDS", 0)  # a line at every step
    arguments = ["stats", corpus, "--engine", engine, "--batch-size", "1", "-f", "json"]
    result = run(runner, *arguments)
    assert result.exit_code == 0, result.stderr
    *steps, summary = result.stderr.splitlines()
    counts = [int(line.removeprefix("attnviz: ").removesuffix(" inputs")) for line in steps]
    assert counts == sorted(counts) and counts[-1] == len(SENTENCES) and len(counts) >= 2
    assert summary.startswith(f"attnviz: {len(SENTENCES)} inputs in ")


def test_resume_works_across_engines(runner, local_ray, corpus, tmp_path):
    out = tmp_path / "out"
    first = run(runner, "batch", corpus, "-o", out, "-f", "json", "-q")
    assert first.exit_code == 0
    (out / "0002-attention-is-all-you-need.json").unlink()
    again = run(runner, "batch", corpus, "-o", out, "-f", "json", "--resume", "--engine", "ray")
    assert again.exit_code == 0, again.stderr
    assert f"1 written, {len(SENTENCES) - 1} skipped" in again.stderr
    manifest = records_in(out)
    assert [record["index"] for record in manifest] == list(range(len(SENTENCES)))


def test_a_line_that_fails_on_a_worker_is_recorded_and_exits_3(runner, local_ray, tmp_path):
    source = tmp_path / "lines.jsonl"
    lines = [
        {"text": "fine words"},
        {"text": "self mode", "target": "has no target"},
        {"text": "ok"},
    ]
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = run(runner, "batch", source, "-o", tmp_path / "o", "-f", "json", "--engine", "ray")
    assert result.exit_code == 3, result.stderr
    records = records_in(tmp_path / "o")
    assert [record["status"] for record in records] == ["ok", "failed", "ok"]


def test_an_unreachable_cluster_is_one_line_exit_1_and_nothing_written(runner, corpus, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "never"
    result = run(
        runner, "batch", corpus, "-o", out, "--engine", "ray", "--ray-address", "127.0.0.1:1"
    )
    assert result.exit_code == 1 and "cannot reach the Ray cluster" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_ray_address_in_the_environment_is_the_cluster_joined(runner, corpus, monkeypatch):
    """RAY_ADDRESS, as a Ray job's command gets it, stands for --ray-address."""
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens on port 1
    result = run(runner, "stats", corpus, "--engine", "ray")
    assert result.exit_code == 1
    assert result.stderr.startswith("attnviz: error: cannot reach the Ray cluster at 127.0.0.1:1")


def test_a_cluster_that_asks_for_a_token_says_how_to_give_it(runner, corpus, tmp_path, monkeypatch):
    """Ray 2.59 on starts clusters with token authentication, yet a driver given an
    address sends no token unless RAY_AUTH_MODE=token: Ray retries, then raises
    "Failed to connect" around the reason, as text (here as Ray 2.60 raises it)."""
    ray = pytest.importorskip("ray")

    def refused(*args, **kwargs):
        reason = RuntimeError(
            "Failed to connect to GCS. Last connection error: Traceback (most recent call"
            " last): ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken"
        )
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379") from reason

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # even beside local_ray
    monkeypatch.setattr(ray, "init", refused)
    monkeypatch.setattr("attnviz.distributed._check_reachable", lambda address: None)
    out = tmp_path / "never"
    result = run(runner, "batch", corpus, "-o", out, "--engine", "ray", "--ray-address", "h:1")
    assert result.exit_code == 1 and not out.exists()
    (line,) = result.stderr.splitlines()
    assert line.startswith("attnviz: error: cannot reach the Ray cluster at h:1: it asks for")
    assert "RAY_AUTH_MODE=token" in line


def test_auto_without_a_ray_running_here_says_what_to_do(runner, corpus, monkeypatch):
    """Ray's own words (here as Ray 2.60 raises them) name its --address flag."""
    ray = pytest.importorskip("ray")

    def nothing_running(*args, **kwargs):
        raise ConnectionError(
            "Could not find any running Ray instance. Please specify the one to connect to by"
            " setting `--address` flag or `RAY_ADDRESS` environment variable."
        )

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # even beside local_ray
    monkeypatch.setattr(ray, "init", nothing_running)
    result = run(runner, "stats", corpus, "--engine", "ray", "--ray-address", "auto")
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("attnviz: error: cannot reach the Ray cluster at auto: no Ray is")
    assert "--address" not in line.replace("--ray-address", "")


@pytest.mark.parametrize(
    ("command", "options", "message"),
    [
        ("stats", ["--num-cpus-per-worker", "2"], "--num-cpus-per-worker applies to --engine ray"),
        ("batch", ["--ray-address", "127.0.0.1:1", "--num-gpus-per-worker", "1"],
         "--ray-address, --num-gpus-per-worker apply to --engine ray only, not the local "
         "engine: add --engine ray"),
        ("stats", ["--jobs", "3"], "--jobs applies to --engine ray, not the local engine here"),
        ("batch", ["-f", "json", "--jobs", "2"],
         "--jobs applies to pictures and pages"),
    ],
)  # fmt: skip
def test_ray_options_without_the_ray_engine_are_refused(
    runner, corpus, tmp_path, command, options, message
):
    """They were dropped unsaid: the local engine ran."""
    target = ["-o", tmp_path / "out"] if command == "batch" else []
    result = run(runner, command, corpus, *target, *options)
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_ray_missing_is_a_usage_error_naming_the_extra(runner, corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    result = run(runner, "stats", corpus, "--engine", "ray")
    assert result.exit_code == 2 and "pip install 'attnviz[ray]'" in result.stderr


def test_a_worker_killed_mid_run_is_retried_without_losing_or_doubling_an_input(
    local_ray, tmp_path
):
    """A Ray worker process killed (SIGKILL) while it works: Ray starts another and retries
    its batch; the batch ends whole, each input recorded once, no half-written file left."""
    import threading

    source = tmp_path / "many.txt"
    source.write_text("\n".join(f"sentence number {i} of many" for i in range(24)) + "\n")
    out = tmp_path / "out"
    address = local_ray.get_runtime_context().gcs_address
    command = [
        *(*ATTNVIZ, "batch", str(source), "-o", str(out), "-f", "json"),
        *("--engine", "ray", "--ray-address", address, "--batch-size", "1", "-q"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = []

    def kill_a_worker():
        # until the batch ends: a machine busy with other work can take a minute and more
        # to start Ray's workers (a fixed minute once ran out before any started)
        deadline = time.monotonic() + 280
        while time.monotonic() < deadline and process.poll() is None:
            found = subprocess.run(
                ["pgrep", "-f", "MapBatches\\(BatchWorker\\)"], capture_output=True, text=True
            ).stdout.split()
            manifest = out / "manifest.jsonl"
            started = manifest.exists() and manifest.read_text().count("\n") >= 2
            if found and started:
                os.kill(int(found[0]), signal.SIGKILL)
                killed.append(found[0])
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    written, errors = process.communicate(timeout=300)
    killer.join()
    assert killed, "no worker was seen working"
    assert process.returncode == 0, errors
    assert written == ""  # Ray's notice of the dead worker is not data: stderr has it
    assert all("(raylet)" in line for line in errors.splitlines()), errors  # and nothing else
    records = records_in(out)  # an interrupted run's claim, its first line, is no record
    assert [record["index"] for record in records] == list(range(24))
    assert all(record["status"] == "ok" for record in records)
    assert len(list(out.glob("*.json"))) == 24
    assert not [path.name for path in out.iterdir() if path.name.startswith(".")]


def test_sigterm_unwinds_a_ray_batch_and_exits_143(local_ray, tmp_path):
    source = tmp_path / "many.txt"
    source.write_text("\n".join(f"sentence number {i} of many" for i in range(3000)) + "\n")
    out = tmp_path / "out"
    address = local_ray.get_runtime_context().gcs_address
    command = [
        *(*ATTNVIZ, "batch", str(source), "-o", str(out), "-f", "json"),
        *("--engine", "ray", "--ray-address", address, "-q"),
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    manifest = out / "manifest.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if manifest.exists() and '"index"' in manifest.read_text():  # a record
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 143, errors  # Ray's own handler exited 15
    assert all("(raylet)" in line for line in errors.splitlines()), errors  # no stack dump
    assert not [path.name for path in out.iterdir() if path.name.startswith(".")]
    records = records_in(out)  # an interrupted run's claim, its first line, is no record
    assert records and all((out / name).exists() for r in records for name in r["files"])


def test_a_text_cut_to_the_models_length_is_said_under_ray(runner, local_ray, tiny, tmp_path):
    source = tmp_path / "long.txt"
    source.write_text(" ".join(f"w{i}" for i in range(80)) + "\nshort words\n")
    common = ["batch", source, "--model", tiny["gpt2"], "-f", "json", "-q"]
    local = run(runner, *common, "-o", tmp_path / "local")
    remote = run(runner, *common, "-o", tmp_path / "ray", "--engine", "ray")
    assert local.exit_code == remote.exit_code == 0, remote.stderr
    assert "were dropped" in local.stderr
    assert remote.stderr == local.stderr


def test_a_circuit_over_pairs_on_ray_equals_the_local_one(runner, local_ray, generators, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(pair) + "\n" for pair in [PAIR, OTHER, PAIR]))
    common = ["circuit", "--pairs", pairs, "--model", generators["llama-lm"], "-f", "json"]
    common += ["--refine", "4", "--edges", "10", "--curve", "0,30"]
    with torch_threads(1):  # a worker's one CPU
        local = run(runner, *common)
    remote = run(runner, *common, "--engine", "ray", "--jobs", "2")
    assert local.exit_code == 0 and remote.exit_code == 0, remote.stderr
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    assert mine["pairs"] == theirs["pairs"] == 3
    assert [edge["to"] for edge in mine["edges"][:10]] == [
        edge["to"] for edge in theirs["edges"][:10]
    ]
    for a, b in zip(mine["edges"], theirs["edges"], strict=True):
        assert (a["from"], a["to"]) == (b["from"], b["to"])
        assert a["score"] == pytest.approx(b["score"], abs=1e-6)
    assert mine["circuit"]["faithfulness"] == pytest.approx(
        theirs["circuit"]["faithfulness"], abs=1e-5
    )
    assert mine["curve"] == pytest.approx(theirs["curve"]) or [
        point["edges"] for point in mine["curve"]
    ] == [point["edges"] for point in theirs["curve"]]
    booted = [*common[:7], "--bootstrap", "5", "--edges", "10"]  # each worker draws alike
    with torch_threads(1):
        local = run(runner, *booted)
    remote = run(runner, *booted, "--engine", "ray", "--jobs", "2")
    assert local.exit_code == 0 and remote.exit_code == 0, remote.stderr
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    assert mine["bootstrap"] == theirs["bootstrap"] == 5
    for a, b in zip(mine["edges"], theirs["edges"], strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-6)
    assert sum(edge["score"] == 0 for edge in mine["edges"]) > 0  # some signs turned
    # mean ablation: the means over every worker's pairs, handed to every later pass; and
    # optimize, trained by one worker
    averaged = [*common[:7], "--ablation", "mean", "--method", "optimize", "--train-steps", "6"]
    with torch_threads(1):
        local = run(runner, *averaged)
    remote = run(runner, *averaged, "--engine", "ray", "--jobs", "2")
    assert local.exit_code == 0 and remote.exit_code == 0, remote.stderr
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    assert mine["ablation"] == theirs["ablation"] == "mean"
    assert mine["corrupt_metric"] == pytest.approx(theirs["corrupt_metric"], abs=1e-5)
    for a, b in zip(mine["edges"], theirs["edges"], strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-5)
    assert mine["training"]["losses"] == pytest.approx(theirs["training"]["losses"], abs=1e-5)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(p) + "\n" for p in [PAIR, {**OTHER, "corrupt": "The dog"}]))
    refused = run(runner, "circuit", "--pairs", bad, "--model", generators["llama-lm"],
                  "--engine", "ray", "--jobs", "2")  # fmt: skip
    assert refused.exit_code == 2, refused.stderr
    assert refused.stdout == "" and "line 2: the corrupted text is" in refused.stderr
