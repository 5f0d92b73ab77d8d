"""The built-in stack behind the Extractor interface.

The stack is built on first use and kept: building it (~40 ms) costs more
than a forward pass over a sentence (~1 ms). torch is imported only then, so
a request that is wrong fails before any heavy import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnviz import memory, signals
from attnviz.asked import Finder, positions_asked
from attnviz.builtin.config import BuiltinConfig
from attnviz.builtin.explain import explain
from attnviz.builtin.tokenizer import count_tokens, tokenize
from attnviz.choices import Mode
from attnviz.errors import AttnvizError, UsageError, is_out_of_memory, warn
from attnviz.extractor import PROBE_LENGTH, Extractor
from attnviz.inputs import Explaining, Input, without_pair
from attnviz.maps import AttentionMaps
from attnviz.request import Request
from attnviz.selection import covering, resolve, resolve_one

if TYPE_CHECKING:
    from attnviz.builtin.explain import Explanation
    from attnviz.builtin.model import BuiltinTransformer
    from attnviz.extractor import Spec

# The built-in stack keeps whole (tokens x tokens) maps in memory: 4,096 tokens
# peak under 1 GB (benchmarks/memory.py); longer texts are cut, with a warning.
MAX_TOKENS = 4096


class BuiltinExtractor(Extractor):
    def __init__(self, config: BuiltinConfig, spec: Spec) -> None:
        self.config = config
        self.spec = spec
        self.name = config.name
        self._stack: BuiltinTransformer | None = None

    @property
    def stack(self) -> BuiltinTransformer:
        """The seeded stack, built on first use and then kept."""
        if self._stack is None:
            check_fits(self.config)  # before torch is imported: a usage error imports none
            with signals.deferred():  # imports torch: see why there
                from attnviz.builtin.model import BuiltinTransformer  # torch

            try:
                self._stack = BuiltinTransformer(self.config)
            except (MemoryError, RuntimeError) as error:
                if not is_out_of_memory(error):
                    raise
                raise AttnvizError(
                    f"out of memory while building a stack of {self.config.num_layers} layers "
                    f"with d_model {self.config.d_model}: choose a smaller --d-model or "
                    "--num-layers"
                ) from None
        return self._stack

    def tokens(self, text: str, what: str) -> list[str]:
        """The tokens the stack reads: at most MAX_TOKENS, with a warning when cut."""
        tokens = tokenize(text, lowercase=self.config.lowercase, limit=MAX_TOKENS + 1)
        if len(tokens) > MAX_TOKENS:
            count = count_tokens(text)
            warn(
                f"the {what} has {count} tokens; the built-in stack reads at most "
                f"{MAX_TOKENS}: the last {count - MAX_TOKENS} were dropped"
            )
        return [token.text for token in tokens[:MAX_TOKENS]]

    def _check(self, request: Request) -> None:
        if request.chat:
            raise UsageError("chat templates belong to pretrained instruct models")
        if request.words or request.raw_pieces or not request.special:
            raise UsageError("special tokens and sub-word pieces exist only in pretrained models")
        resolve(request.layers, self.config.num_layers, "layer")
        resolve(request.heads, self.config.num_heads, "head")

    def _extract_many(self, inputs: list[Input], request: Request) -> list[AttentionMaps]:
        chosen = request.mode or Mode.SELF
        layer_indices = resolve(request.layers, self.config.num_layers, "layer")
        head_indices = resolve(request.heads, self.config.num_heads, "head")
        # The stack has no padding mask: inputs run one at a time.
        return [
            self._positioned(
                self._extract(*without_pair(item), chosen, layer_indices, head_indices, request),
                request,
            )
            for item in inputs
        ]

    def _positioned(self, maps: AttentionMaps, request: Request) -> AttentionMaps:
        """The rows, bins and span the request asks for, of whole maps."""
        rows, span = positions_asked(
            request,
            len(maps.query_tokens),
            len(maps.key_tokens),
            self._finder(maps.target if maps.mode is Mode.CROSS else maps.text, "--rows"),
            self._finder(maps.text, "--span"),
        )
        return maps.replace(span=span).reduced(rows, request.pool)

    def _finder(self, text: str | None, option: str) -> Finder:
        """Where a text lies among the tokens of ``text`` (as the stack reads it)."""
        spans = [(token.start, token.end) for token in tokenize(text or "", limit=MAX_TOKENS)]
        return lambda wanted: covering(text or "", wanted, spans, option)

    def detection_probe(self, length: int = PROBE_LENGTH, seed: int = 0) -> str:
        """Made-up words (the stack has no vocabulary and no first token of its own)."""
        import numpy as np

        random = np.random.default_rng(seed)
        words: dict[str, None] = {}
        while len(words) < length:
            letters = random.choice(list("abcdefghijklmnopqrstuvwxyz"), size=random.integers(3, 8))
            words["".join(letters)] = None
        return " ".join([*words, *words])

    def _extract(
        self,
        text: str,
        target: str | None,
        mode: Mode,
        layers: list[int],
        heads: list[int],
        request: Request,
    ) -> AttentionMaps:
        check_target(mode, target)
        source = self.tokens(text, "text")
        queries = self.tokens(target, "target") if target is not None else source
        check_maps_fit(self.config, len(layers), len(heads), len(queries), len(source))
        per_layer = self.stack.attention_maps(
            source,
            mode=mode,
            target_tokens=queries if mode is Mode.CROSS else None,
            layers=layers,
            weigh=request.weigh is not None,
        )
        import torch

        weights = torch.stack([per_layer[layer][heads] for layer in layers])  # (L, H, T, S)
        return AttentionMaps(
            query_tokens=queries,
            key_tokens=source,
            weights=weights.numpy(),
            layers=layers,
            heads=heads,
            mode=mode,
            model=self.name,
            text=text,
            target=target,
            recorded=request.recorded(),
        )

    def _explain(self, asked: Explaining) -> Explanation:
        if asked.query is not None:
            raise UsageError("--query goes with --model; the built-in walk-through shows every row")
        if asked.raw_pieces:
            raise UsageError("sub-word pieces exist only in pretrained models")
        mode = asked.mode or Mode.SELF
        check_target(mode, asked.target)
        layer = resolve_one(asked.layer, self.config.num_layers, "layer")
        head = resolve_one(asked.head, self.config.num_heads, "head")
        source = self.tokens(asked.text, "text")
        queries = None if asked.target is None else self.tokens(asked.target, "target")
        explanation = explain(self.stack, source, queries, mode=mode, layer=layer, head=head)
        explanation.model = self.name
        return explanation


def check_target(mode: Mode, target: str | None) -> None:
    if mode is Mode.CROSS and target is None:
        raise UsageError("cross mode needs a target text (--target): its tokens are the queries")
    if mode is not Mode.CROSS and target is not None:
        raise UsageError(
            f"a target text only applies to cross mode, not {mode} mode: add --mode cross"
        )


def check_maps_fit(config: BuiltinConfig, layers: int, heads: int, queries: int, keys: int) -> None:
    """Refuse, before the stack runs, maps that cannot fit in the memory this process may
    still take: it keeps every head of each layer asked for, whole, then stacks the heads
    chosen (float32), and makes a layer's scores and weights on the way (--rows and
    --pool are taken after)."""
    heads_made = config.num_heads
    kept = (layers * heads_made + layers * heads + 3 * heads_made) * queries * keys * 4
    if (free := memory.short_of(kept)) is not None:
        raise UsageError(
            f"the built-in stack's maps of {queries} × {keys} tokens need about "
            f"{kept / 2**30:.1f} GiB ({layers} layers × {heads_made} heads, whole, float32) but "
            f"this process has {free}: select fewer layers (--layer), fewer --num-heads or a "
            "shorter text"
        )


# Building the stack takes its weights and a little more while torch initialises them,
# and importing torch maps 0.6 GiB of address space (which ulimit -v counts). Under
# prlimit --as=4000000000 (3.7 GiB of room before torch), d_model 2048 with 7 layers
# (3.06 GiB of weights) was built and 8 layers (3.5 GiB) ran out of memory.
_BUILDING = 1.05
_TORCH_MAPS = 0.6 * 2**30


def check_fits(config: BuiltinConfig) -> None:
    """Refuse, before building it, a stack whose weights would not fit in the memory this
    process may still take (the machine's, or less under a ulimit or a cgroup)."""
    import sys

    needed = config.weight_bytes * _BUILDING + (0 if "torch" in sys.modules else _TORCH_MAPS)
    if (free := memory.short_of(needed)) is not None:
        raise UsageError(
            f"a stack of {config.num_layers} layers with d_model {config.d_model} needs about "
            f"{needed / 2**30:.1f} GiB to build (its weights, float32, and torch) but this "
            f"process has {free}: choose a smaller --d-model or --num-layers"
        )
