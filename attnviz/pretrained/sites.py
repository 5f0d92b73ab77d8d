"""Where each site lies in a layer of any stack (:mod:`~attnviz.pretrained.anatomy`),
declared once, and the hooks that read and edit it: a user's activations, the trace's
record and restore, the patching of heads, the circuit's ablated nodes and the gradient
passes all find a site's hook point here.

A site is a tensor (B, T, W) that one module of the layer is given or returns (a column
range of it, for a fused query/key/value projection), split into heads of the model's head
size where the site is a head's. ``resid_mid`` is the output of the module that outputs
it in a post-norm layer or T5's sublayers; in a pre-norm decoder it lies at no module's
boundary (GPT-2, Llama and Gemma keep the residual in a local): it is read as the layer's
input plus what the attention block adds to it, and restored by setting what the
attention block adds.
``pattern``, a head's attention weights, is no module's tensor either: it is recorded from
the model's own eager attention (each attention module returns its weights there), and
restored through what the head outputs, z = A v, with the run's own values (a head's
output is linear in its weights for fixed values, so that is exactly the run with the
weights restored).

Shape letters: B rows of a pass, T tokens, W the tensor's width, U the site's units in a
layer (its heads, or 1), Dh a head's size; in a site's declared shape, D the model's width,
H its query heads, K its key/value heads, S the keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.choices import Site
from attnviz.errors import UsageError
from attnviz.memory import give_back_freed
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.implementations import attention_implementation

if TYPE_CHECKING:
    import torch

# (body, layer, the tensor's width) -> the columns of the site in the module's tensor
Part = Callable[[Anatomy, int, int], slice]


def _whole(_body: Anatomy, _layer: int, _width: int) -> slice:
    return slice(None)


@dataclass(frozen=True)
class SitePoint:
    """Where a site is read in each layer: a module of the layer, whether the site is its
    input (a pre-hook reads it, keywords included) or its output, which of its columns,
    whether it is split into heads, and whether it is the layer's input plus that output
    (where the layer has no module that outputs it, :meth:`sums`)."""

    module: Callable[[Anatomy, int], Any]
    reads_input: bool
    part: Part = _whole
    per_head: bool = False
    adds_to_input: bool = False
    shape: str = "(T, D)"
    # the heads' attention weights: recorded from eager attention, restored through z
    pattern: bool = False

    def sums(self, body: Anatomy, layer: int) -> bool:
        """Whether the site in ``layer`` is the layer's input plus the module's output."""
        return self.adds_to_input and body.mids[layer] is None


# Where a layer's MLP output leaves it, before any residual or norm: decoders' ``mlp``,
# BART's second linear, BERT's output dense, T5's last sublayer's feed-forward
_MLPS = ("mlp", "fc2", "output.dense", "layer.-1.DenseReluDense")


def _mlp(body: Anatomy, layer: int) -> Any:
    mlp = next(filter(None, (_child(body.blocks[layer], name) for name in _MLPS)), None)
    if mlp is None:
        raise UsageError(
            f"attnviz cannot find layer {layer}'s MLP ({type(body.blocks[layer]).__name__} has "
            "no mlp): trace --site resid or attn"
        )
    return mlp


def _child(module: Any, path: str) -> Any:
    """The module at a dotted ``path`` below ``module`` (an item from the end where a
    number is negative), or None."""
    for name in path.split("."):
        if name.lstrip("-").isdigit():
            items = list(module.children()) if hasattr(module, "children") else []
            module = items[int(name)] if -len(items) <= int(name) < len(items) else None
        else:
            module = getattr(module, name, None)
        if module is None:
            return None
    return module


def _added(body: Anatomy, layer: int) -> Any:
    """Where the residual between the attention and the MLP is found: the module that
    outputs it (:attr:`Anatomy.mids`), else what the layer adds the attention's output to
    the residual through, the post norm where the layer has one (Gemma 2 and 3), else the
    attention module itself."""
    if body.mids[layer] is not None:
        return body.mids[layer]
    post_norm = body.post_norms[layer]
    return body.attentions[layer] if post_norm is None else post_norm


# The separate query, key and value projections' names: Llama's and BART's, BERT's,
# T5's, DistilBERT's
_SEPARATES = (
    ("q_proj", "k_proj", "v_proj"),
    ("query", "key", "value"),
    ("q", "k", "v"),
    ("q_lin", "k_lin", "v_lin"),
)
_FUSED = ("c_attn", "qkv_proj")  # GPT-2's and Phi-3's: queries, keys and values side by side


def _projections(body: Anatomy, layer: int) -> tuple[list[Any], bool]:
    """The attention module's query, key and value projections (or its one fused
    projection), and whether they are fused."""
    children = dict(body.attentions[layer].named_children())
    for names in _SEPARATES:
        if all(name in children for name in names):
            return [children[name] for name in names], False
    fused = next((name for name in _FUSED if name in children), None)
    if fused is None:
        raise UsageError(
            f"attnviz cannot find the query, key and value projections of layer {layer}'s "
            f"attention ({type(body.attentions[layer]).__name__} has "
            f"{', '.join(children) or 'no modules'}): trace --site z or a layer's site"
        )
    return [children[fused]], True


def _qkv(which: int) -> SitePoint:
    """The site of the query (0), key (1) or value (2) projection's output."""

    def module(body: Anatomy, layer: int) -> Any:
        projections, fused = _projections(body, layer)
        return projections[0 if fused else which]

    def part(body: Anatomy, layer: int, width: int) -> slice:
        if not _projections(body, layer)[1]:
            return slice(None)
        queries = body.heads * body.head_size  # then as many keys as values
        keys = (width - queries) // 2
        return [slice(0, queries), slice(queries, queries + keys), slice(queries + keys, width)][
            which
        ]

    shape = "(T, H, Dh)" if which == 0 else "(T, K, Dh)"  # K key/value heads
    return SitePoint(module, reads_input=False, part=part, per_head=True, shape=shape)


