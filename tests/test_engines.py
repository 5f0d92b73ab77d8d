"""The engines batch and stats run on: one interface, here or on Ray workers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz import engines
from attnviz.analysis.corpus import CorpusStatistics, CorpusWork
from attnviz.batch.folder import plan_folder
from attnviz.batch.inputs import assign_names, read_inputs
from attnviz.batch.run import BatchWork
from attnviz.batch.writing import Outputs
from attnviz.choices import Output, View
from attnviz.errors import UsageError
from attnviz.inputs import Input
from attnviz.loading import ExtractorSpec
from attnviz.render.style import Style
from attnviz.request import Request


def test_the_local_engine_loads_the_model_once_through_its_loader():
    loaded = []

    def load(spec: ExtractorSpec):
        loaded.append(spec)
        return spec.load()

    lines = [(1, Input("the cat sat")), (2, Input("on the mat"))]
    counted = []
    work = CorpusWork(iter(lines), ExtractorSpec(), Request(), 1, counted.append)
    corpus = engines.Local(load=load).statistics(work)
    assert loaded == [ExtractorSpec()] and counted == [1, 2]
    expected = CorpusStatistics()
    list(expected.add_corpus(ExtractorSpec().load(), lines, Request(), 2))
    assert corpus.model == expected.model == "builtin:layers=2,heads=4,d_model=64,seed=0"
    assert corpus.rows() == expected.rows()


def test_merged_statistics_keep_the_model_name():
    named = CorpusStatistics(model="m")
    merged = CorpusStatistics()
    merged.merge(named)
    assert merged.model == "m"


def test_a_local_batch_writes_every_input(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\n\non the mat\n")
    inputs = [item for item in read_inputs(str(source)) if not item.blank]
    assign_names(inputs)
    folder = tmp_path / "out"
    folder.mkdir()
    outputs = Outputs(folder=folder, formats=(Output.JSON,), view=View.HEAD, style=Style())
    plan = plan_folder(folder, None, resume=False, overwrite=False, request=outputs.fingerprint())
    steps = []
    progress = lambda done, total: steps.append((done, total))  # noqa: E731
    work = BatchWork(inputs, ExtractorSpec(), Request(), outputs, plan, 2, progress)
    tally = engines.Local().run_batch(work)
    assert [record.status for record in tally.records] == ["ok", "ok"]
    assert steps[-1] == (2, 2)
    assert sorted(path.suffix for path in folder.iterdir()) == [".json", ".json", ".jsonl"]


def test_a_batch_runs_through_its_front_door_and_resumes(tmp_path):
    """Batch.prepare reads and names the inputs and checks the folder; run does the rest
    (the folder made, locked and planned, the manifest written); a resumed run skips
    what is done."""
    from attnviz.batch import Batch

    source = tmp_path / "in.txt"
    source.write_text("the cat sat\n\non the mat\n")
    folder = tmp_path / "out"  # not there yet: run makes it
    outputs = Outputs(folder=folder, formats=(Output.JSON,), view=View.HEAD, style=Style())
    job = Batch.prepare(str(source), outputs)
    assert (len(job.inputs), job.blank_lines) == (2, 1)
    tally = job.run(engines.Local(), ExtractorSpec(), Request(), batch_size=2, progress=print)
    assert [record.status for record in tally.records] == ["ok", "ok"]
    manifest = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    assert [record["status"] for record in manifest] == ["ok", "ok"]
    again = Batch.prepare(str(source), outputs, resume=True)
    tally = again.run(engines.Local(), ExtractorSpec(), Request(), batch_size=2, progress=print)
    assert (tally.skipped, tally.records) == (2, [])


def test_a_request_through_an_engine_gives_what_the_extractors_run_gives():
    inputs = [Input("the cat sat"), Input("on the mat")]
    request = Request(mode="masked", layers=1)
    found = engines.Local().run(engines.Work(ExtractorSpec(), inputs, request))
    alone = list(ExtractorSpec().load().run(inputs, request))
    assert [each.input for each in found] == inputs
    for mine, theirs in zip(found, alone, strict=True):
        assert mine.maps is not None and theirs.maps is not None
        np.testing.assert_array_equal(mine.maps.weights, theirs.maps.weights)


def test_ray_reads_a_request_for_a_circuit_alone():
    """Ray reads a batch and a corpus by their own work; a request without a circuit is
    refused in one line before any cluster is reached."""
    work = engines.Work(ExtractorSpec(), [Input("the cat sat")], Request())
    with pytest.raises(UsageError, match="a circuit's pairs alone"):
        engines.Ray().run(work)
