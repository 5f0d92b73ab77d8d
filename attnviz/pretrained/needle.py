"""A needle-in-a-haystack sweep run on a causal language model (definitions in
:mod:`attnviz.needle`).

Each cell's prompt is built from tokens, so that its length is exactly the one asked
for: the model's first tokens, the haystack's tokens cut to fit with the needle's put in
after the sentence that ends nearest below the depth asked for, then the question. The
model answers greedily with its own fused attention and key/value cache; at each step,
attnviz's recording attention function reads, for every head, the one query row that
writes the next token: its most-weighted key and its weight on the needle, from the
same queries and keys the model's attention is given (a row of S keys per head, never a
map). A sliding-window layer's cache holds only the latest keys: a row's keys are the
last S positions read.

Shape letters: G steps (tokens written), L layers, H heads, S keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Attention
from attnviz.errors import UsageError, warn
from attnviz.generated import Sampling
from attnviz.needle import (
    Cell,
    Needle,
    NeedleResults,
    Strips,
    Sweep,
    answered,
    bin_edges,
    retrieval_scores,
)
from attnviz.pretrained.attention_modules import Family, Stream
from attnviz.pretrained.encoding import chat_text
from attnviz.pretrained.fused import recording, scores_of
from attnviz.pretrained.generation import generation_config
from attnviz.pretrained.loading import PretrainedModel
from attnviz.pretrained.quiet import quiet

if TYPE_CHECKING:
    import torch

_SENTENCE_ENDS = (".", "!", "?", "\n")
STRIP_BINS = 512  # the bins a drawn cell's rows are pooled into: a picture's width of them
_MESSAGE = "\u2063needle\u2063"  # stands for the prompt in the chat template, found after


def default_haystack() -> str:
    """The filler shipped with attnviz: prose written for it, in the public domain."""
    return files("attnviz").joinpath("data", "haystack.txt").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    needle: tuple[int, int]  # the needle's first position and the one after its last
    answer: list[int]  # the positions of the answer's tokens


class Haystack:
    """The tokens every cell's prompt is cut from, for one model's tokenizer."""

    def __init__(self, loaded: PretrainedModel, sweep: Sweep, filler: str) -> None:
        tokenizer = loaded.tokenizer
        needle = sweep.needle
        self.needle, self.answer = _needle_tokens(tokenizer, needle)
        question = tokenizer(needle.question, add_special_tokens=False)["input_ids"]
        if not question:
            raise UsageError("the question tokenizes to nothing: give it some words")
        before, after = _around(loaded, sweep.chat)
        self.first = before
        self.asked = tokenizer(needle.asked, add_special_tokens=False)["input_ids"] + after
        self.filler = self._filler(tokenizer, filler, max(sweep.lengths))
        self.ends = self._sentence_ends(tokenizer)

    def room(self, length: int) -> int:
        """How many haystack tokens a prompt of ``length`` tokens holds."""
        return length - len(self.first) - len(self.needle) - len(self.asked)

    def _filler(self, tokenizer: Any, filler: str, longest: int) -> list[int]:
        ids = tokenizer(filler, add_special_tokens=False)["input_ids"]
        if not ids:
            raise UsageError("the haystack tokenizes to nothing: give a file of text")
        needed = self.room(longest)
        if len(ids) < needed:
            copies = -(-needed // len(ids)) + 1  # whole copies joined by newlines retokenize
            warn(
                f"the haystack is {len(ids)} tokens long: repeated {copies} times to fill "
                f"{longest} tokens"
            )
            ids = tokenizer("\n".join([filler] * copies), add_special_tokens=False)["input_ids"]
        return ids

    def _sentence_ends(self, tokenizer: Any) -> np.ndarray:
        """The positions after which a sentence has ended (0: before the first token)."""
        ending = {
            token
            for token in set(self.filler)
            if tokenizer.decode([token]).rstrip(" ").endswith(_SENTENCE_ENDS)
        }
        after = [index + 1 for index, token in enumerate(self.filler) if token in ending]
        return np.asarray([0, *after])

    def prompt(self, length: int, depth: float) -> Prompt:
        room = self.room(length)
        if room < 0:
            raise UsageError(
                f"--lengths {length} is too short: the needle and the question alone take "
                f"{length - room} tokens"
            )
        wanted = round(depth * room)
        ends = self.ends[self.ends <= room]
        cut = room if depth == 1 else int(ends[ends <= wanted].max())
        start = len(self.first) + cut
        ids = [*self.first, *self.filler[:cut], *self.needle, *self.filler[cut:room], *self.asked]
        answer = [start + index for index in self.answer]
        return Prompt(ids, (start, start + len(self.needle)), answer)


def _around(loaded: PretrainedModel, chat: bool) -> tuple[list[int], list[int]]:
    """The tokens before a prompt's text and after it: the special tokens the tokenizer
    puts first (a causal model's <bos>), or, with ``chat``, the chat template's around
    one user message, up to where the reply begins."""
    tokenizer = loaded.tokenizer
    if chat:
        rendered, spans = chat_text(loaded, _MESSAGE, None)
        (start, end), *_ = spans
        before, after = (
            tokenizer(part, add_special_tokens=False)["input_ids"] if part else []
            for part in (rendered[:start], rendered[end:])
        )
        return before, after
    marked = tokenizer("a", add_special_tokens=True)["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    return (marked[: marked.index(plain[0])] if plain and plain[0] in marked else []), []


def _needle_tokens(tokenizer: Any, needle: Needle) -> tuple[list[int], list[int]]:
    """The needle's tokens (after a space, as it follows a sentence) and the indices of
    those that spell the answer."""
    text = " " + needle.needle
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoded["input_ids"]
    if not ids:
        raise UsageError("the needle tokenizes to nothing: give it some words")
    begin = text.index(needle.answer)
    end = begin + len(needle.answer)
    answer = [
        index
        for index, (start, stop) in enumerate(encoded["offset_mapping"])
        if start < end and stop > begin
    ]
    if not answer:
        raise UsageError(f"the answer {needle.answer!r} tokenizes to nothing")
    return ids, answer


def check_sweep(loaded: PretrainedModel, sweep: Sweep) -> None:
    """A causal language model that can read the longest prompt and write after it."""
    name = loaded.name
    if loaded.family is not Family.DECODER or not loaded.model.can_generate():
        raise UsageError(
            f"{name} is not a causal language model: needle needs one that writes "
            "(--model smollm2, --model gemma3, a GPT-2 or Llama folder)"
        )
    longest = max(sweep.lengths) + sweep.max_new_tokens
    if longest > loaded.max_length:
        raise UsageError(
            f"--lengths {max(sweep.lengths)}: {name} reads at most {loaded.max_length} "
            f"tokens, the prompt and the {sweep.max_new_tokens} it may write together"
        )


def run_sweep(
    loaded: PretrainedModel,
    sweep: Sweep,
    filler: str | None = None,
    progress: Callable[[int, int, Cell], None] | None = None,
) -> NeedleResults:
    """Every cell of ``sweep``: the prompt, the greedy answer, each head's readings."""
    check_sweep(loaded, sweep)
    haystack = Haystack(loaded, sweep, default_haystack() if filler is None else filler)
    cells = []
    for length, depth in sweep.cells():
        prompt = haystack.prompt(length, depth)
        bins = min(len(prompt.ids), STRIP_BINS) if sweep.strips_of == (length, depth) else None
        written, top_keys, span, pooled = read_while_writing(loaded, prompt, sweep, bins)
        response = loaded.tokenizer.decode(written, skip_special_tokens=True)
        strips = None
        if bins is not None:
            spelled = loaded.tokenizer.convert_ids_to_tokens(written)
            strips = Strips(pooled, bin_edges(len(prompt.ids), bins), spelled)
        cell = Cell(
            length=length,
            depth=depth,
            tokens=len(prompt.ids),
            needle=prompt.needle,
            answer=prompt.answer,
            response=response,
            answered=answered(response, sweep.needle.answer),
            retrieval=retrieval_scores(top_keys, written, prompt.ids, prompt.answer),
            span=span.mean(axis=0),
            strips=strips,
        )
        cells.append(cell)
        if progress is not None:
            progress(len(cells), len(sweep.lengths) * len(sweep.depths), cell)
    return NeedleResults(loaded.name, sweep, cells)


class _AnswerCame:
    """Stops writing once the answer is in what was written."""

    def __init__(self, tokenizer: Any, start: int, answer: str) -> None:
        self.tokenizer, self.start, self.answer = tokenizer, start, answer

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        import torch

        text = self.tokenizer.decode(input_ids[0, self.start :], skip_special_tokens=True)
        return torch.tensor([answered(text, self.answer)], device=input_ids.device)


class _WhileWriting:
    """A recording hook (:func:`~attnviz.pretrained.fused.recording`): at each step, each
    head's last row read from the model's queries and keys: its most-weighted key, its
    weight on the needle and, given ``bins``, its row over the prompt summed into that
    many bins."""

    def __init__(self, loaded: PretrainedModel, prompt: Prompt, bins: int | None) -> None:
        modules = loaded.streams[Stream.SELF]
        self.owner = {  # each part of a layer's attention module -> the layer
            id(part): layer
            for layer, (attention, _) in enumerate(modules)
            for part in attention.modules()
        }
        self.read = [0] * len(modules)  # the positions each layer has read so far
        self.steps: list[list[tuple[list[int], list[float], np.ndarray]]] = [[] for _ in modules]
        self.needle, self.length, self.bins = prompt.needle, len(prompt.ids), bins

    def __call__(self, module, query, key, value, mask, args, kwargs) -> None:
        import torch  # the hook runs inside the model's forward pass, torch loaded

        layer = self.owner.get(id(module))
        if layer is None:
            return
        scores = scores_of(module, query, key, mask, args, kwargs)
        rows, keys = query.shape[2], key.shape[2]
        self.read[layer] += rows
        first = self.read[layer] - keys  # the position of the first key the cache holds
        last = np.asarray([rows - 1])
        positions = torch.arange(first, first + keys, device=query.device)  # (W,)
        in_prompt = positions < self.length
        bins = self.bins or 0
        bin_of = positions[in_prompt] * (bins or 1) // self.length
        pooled = torch.zeros(scores.heads, bins, dtype=torch.float32, device=query.device)
        low, high = self.needle
        tops, masses = [], []
        for head in range(scores.heads):
            weights = scores.block(0, head, last, keys).tensor()[0]  # (W,)
            tops.append(int(weights.argmax()) + first)
            masses.append(float(weights[max(low - first, 0) : max(high - first, 0)].sum()))
            if bins:
                pooled[head].index_add_(0, bin_of, weights[in_prompt].float())
        self.steps[layer].append((tops, masses, pooled.cpu().numpy()))

    def arrays(self, steps_taken: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first ``steps_taken`` steps' top keys (G, L, H), weights on the needle
        (G, L, H) and binned rows (G, L, H, B)."""
        top_keys = np.asarray([[tops for tops, _, _ in layer] for layer in self.steps])
        span = np.asarray([[masses for _, masses, _ in layer] for layer in self.steps])
        pooled = np.asarray([[rows for _, _, rows in layer] for layer in self.steps])
        return (
            top_keys.transpose(1, 0, 2)[:steps_taken],  # (L, G, H) -> (G, L, H)
            span.transpose(1, 0, 2)[:steps_taken],
            pooled.transpose(1, 0, 2, 3)[:steps_taken],
        )


def read_while_writing(
    loaded: PretrainedModel, prompt: Prompt, sweep: Sweep, bins: int | None = None
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Greedy writing after ``prompt``: the tokens written (G,), and at each step each
    head's most-weighted key (G, L, H), weight on the needle (G, L, H) and, given
    ``bins``, row over the prompt summed into that many bins (G, L, H, B; else empty)."""
    import torch
    from transformers import DynamicCache, StoppingCriteriaList

    model = loaded.model
    record = _WhileWriting(loaded, prompt, bins)
    ids = torch.tensor([prompt.ids], device=model.device)
    new_tokens = sweep.max_new_tokens
    config = generation_config(loaded, Sampling(max_new_tokens=new_tokens), new_tokens)
    config.cache_implementation = None  # positions of a dynamic cache: the latest keys
    stop = _AnswerCame(loaded.tokenizer, len(prompt.ids), sweep.needle.answer)
    fused = loaded.attention is not Attention.EAGER  # --attention eager reads eager rows
    with recording(model, record, fused=fused), torch.inference_mode(), quiet(loaded.verbose):
        sequence = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=config,
            past_key_values=DynamicCache(config=model.config),
            stopping_criteria=StoppingCriteriaList([stop]),
        )[0].tolist()
    written = sequence[len(prompt.ids) :]
    return (written, *record.arrays(len(written)))  # one forward pass per token written