# Every site, declared once. ``z`` is the output projection's input, where the heads'
# outputs lie side by side (what patch, ablation and their estimates read).
SITES: dict[Site, SitePoint] = {
    Site.RESID: SitePoint(lambda body, layer: body.blocks[layer], reads_input=True),
    Site.ATTN: SitePoint(lambda body, layer: body.projections[layer], reads_input=False),
    Site.RESID_MID: SitePoint(_added, reads_input=False, adds_to_input=True),
    Site.MLP: SitePoint(_mlp, reads_input=False),
    Site.RESID_POST: SitePoint(lambda body, layer: body.blocks[layer], reads_input=False),
    Site.Q: _qkv(0),
    Site.K: _qkv(1),
    Site.V: _qkv(2),
    Site.Z: SitePoint(
        lambda body, layer: body.projections[layer],
        reads_input=True,
        per_head=True,
        shape="(T, H, Dh)",
    ),
    # its units are z's: a head is restored by setting its output
    Site.PATTERN: SitePoint(
        lambda body, layer: body.projections[layer],
        reads_input=True,
        per_head=True,
        shape="(H, T, S)",
        pattern=True,
    ),
}


@contextlib.contextmanager
def hooked(handle: Any) -> Iterator[None]:
    """A hook's handle, removed when the block ends, however it ends: every hook attnviz
    puts on a model is held by one, so that none outlives its pass."""
    try:
        yield
    finally:
        handle.remove()


_GIVEN_BACK_FROM = 2**20  # numbers in one layer's activation kept, (T, D)


@contextlib.contextmanager
def given_back_each_layer(model: Any, body: Anatomy, positions: int) -> Iterator[None]:
    """While open, where a record of ``positions`` is large, each layer's pass starts by
    handing back the pages freed since (:func:`~attnviz.memory.give_back_freed`): glibc
    keeps blocks up to 32 MiB in its heap, and what a pass keeps between the layers'
    freed activations (a circuit's records, the activations read by name) would pin those
    pages (at 8,192 tokens, a gigabyte more)."""
    width = model.get_input_embeddings().weight.shape[1]
    if positions * width < _GIVEN_BACK_FROM:
        yield
        return

    def give_back(_module: Any, _args: tuple) -> None:
        give_back_freed()

    with contextlib.ExitStack() as hooks:
        for block in body.blocks:
            hooks.enter_context(hooked(block.register_forward_pre_hook(give_back)))
        yield


def site_module(body: Anatomy, site: Site, layer: int) -> Any:
    """The module whose input or output holds the site in ``layer``."""
    return SITES[site].module(body, layer)


@dataclass(frozen=True)
class Units:
    """How a layer's site divides into what is restored alone: its columns in the module's
    tensor, and ``count`` units of ``size`` columns each (heads, or the whole width)."""

    columns: slice
    count: int
    size: int

    def of(self, unit: int | None) -> slice:
        """The columns of one unit (all of the site's for None) in the module's tensor."""
        start = self.columns.start or 0
        if unit is None:
            return slice(start, start + self.count * self.size)
        return slice(start + unit * self.size, start + (unit + 1) * self.size)


