"""What a batch writes for one input: every requested file, through the writers' registry."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from attnviz.analysis.aggregate import aggregate
from attnviz.analysis.heads import TopHeads
from attnviz.atomic_files import open_output
from attnviz.batch.inputs import BatchInput
from attnviz.batch.ledger import Ledger
from attnviz.batch.manifest import FileDigest, digest_of
from attnviz.choices import Aggregate, Dtype, Output, View
from attnviz.errors import AttnvizError
from attnviz.maps import AttentionMaps
from attnviz.render.image import Painter
from attnviz.render.style import Style
from attnviz.writers import Rendering, pieces


@dataclass(frozen=True)
class Outputs:
    """What to write for every input."""

    folder: Path
    formats: tuple[Output, ...]  # some of png, svg, pdf, json, npz, html
    view: View
    style: Style
    aggregate: Aggregate | None = None  # applied before writing
    top: TopHeads | None = None  # the heads pictures show, chosen per input
    label_positions: bool = False  # repeated labels in pictures told apart
    dtype: Dtype = Dtype.FLOAT32  # how json and npz store the weights
    request: dict[str, Any] = field(default_factory=dict)  # the model side, for the manifest
    ledger: Ledger | None = None  # where each file is claimed before it is written

    def fingerprint(self) -> dict[str, Any]:
        """Everything that decides the files an input gets, as plain JSON values: as the
        manifest reads them back (a tuple is a list there)."""
        fingerprint = {
            **self.request,
            "formats": [output_format.value for output_format in self.formats],
            "view": self.view.value,
            "style": self.style.chosen(),
            "aggregate": None if self.aggregate is None else self.aggregate.value,
            "top": None if self.top is None else asdict(self.top),
            "label_positions": self.label_positions,
            "dtype": self.dtype.value,
        }
        return json.loads(json.dumps(fingerprint))


def write_outputs(
    maps: AttentionMaps, stem: str, outputs: Outputs, painter: Painter
) -> dict[str, FileDigest]:
    """Write every requested file of one input; return their names and digests. Runs in
    worker processes."""
    if outputs.aggregate is not None:
        maps = aggregate(maps, outputs.aggregate)
    how = Rendering(
        outputs.view,
        outputs.style,
        outputs.top,
        outputs.label_positions,
        outputs.dtype,
        painter=painter,
    )
    written = {}
    for output_format in outputs.formats:
        # suffix: "", -L{layer}, -H{head} or -L{layer}-H{head}
        for suffix, write_file in pieces(maps, output_format, how):
            name = f"{stem}{suffix}.{output_format.value}"
            written[name] = _write_file(outputs.folder / name, outputs.ledger, write_file)
    return written


def _write_file(
    path: Path, ledger: Ledger | None, write_file: Callable[[IO[bytes]], object]
) -> FileDigest:
    """One file written whole under its claim; its digest, claimed before the file takes
    its name (so that the next run knows it for the batch's)."""
    digest: list[FileDigest] = []
    if ledger is not None:
        ledger.claim(path.name)

    def whole(temporary: Path) -> None:
        digest.append(digest_of(temporary))
        if ledger is not None:
            ledger.written(path.name, digest[0])

    with open_output(path, binary=True, follow_links=False, before_rename=whole) as out:
        write_file(out)
    return digest[0]


Task = tuple[BatchInput, "AttentionMaps | Exception", Outputs]


def render_task(
    task: Task, painter: Painter
) -> tuple[BatchInput, dict[str, FileDigest] | Exception]:
    """One input's files, or the exception that stopped it: a worker's unit of work."""
    item, maps, outputs = task
    if isinstance(maps, Exception):
        return item, maps
    try:
        return item, write_outputs(maps, item.name, outputs, painter)
    except (AttnvizError, OSError, ValueError) as error:
        return item, error
