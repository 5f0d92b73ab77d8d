"""Tiny random transformers models and tokenizers, built at test time; nothing is downloaded.

Each builder saves a model and its tokenizer with ``save_pretrained`` into a
folder, the way a user's own checkpoint would be, and returns the folder.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

CORPUS = [
    "Hello I love you",
    "The man walked the dog",
    "Bonjour je t'aime",
    "Der Mann ging mit dem Hund spazieren",
    "Attention is all you need",
    "The animal didn't cross the street because it was too tired",
]


def _byte_level_bpe(specials: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def _metaspace(model, trainer, specials: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def _wordpiece() -> Tokenizer:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials)
    )
    return tokenizer


def _template(tokenizer: Tokenizer, single: str, pair: str | None = None) -> None:
    names = {piece for piece in single.split() if piece != "$A"}
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single,
        pair=pair,
        special_tokens=[(name, tokenizer.token_to_id(name)) for name in names],
    )


def _save(model, tokenizer: Tokenizer, folder: Path, **special_tokens) -> Path:
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special_tokens)
    model.eval()
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def bert(folder: Path) -> Path:
    torch.manual_seed(0)
    tokenizer = _wordpiece()
    _template(tokenizer, "[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1")
    config = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return _save(
        transformers.BertModel(config),
        tokenizer,
        folder,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
    )


def gpt2(folder: Path, n_positions: int = 64, lm: bool = False) -> Path:
    torch.manual_seed(0)
    tokenizer = _byte_level_bpe(["<|endoftext|>"])
    end = tokenizer.token_to_id("<|endoftext|>")
    config = transformers.GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        n_positions=n_positions,
        n_embd=32,
        n_layer=3,
        n_head=4,
        bos_token_id=end,
        eos_token_id=end,
    )
    return _save(
        (transformers.GPT2LMHeadModel if lm else transformers.GPT2Model)(config),
        tokenizer,
        folder,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
    )


def llama(folder: Path, lm: bool = False, unknown: bool = True) -> Path:
    """A Llama with grouped-query attention: 4 query heads share 2 key/value heads. Without
    ``unknown`` its tokenizer has no ``<unk>`` for characters outside its vocabulary: it
    drops them."""
    torch.manual_seed(0)
    specials = ["<unk>", "<s>", "</s>"]
    tokenizer = _metaspace(
        models.BPE(unk_token="<unk>" if unknown else None),
        trainers.BpeTrainer(vocab_size=300, special_tokens=specials),
        specials,
    )
    _template(tokenizer, "<s> $A")
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    return _save(
        (transformers.LlamaForCausalLM if lm else transformers.LlamaModel)(config),
        tokenizer,
        folder,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
    )


def bart(folder: Path, lm: bool = False) -> Path:
    torch.manual_seed(0)
    tokenizer = _byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>"])
    _template(tokenizer, "<s> $A </s>")
    config = transformers.BartConfig(
        vocab_size=tokenizer.get_vocab_size(),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    return _save(
        (transformers.BartForConditionalGeneration if lm else transformers.BartModel)(config),
        tokenizer,
        folder,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )


def t5(folder: Path) -> Path:
    torch.manual_seed(0)
    specials = ["<pad>", "</s>", "<unk>"]
    tokenizer = _metaspace(
        models.Unigram(),
        trainers.UnigramTrainer(vocab_size=120, special_tokens=specials, unk_token="<unk>"),
        specials,
    )
    _template(tokenizer, "$A </s>")
    config = transformers.T5Config(
        vocab_size=tokenizer.get_vocab_size(),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=4,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return _save(
        transformers.T5Model(config),
        tokenizer,
        folder,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )


def _metaspace_decoder(model_class, config_class, folder: Path, **settings) -> Path:
    """A Llama-like decoder (<s> first) with a Metaspace BPE tokenizer."""
    torch.manual_seed(0)
    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    tokenizer = _metaspace(
        models.BPE(unk_token="<unk>"),
        trainers.BpeTrainer(vocab_size=300, special_tokens=specials),
        specials,
    )
    _template(tokenizer, "<s> $A")
    shape = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    config = config_class(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        head_dim=8,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        **(shape | settings),
    )
    return _save(
        model_class(config),
        tokenizer,
        folder,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
    )


def mistral(folder: Path) -> Path:
    """Sliding-window attention: a token sees only the 4 tokens up to itself."""
    return _metaspace_decoder(
        transformers.MistralModel, transformers.MistralConfig, folder, sliding_window=4
    )


def gemma2(folder: Path, lm: bool = False) -> Path:
    """Logit soft-capping (scores squashed to ±1 here, so that it bites), and sliding-window
    layers between global ones."""
    return _metaspace_decoder(
        transformers.Gemma2ForCausalLM if lm else transformers.Gemma2Model,
        transformers.Gemma2Config,
        folder,
        attn_logit_softcapping=1.0,
        sliding_window=4,
    )


def gemma3(folder: Path, lm: bool = False) -> Path:
    """Gemma 3's layers told apart by its config's layer types: two sliding-window layers
    (a window of 4, shorter than the texts) before a global one, each with its own mask
    and rotary base."""
    return _metaspace_decoder(
        transformers.Gemma3ForCausalLM if lm else transformers.Gemma3TextModel,
        transformers.Gemma3TextConfig,
        folder,
        num_hidden_layers=3,
        sliding_window=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        query_pre_attn_scalar=8,
    )


BUILDERS = {
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "bart": bart,
    "t5": t5,
    "mistral": mistral,
    "gemma2": gemma2,
    "gemma3": gemma3,
}
# The same models with their language-model heads: they generate text.
GENERATORS = {
    "gpt2-lm": lambda folder: gpt2(folder, lm=True),
    "llama-lm": lambda folder: llama(folder, lm=True),
    "bart-lm": lambda folder: bart(folder, lm=True),
    "gemma2-lm": lambda folder: gemma2(folder, lm=True),
    "gemma3-lm": lambda folder: gemma3(folder, lm=True),
}
