"""Long inputs: attnviz against the model's own fused forward pass, side by side.

A random 4-layer Llama (8 query heads over 2 key/value heads, head size 32) is
built here; each length runs, in fresh processes, one after the other:

- ``forward``: a plain transformers script, the model's own fused (sdpa) forward;
- ``pool``: ``attnviz show - --layer -1 --pool 256 -f npz`` (every head of one layer);
- ``rows``: ``attnviz show - --rows last -f json`` (every head of every layer);
- ``heads``: ``attnviz heads - -f json`` (statistics of every head of every layer);
- ``weighed``: ``rows`` with ``--weigh value`` (each weight times its key's value norm
  through the head); target (issue 38): within 1.2x ``rows``;
- with ``--eager``, at lengths up to 12k: ``attnviz show - --attention eager
  --layer -1 --head 0 -f npz``, the path every earlier release took, beside
  the same command on the fused path (``head``); the target at 12k: the fused
  head at least 10x faster, with at least 8x less memory;
- with ``--every``, the other commands a long input must get through (no time
  target; they must finish): ``show -f terminal`` of one layer (pooled by
  itself), ``export`` of one layer to a PNG and to the page, ``stats``, and
  ``generate -n 4 --rows last``.

Targets (issue 26): each attnviz command within 2.5x the forward's time and
within its peak memory + 600 MB, at every length.

With ``--gemma3`` the model is Gemma 3 270M (``--model gemma3``, converted into the cache
first), and the commands are issue 40's, each against the same forward with a target of
2.0x: ``rows``, ``heads``, ``span`` (``heads --rows last --span`` over the text's first
words) and ``needle`` (one cell of ``attnviz needle`` at that length, depth 0.5: the
prompt read once, then the answer written with the model's cache; at the model's whole
context, 64 tokens shorter, room for the question and the answer).

    python benchmarks/long.py [--lengths 2048 4096 8192 16384 32768] [--eager] [--every]
    python benchmarks/long.py --model ./smollm2 --lengths 2048 8192   # a real language model
    python benchmarks/long.py --gemma3 --lengths 2048 8192 16384 32768
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import time_and_peak

ROOT = Path(__file__).resolve().parent.parent
TIME_TARGET = 2.5
GEMMA3_TIME_TARGET = 2.0  # issue 40
GEMMA3_COMMANDS = ("rows", "heads", "span", "needle")
WEIGHED_TARGET = 1.2  # --weigh value --rows last against --rows last
MEMORY_TARGET_MIB = 600
EAGER_UP_TO = 12_288
HEAD_FASTER, HEAD_SMALLER = 10, 8  # the fused head against the eager one, at 12k
# Issue 26's table: the eager head at 11,991 tokens when the issue was written.
ISSUE_EAGER_HEAD = {"seconds": 141.6, "peak_mib": 10.2 * 1000**3 / 2**20}


FORWARD = """
import sys, torch, transformers
folder = sys.argv[1]
model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
ids = torch.tensor([tokenizer(sys.stdin.read().rstrip("\\n"))["input_ids"]])
with torch.inference_mode():
    model.model(input_ids=ids)
"""


def build_model(folder: Path, positions: int) -> None:
    """The Llama of issue 26 with a byte-level BPE tokenizer trained on the sample texts."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    torch.manual_seed(0)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus_lines(), trainer)
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        bos_token_id=0,
        eos_token_id=1,
    )
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", model_max_length=positions
    )
    fast.save_pretrained(folder)


def corpus_lines() -> list[str]:
    return [
        line
        for name in ("paragraph.txt", "sentences.txt")
        for line in (ROOT / "sample_texts" / name).read_text().splitlines()
        if line.strip()
    ]


