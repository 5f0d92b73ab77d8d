"""Text generation, and the attention of everything the model read and wrote.

The model generates with its key/value cache and without collecting any
attention (transformers' own ``generate``); then one forward pass over the
prompt and the generated tokens reads the maps as ``extract`` reads any input
(the model's fused attention, the weights asked for computed block by block).
Under causal masking the row of a token in that pass is exactly the attention
the model gave when it wrote the next token, so the maps equal what
``generate(output_attentions=True)`` returns step by step, at the cost of one
pass instead of a cache of every step's weights (T×T per layer, which a long
prompt could not hold).

Shape letters: L layers, H heads, T query tokens, S key tokens.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from attnviz.choices import Mode
from attnviz.errors import AttnvizError, ExitCode, UsageError
from attnviz.generated import Generation, Sampling
from attnviz.inputs import Input
from attnviz.maps import AttentionMaps
from attnviz.pretrained.attention_modules import Family
from attnviz.pretrained.encoding import ModelInputs, Prepared, Side, encode
from attnviz.pretrained.labels import piece_labels
from attnviz.pretrained.loading import PretrainedModel
from attnviz.pretrained.quiet import quiet
from attnviz.request import Request
from attnviz.selection import resolve

if TYPE_CHECKING:
    from attnviz.pretrained.reader import ModelReader


class GenerationInterrupted(AttnvizError):
    """Ctrl-C while generating: what was written so far comes with it."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, prompt: str, text: str) -> None:
        super().__init__("interrupted while generating")
        self.prompt = prompt  # as far as the model read it
        self.text = text