def units_of(body: Anatomy, site: Site, layer: int, width: int) -> Units:
    """``site``'s units in ``layer``, whose module's tensor is ``width`` wide."""
    point = SITES[site]
    columns = point.part(body, layer, width)
    start, stop, _ = columns.indices(width)
    if not point.per_head:
        return Units(slice(start, stop), 1, stop - start)
    size = body.head_size
    if (stop - start) % size:
        raise UsageError(
            f"layer {layer}'s {site.value} holds {stop - start} numbers, which heads of "
            f"{size} do not share evenly: attnviz cannot tell one head's from another's"
        )
    return Units(slice(start, stop), (stop - start) // size, size)


# Called with a layer's site as the forward pass reads it: its value (1 or B, T, W) and the
# tensor of the pass's graph whose gradient is the metric's gradient with respect to it.
Found = Callable[["torch.Tensor", "torch.Tensor"], None]


def reading(body: Anatomy, site: Site | SitePoint, layer: int, found: Found) -> list[Any]:
    """Hooks calling ``found`` each time ``layer``'s site is computed; their handles."""
    point = site if isinstance(site, SitePoint) else SITES[site]
    module = point.module(body, layer)
    if point.reads_input:

        def read_input(_module: Any, args: tuple, kwargs: dict) -> None:
            value = hidden_of(args, kwargs)
            found(value, value)

        return [module.register_forward_pre_hook(read_input, with_kwargs=True)]
    if not point.sums(body, layer):

        def read_output(_module: Any, _args: tuple, output: Any) -> None:
            value = output_of(output)
            found(value, value)

        return [module.register_forward_hook(read_output)]
    entering: list[Any] = [None]

    def enter(_module: Any, args: tuple, kwargs: dict) -> None:
        entering[0] = hidden_of(args, kwargs)

    def read_sum(_module: Any, _args: tuple, output: Any) -> None:
        added = output_of(output)
        found(entering[0] + added, added)  # the residual's own sum: the same numbers

    return [
        body.blocks[layer].register_forward_pre_hook(enter, with_kwargs=True),
        module.register_forward_hook(read_sum),
    ]


@contextlib.contextmanager
def recorded(model: Any, body: Anatomy, site: Site) -> Iterator[list[Any]]:
    """While open, each layer's value at ``site`` is kept, (1, T, W) per layer (a
    pattern's, (1, H, T, S), from the model's eager attention, which the pass then runs)."""
    kept: list[Any] = [None] * len(body.blocks)

    def keeper(layer: int) -> Found:
        return lambda value, _graph: kept.__setitem__(layer, value.detach())

    def weights_of(layer: int) -> Callable:
        return lambda _module, _args, output: kept.__setitem__(layer, output[1].detach())

    with contextlib.ExitStack() as hooks:
        for layer in range(len(body.blocks)):
            if SITES[site].pattern:
                handle = body.attentions[layer].register_forward_hook(weights_of(layer))
                hooks.enter_context(hooked(handle))
                continue
            for handle in reading(body, site, layer, keeper(layer)):
                hooks.enter_context(hooked(handle))
        if SITES[site].pattern:
            hooks.enter_context(attention_implementation(model, "eager"))
        yield kept


def restoring(
    body: Anatomy,
    site: Site,
    layer: int,
    rows: list[int],
    where: tuple[slice | int, slice],
    clean: torch.Tensor,
) -> contextlib.AbstractContextManager:
    """Hooks putting ``clean`` (the clean run's value, (1, T, W)) at ``where`` (positions,
    columns) of the batch's ``rows`` at the site in ``layer``: an :func:`editing` of it."""
    if SITES[site].pattern:
        return _pattern_restoring(body, layer, rows, where, clean)
    positions, columns = where
    value = clean[0, positions, columns]

    def restore(tensor: torch.Tensor) -> torch.Tensor:
        tensor[rows, positions, columns] = value
        return tensor

    return editing(body, site, layer, restore)


Edit = Callable[["torch.Tensor"], "torch.Tensor"]


def editing(body: Anatomy, site: Site | SitePoint, layer: int, edit: Edit) -> contextlib.ExitStack:
    """Hooks putting ``edit`` of the tensor that holds ``site`` in ``layer`` in its place:
    ``edit`` is given a copy of it, (B, T, W), every column (what the layer adds to the
    residual stream, for ``resid_mid``, as the residual itself), and gives it back
    changed. What the user's edits (:mod:`attnviz.pretrained.activations`), the trace,
    the patches and the circuit's ablated nodes put in a run all go through here.
    Numbers the edit leaves as they were stay the run's own, to the last bit."""
    import torch

    point = site if isinstance(site, SitePoint) else SITES[site]
    assert not point.pattern  # a pattern is no module's tensor: set through z
    module = point.module(body, layer)
    sums = point.sums(body, layer)
    stack = contextlib.ExitStack()
    if point.reads_input:

        def edit_input(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            return with_hidden(args, kwargs, edit(hidden_of(args, kwargs).clone()))

        stack.enter_context(hooked(module.register_forward_pre_hook(edit_input, with_kwargs=True)))
        return stack
    entering: list[Any] = [None]

    def enter(_module: Any, args: tuple, kwargs: dict) -> None:
        entering[0] = hidden_of(args, kwargs)

    def edit_output(_module: Any, _args: tuple, output: Any) -> Any:
        own = output_of(output)  # (B, T, W)
        if not sums:
            return with_output(output, edit(own.clone()))
        whole = entering[0] + own  # the residual between the attention and the MLP
        edited = edit(whole.clone())
        # what the attention adds: the edited residual, less the input, where edited
        return with_output(output, torch.where(edited != whole, edited - entering[0], own))

    if sums:
        block = body.blocks[layer]
        stack.enter_context(hooked(block.register_forward_pre_hook(enter, with_kwargs=True)))
    stack.enter_context(hooked(module.register_forward_hook(edit_output)))
    return stack


def hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    """A module's input hidden states, given by position or by name."""
    return args[0] if args else kwargs["hidden_states"]


def with_hidden(args: tuple, kwargs: dict, hidden: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def output_of(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def with_output(output: Any, value: torch.Tensor) -> Any:
    return (value, *output[1:]) if isinstance(output, tuple) else value


def site_width(body: Anatomy, site: Site, record: torch.Tensor) -> tuple[int, int]:
    """(tokens, width) of a layer's record at ``site``: the width its units divide (a
    pattern's are the heads' outputs, z)."""
    if SITES[site].pattern:
        return record.shape[2], body.heads * body.head_size
    return record.shape[1], record.shape[-1]


def _pattern_restoring(
    body: Anatomy,
    layer: int,
    rows: list[int],
    where: tuple[slice | int, slice],
    clean: torch.Tensor,
) -> contextlib.AbstractContextManager:
    """Hooks giving one head, in the batch's ``rows``, its clean attention weights at the
    query ``positions`` of ``where``: its output there set to those weights times the
    pass's own values, z = A v (``clean``: the clean run's weights, (1, H, T, S))."""
    positions, columns = where
    head = (columns.start or 0) // body.head_size
    values: list[Any] = [None]

    def keep_values(_module: Any, _args: tuple, output: Any) -> None:
        values[0] = output_of(output)  # (B, S, W): this pass's own

    def restore(_module: Any, args: tuple) -> tuple:
        value = values[0]
        units = units_of(body, Site.V, layer, value.shape[-1])
        kv = head // (body.heads // units.count)  # the key/value head the head reads
        weights = clean[0, head, positions].to(value.dtype)  # (T, S) or (S)
        z = args[0].clone()  # (B, T, E)
        z[rows, positions, columns] = weights @ value[rows][:, :, units.of(kv)]
        return (z, *args[1:])

    stack = contextlib.ExitStack()
    v_module = SITES[Site.V].module(body, layer)
    stack.enter_context(hooked(v_module.register_forward_hook(keep_values)))
    stack.enter_context(hooked(body.projections[layer].register_forward_pre_hook(restore)))
    return stack


def mlp_written(body: Anatomy, layer: int) -> Any:
    """What adds ``layer``'s MLP output to the residual stream: its post norm where the
    layer has one (Gemma 2 and 3), else the MLP."""
    block = body.blocks[layer]
    return getattr(block, "post_feedforward_layernorm", None) or SITES[Site.MLP].module(body, layer)


# The circuit graph's MLP node: the MLP's output as the residual stream is given it
MLP_WRITTEN = SitePoint(mlp_written, reads_input=False)
# Every head's output together as the residual stream is given it: after the norm that
# follows the attention where the layer has one (Gemma 2 and 3), else the projection's
HEADS_WRITTEN = SitePoint(
    lambda body, layer: body.post_norms[layer] or body.projections[layer], reads_input=False
)