def text_of(tokens: int, folder: Path, scratch: Path) -> Path:
    """A one-line text that the model's tokenizer reads as exactly ``tokens`` tokens."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    lines = " ".join(corpus_lines())
    text = lines
    while len(tokenizer(text)["input_ids"]) < tokens:
        text += " " + lines
    encoding = tokenizer(text, return_offsets_mapping=True)
    cut = text[: encoding["offset_mapping"][tokens - 1][1]]
    path = scratch / f"text-{tokens}.txt"
    path.write_text(cut + "\n")
    return path


# Reported without the 2.5x target: the baseline, the one-head pair (a target of its own)
# and the commands that must get through a long input.
UNTARGETED = (
    "forward",
    "eager head",
    "head",
    "show terminal",
    "export png",
    "export page",
    "stats",
    "generate",
)


NEEDLE_ROOM = 64  # tokens: the question and the answer after the haystack


def needle_length(model: Path, tokens: int) -> int:
    """A needle cell of ``tokens``, or, at the model's whole context, as long as leaves room
    for the question and the answer (needle refuses a prompt past the model's positions)."""
    positions = json.loads((model / "config.json").read_text()).get("max_position_embeddings")
    if positions is None or tokens + NEEDLE_ROOM <= positions:
        return tokens
    return tokens - NEEDLE_ROOM


def commands(
    model: Path, scratch: Path, tokens: int, eager: bool, every: bool
) -> dict[str, list[str]]:
    attnviz = [sys.executable, "-m", "attnviz"]
    shown = [*attnviz, "show", "-", "--model", str(model)]
    found = {
        "forward": [sys.executable, "-c", FORWARD, str(model)],
        "pool": [
            *shown,
            "--layer",
            "-1",
            "--pool",
            "256",
            "-f",
            "npz",
            "-o",
            str(scratch / "p.npz"),
        ],
        "rows": [*shown, "--rows", "last", "-f", "json"],
        "span": [
            *(*attnviz, "heads", "-", "--model", str(model), "--rows", "last"),
            *("--span", " ".join(corpus_lines()[0].split()[:4]), "-f", "json"),
        ],
        "needle": [
            *(*attnviz, "needle", "--model", str(model)),
            *("--lengths", str(needle_length(model, tokens))),
            *("--depths", "0.5", "-q", "-f", "json"),
        ],
        "weighed": [*shown, "--rows", "last", "--weigh", "value", "-f", "json"],
        "heads": [
            sys.executable,
            "-m",
            "attnviz",
            "heads",
            "-",
            "--model",
            str(model),
            "-f",
            "json",
        ],
    }
    if eager and tokens <= EAGER_UP_TO:
        one_head = ["--layer", "-1", "--head", "0", "-f", "npz", "-o", str(scratch / "e.npz")]
        found["eager head"] = [*shown, "--attention", "eager", *one_head]
        found["head"] = [*shown, *one_head]
    if every:
        exported = [*attnviz, "export", "-", "--model", str(model), "--layer", "-1", "-o"]
        found |= {
            "show terminal": [*shown, "--layer", "-1", "-f", "terminal", "--width", "160"],
            "export png": [*exported, str(scratch / "layer.png")],
            "export page": [*exported, str(scratch / "layer.html")],
            "stats": [*attnviz, "stats", "-", "--model", str(model), "-f", "json", "-q"],
            "generate": [
                *attnviz,
                *("generate", "-", "--model", str(model), "-n", "4", "--rows", "last"),
                *("-f", "json", "-o", str(scratch / "generated.json")),
            ],
        }
    return found


def one_head(tokens: int, fused: dict[str, float], eager: dict[str, float]) -> None:
    """The fused head against the eager one: measured in this run, and against the figures
    issue 26 gives at 12k, which its target is stated in."""
    for label, baseline in (("this run's eager head", eager), ("issue 26's", ISSUE_EAGER_HEAD)):
        if label.startswith("issue") and tokens != EAGER_UP_TO:
            continue
        faster = baseline["seconds"] / fused["seconds"]
        smaller = baseline["peak_mib"] / fused["peak_mib"]
        within = faster >= HEAD_FASTER and smaller >= HEAD_SMALLER
        print(
            f"{tokens:7} one head: {faster:.1f}x faster, {smaller:.1f}x less memory than "
            f"{label} (target {HEAD_FASTER}x, {HEAD_SMALLER}x){' ok' if within else ''}",
            flush=True,
        )


def weighed(tokens: int, weighed: dict[str, float], rows: dict[str, float]) -> bool:
    """Value-weighted last rows against plain ones: whether within the target."""
    ratio = weighed["seconds"] / rows["seconds"]
    within = ratio <= WEIGHED_TARGET
    print(
        f"{tokens:7} --weigh value: {ratio:.2f}x the time of --rows last alone "
        f"(target {WEIGHED_TARGET}x){' ok' if within else ' MISSED'}",
        flush=True,
    )
    return within


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--eager", action="store_true", help="time the eager path up to 12k")
    parser.add_argument("--every", action="store_true", help="run every command a long input needs")
    parser.add_argument("--only", nargs="+", help="run only these commands (and the forward)")
    parser.add_argument(
        "--model",
        type=Path,
        help="a saved language model (a folder) to run instead of the random Llama",
    )
    parser.add_argument("--gemma3", action="store_true", help="Gemma 3 270M, issue 40's commands")
    arguments = parser.parse_args()
    failed = False
    target = GEMMA3_TIME_TARGET if arguments.gemma3 else TIME_TARGET
    if arguments.gemma3:
        from attnviz.pretrained.loading import ALIASES, alias_path

        arguments.model = alias_path("gemma3", ALIASES["gemma3"])
        arguments.only = arguments.only or list(GEMMA3_COMMANDS)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        model = arguments.model or scratch / "llama"
        if arguments.model is None:
            build_model(model, positions=max(arguments.lengths) + 16)
        header = f"{'command':12} {'seconds':>8} {'peak MiB':>9} {'time ×':>7} {'+MiB':>6}"
        print(f"{'tokens':>7} {header}", flush=True)
        for tokens in arguments.lengths:
            text = text_of(tokens, model, scratch)
            runs = commands(model, scratch, tokens, arguments.eager, arguments.every)
            if arguments.only:
                runs = {name: runs[name] for name in runs if name in ("forward", *arguments.only)}
            figures = {}
            for name, command in runs.items():  # the forward first: each row as it is measured
                try:
                    figures[name] = figure = time_and_peak(text, command)
                except RuntimeError as error:
                    print(f"{tokens:7} {name:12} {error}", flush=True)
                    failed = True
                    if name == "forward":  # nothing to hold the commands to
                        break
                    continue
                base = figures["forward"]
                ratio = figure["seconds"] / base["seconds"]
                extra = figure["peak_mib"] - base["peak_mib"]
                within = ratio <= target and extra <= MEMORY_TARGET_MIB
                mark = "" if name in UNTARGETED else ("ok" if within else "MISSED")
                failed |= mark == "MISSED"
                print(
                    f"{tokens:7} {name:12} {figure['seconds']:8.1f} {figure['peak_mib']:9.0f} "
                    f"{ratio:7.2f} {extra:6.0f} {mark}",
                    flush=True,
                )
            if "eager head" in figures:
                one_head(tokens, figures["head"], figures["eager head"])
            if "weighed" in figures and "rows" in figures:
                failed |= not weighed(tokens, figures["weighed"], figures["rows"])
    print(f"targets: time <= {target}x the forward, peak <= forward + {MEMORY_TARGET_MIB} MiB")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