class _Collector:
    """A streamer for ``generate``: keeps the ids as they come, so that an interrupted
    generation still has what it wrote."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []

    def put(self, value: Any) -> None:
        self.chunks.append(value.reshape(-1).tolist())

    def end(self) -> None:
        pass

    def written(self) -> list[int]:
        return [token for chunk in self.chunks[1:] for token in chunk]  # the first: the prompt


def generate(
    extractor: ModelReader,
    prompt: str,
    sampling: Sampling,
    request: Request,
) -> Generation:
    """Generate after ``prompt``; return the text and the maps of prompt + generated tokens
    (decoders: masked attention; encoder-decoders: the decoder's cross-attention over the
    prompt by default, the alignment of a translation)."""
    import torch

    loaded = extractor.loaded
    name = loaded.name
    _check_writes(loaded, request)
    mode = _mode(loaded.family, name, request.mode)
    decoder_only = loaded.family is Family.DECODER
    new_tokens = sampling.max_new_tokens
    if decoder_only and new_tokens >= loaded.max_length:
        raise UsageError(
            f"{name} reads at most {loaded.max_length} tokens, prompt and new ones together: "
            f"ask for fewer than {loaded.max_length} new tokens"
        )
    reserve = new_tokens if decoder_only else 0
    source = encode(loaded, prompt, "prompt", reserve=reserve, request=request)
    device = loaded.model.device
    prompt_ids = torch.tensor([source.encoding["input_ids"]], device=device)
    config = generation_config(loaded, sampling, new_tokens)
    collector = _Collector()
    try:
        devices = [device] if device.type == "cuda" else []
        with (
            torch.random.fork_rng(devices=devices),
            torch.inference_mode(),
            quiet(loaded.verbose),
        ):
            torch.manual_seed(sampling.seed)  # inside fork_rng: the caller's RNG is untouched
            sequences = loaded.model.generate(
                input_ids=prompt_ids,
                attention_mask=torch.ones_like(prompt_ids),
                generation_config=config,
                streamer=collector,
            )
    except KeyboardInterrupt:
        written = loaded.tokenizer.decode(collector.written(), skip_special_tokens=True)
        raise GenerationInterrupted(source.read() if decoder_only else prompt, written) from None
    sequence = sequences[0].tolist()  # decoders: prompt + new; encoder-decoders: start + new
    new = sequence[source.length :] if decoder_only else sequence[1:]
    finished = "length"
    if sampling.stop and new and new[-1] in _end_ids(config):
        finished = "end of sequence"
    text = loaded.tokenizer.decode(new, skip_special_tokens=True)
    maps = _maps(extractor, source, sequence, mode, request)
    if not decoder_only and mode is not Mode.SELF:  # the decoder's side: what was written
        maps.target = text
    # A decoder writes after what it read; an encoder-decoder's prompt is its source.
    read = source.read() if decoder_only else prompt
    return Generation(prompt=read, text=text, maps=maps, finished=finished)


def _check_writes(loaded: PretrainedModel, request: Request) -> None:
    """The model writes text (a decoder or an encoder-decoder with its head), and the
    request asks nothing of given text alone."""
    name = loaded.name
    if loaded.family is Family.ENCODER:
        raise UsageError(
            f"{name} is an encoder: it reads text but does not write any. generate needs a "
            "decoder (GPT-2, Llama, Qwen) or an encoder-decoder (BART, T5, Marian)"
        )
    if not loaded.model.can_generate():
        raise UsageError(
            f"{name} has no language-model head ({type(loaded.model).__name__}): save it as "
            "AutoModelForCausalLM (or AutoModelForSeq2SeqLM) to generate with it"
        )
    if request.words:
        raise UsageError("--words merges pieces of given text; generated tokens have no words")


def generation_config(loaded: PretrainedModel, sampling: Sampling, new_tokens: int) -> Any:
    """The model's own generation settings with what was asked: a checkpoint's sampling
    settings do not apply to greedy decoding."""
    config = copy.deepcopy(loaded.model.generation_config)
    config.max_new_tokens = new_tokens
    config.max_length = None
    config.do_sample = sampling.sample
    config.temperature = sampling.temperature if sampling.sample else None
    config.top_p = sampling.top_p if sampling.sample else None
    config.top_k = None
    if not sampling.stop:  # no end token: None would fall back to the model's own
        config.eos_token_id = []
    if config.pad_token_id is None:  # one input needs no padding; this keeps generate quiet
        tokenizer = loaded.tokenizer
        config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id or 0
    return config


def _mode(family: Family, name: str, mode: Mode | None) -> Mode:
    if family is Family.DECODER:
        if mode not in (None, Mode.MASKED):
            raise UsageError(f"{name} is a decoder: its attention is masked (causal) only")
        return Mode.MASKED
    return mode or Mode.CROSS  # the alignment of what was written with the source


def _end_ids(config: Any) -> set[int]:
    ids = config.eos_token_id
    return set(ids if isinstance(ids, list) else [] if ids is None else [ids])


def _maps(
    extractor: ModelReader,
    source: Side,
    sequence: list[int],
    mode: Mode,
    request: Request,
) -> AttentionMaps:
    """One forward pass over everything read and written, read as extract reads its inputs."""
    import torch

    loaded = extractor.loaded
    modules = extractor.modules(mode)
    layer_indices = resolve(request.layers, len(modules), "layer")
    if loaded.family is Family.DECODER:
        written = _written(loaded.tokenizer, source, sequence, source.length)
        arguments = {"input_ids": torch.tensor([sequence])}
        queries = keys = written
        prompt_length: int | None = source.length
    else:
        empty = Side({"input_ids": [], "offset_mapping": []}, "")
        written = _written(loaded.tokenizer, empty, sequence, 1)
        arguments = {
            "input_ids": torch.tensor([source.encoding["input_ids"]]),
            "decoder_input_ids": torch.tensor([sequence]),
        }
        queries = source if mode is Mode.SELF else written
        keys = written if mode is Mode.MASKED else source
        prompt_length = None if mode is Mode.SELF else 1  # the decoder starts from one token
    arguments["attention_mask"] = torch.ones_like(arguments["input_ids"])
    prepared = Prepared(mode, modules, layer_indices, ModelInputs(arguments, [queries], [keys]))
    (maps,) = extractor.maps_of(prepared, request, [Input(source.text)])
    # Rows and bins keep special tokens (a request refuses them otherwise): the prompt's
    # length is a position as it is.
    if prompt_length is not None and not request.special:  # dropped specials leave fewer
        flags = piece_labels(loaded, queries).special[:prompt_length]
        prompt_length = flags.count(False)
    return maps.replace(prompt_length=prompt_length)


def _written(tokenizer: Any, given: Side, sequence: list[int], given_length: int) -> Side:
    """The tokens of the whole sequence as a Side over the prompt's text followed by the
    text written: the given tokens keep their offsets in the prompt, each written token
    spans the characters it added, so that --rows finds a written word too."""
    offsets = list(given.encoding["offset_mapping"][:given_length])
    offsets += [(0, 0)] * (given_length - len(offsets))  # a decoder's start token: no text
    new = sequence[given_length:]
    end = 0
    for count in range(1, len(new) + 1):
        # A token that ends inside a character adds nothing until the character is whole.
        start, end = end, max(end, len(tokenizer.decode(new[:count])))
        offsets.append((len(given.text) + start, len(given.text) + end))
    text = given.text + tokenizer.decode(new)
    template = None
    if given.template is not None:  # a chat template's tokens stay special; new ones are not
        template = given.template[:given_length] + [False] * (len(sequence) - given_length)
    return Side({"input_ids": sequence, "offset_mapping": offsets}, text, None, template)
