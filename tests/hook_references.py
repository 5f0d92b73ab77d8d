"""References written from plain transformers hooks, autograd and numpy, none of
attnviz's code: what ablation, dla, patching, tracing, the gradient estimates, the
detectors' scores and the needle's retrieval scores are held to, on the tiny models and
SmolLM2. Each takes a model and token ids, and finds what it reads among the model's own
modules (its layers, their attention and MLP, the norms), never by the family's name: a
new family needs only its tiny model's builder."""

from __future__ import annotations

import contextlib
import functools
from unittest import mock

import numpy as np
import torch

# The clean text, its corrupted twin (as many tokens in every tiny tokenizer), the answer
# and the second answer the tiny language models are read with, and their families.
TEXT = "The man walked the dog because"
CORRUPT = "The dog walked the man because"
ANSWER, VERSUS = " it", " the"
FAMILIES = ["gpt2-lm", "llama-lm", "gemma2-lm"]


def layers_of(model):
    """The model's decoder layers: the one list of modules its base model holds."""
    lists = [
        module for module in model.base_model.children() if isinstance(module, torch.nn.ModuleList)
    ]
    assert len(lists) == 1, f"{type(model).__name__} holds {len(lists)} lists of layers"
    return lists[0]


def attention_of(block):
    """A decoder layer's self-attention module (Llama's self_attn, GPT-2's attn)."""
    return getattr(block, "self_attn", None) or block.attn


def output_projection(model, layer):
    attention = attention_of(layers_of(model)[layer])
    return getattr(attention, "o_proj", None) or attention.c_proj


def mlp_input_norm(block):
    """The norm the MLP reads the residual through: its input is the residual stream
    between the attention and the MLP, the very tensor the layer adds the MLP's output to
    (GPT-2's ln_2; Gemma's pre_feedforward_layernorm; Llama's post_attention_layernorm,
    which in Gemma is the attention's post norm)."""
    for name in ("ln_2", "pre_feedforward_layernorm", "post_attention_layernorm"):
        if hasattr(block, name):
            return getattr(block, name)
    raise AssertionError(f"no MLP input norm in {type(block).__name__}")


def site_point(model, site, layer):
    """Where the site is in ``layer``: (module, kind, its columns in the tensor there).
    kind: "pre" (the module's input), "post" (its output) or "in place" (the input of the
    MLP's norm, written in place so that the residual carried past the MLP changes too)."""
    block = layers_of(model)[layer]
    projection = output_projection(model, layer)
    everything = slice(None)
    if site in ("q", "k", "v"):
        attention = attention_of(block)
        if not hasattr(attention, "q_proj"):  # GPT-2's c_attn: q, k and v side by side
            width = model.config.n_embd
            third = "qkv".index(site)
            return attention.c_attn, "post", slice(third * width, (third + 1) * width)
        return getattr(attention, f"{site}_proj"), "post", everything
    return {
        "resid": (block, "pre", everything),
        "attn": (projection, "post", everything),
        "resid_mid": (mlp_input_norm(block), "in place", everything),
        "mlp": (block.mlp, "post", everything),
        "resid_post": (block, "post", everything),
        "z": (projection, "pre", everything),
    }[site]


def site_module(model, site, layer):
    """The module whose input or output the site is."""
    return site_point(model, site, layer)[0]


def head_size(model):
    config = model.config
    heads = getattr(config, "num_attention_heads", None) or config.n_head
    width = getattr(config, "hidden_size", None) or config.n_embd
    return getattr(config, "head_dim", None) or width // heads


@functools.cache
def _tokenizer(model_path):
    """A folder's tokenizer, loaded once per test process (a load costs ~0.4 s)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def token_ids(model_path, text):
    return _tokenizer(model_path)(text, return_tensors="pt")["input_ids"]


def answer_token_id(model_path, text, answer):
    """The answer's first token after the text."""
    tokenizer = _tokenizer(model_path)
    alone = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(text + answer, add_special_tokens=False)["input_ids"][len(alone)]


def metric_of(logits, answer_id, versus_id):
    """The metric of a pass's logits: of the answer (and versus) token, or ``answer_id``
    a function of the last position's logits (the KL from a clean run, say)."""
    if callable(answer_id):
        return float(answer_id(logits[0, -1]))
    last = logits[0, -1].double()
    if versus_id is None:
        return float(last.log_softmax(-1)[answer_id])
    return float(last[answer_id] - last[versus_id])


def graph_metric(last, answer_id, versus_id):
    """The metric of the last position's float32 logits, (vocabulary), kept in the graph."""
    if versus_id is None:
        return last.log_softmax(-1)[answer_id]
    return last[answer_id] - last[versus_id]


def metric_with_hooks(model, ids, answer_id, versus_id, hooks=()):
    """The metric of one forward pass with ``hooks`` ((module, kind, function)) on."""
    handles = []
    try:
        for module, kind, function in hooks:
            if kind == "pre":
                handles.append(module.register_forward_pre_hook(function, with_kwargs=True))
            else:
                handles.append(module.register_forward_hook(function))
        with torch.no_grad():
            return metric_of(model(input_ids=ids).logits, answer_id, versus_id)
    finally:
        for handle in handles:
            handle.remove()


def hidden_of(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def with_hidden(args, kwargs, hidden):
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def recorded_at(model, ids, site):
    """Each layer's tensor at ``site`` in a run on ``ids`` (all its columns), (T, W) per
    layer."""
    kept = {}

    def keeper(layer, kind):
        if kind == "post":
            return lambda _m, _a, out: kept.__setitem__(
                layer, (out[0] if isinstance(out, tuple) else out)[0]
            )
        return lambda _m, args, kwargs: kept.__setitem__(layer, hidden_of(args, kwargs)[0])

    count = len(layers_of(model))
    hooks = []
    for layer in range(count):
        module, kind, _ = site_point(model, site, layer)
        hooks.append((module, "post" if kind == "post" else "pre", keeper(layer, kind)))
    metric_with_hooks(model, ids, 0, None, hooks)
    return [kept[layer].clone() for layer in range(count)]


def restorer(kind, positions, columns, value):
    """A hook putting ``value`` at (positions, columns) of the first row at a site."""
    if kind == "post":

        def restore(_m, _a, out):
            tensor = out[0] if isinstance(out, tuple) else out
            changed = tensor.clone()
            changed[0, positions, columns] = value
            return (changed, *out[1:]) if isinstance(out, tuple) else changed

        return "post", restore
    if kind == "in place":

        def restore(_m, args, kwargs):
            hidden_of(args, kwargs)[0, positions, columns] = value

        return "pre", restore

    def restore(_m, args, kwargs):
        hidden = hidden_of(args, kwargs).clone()
        hidden[0, positions, columns] = value
        return with_hidden(args, kwargs, hidden)

    return "pre", restore


def reference_patch(model, clean_ids, corrupt_ids, answer_id, versus_id, layers=None):
    """The corrupted run's metric, and per head the metric with the head's clean slice of
    its output projection's input put into the corrupted run at every position, less it."""
    clean = recorded_at(model, clean_ids, "z")
    corrupt = metric_with_hooks(model, corrupt_ids, answer_id, versus_id)
    heads = model.config.num_attention_heads
    size = clean[0].shape[-1] // heads
    result = np.zeros((len(clean), heads))
    for layer in range(len(clean)) if layers is None else layers:
        for head in range(heads):
            part = slice(head * size, (head + 1) * size)

            def restore(_m, args, kwargs, layer=layer, part=part):
                changed = args[0].clone()
                changed[0, :, part] = clean[layer][:, part]
                return (changed, *args[1:]), kwargs

            hooks = [(output_projection(model, layer), "pre", restore)]
            result[layer, head] = (
                metric_with_hooks(model, corrupt_ids, answer_id, versus_id, hooks) - corrupt
            )
    return corrupt, result


def reference_trace(
    model,
    clean_ids,
    corrupt_ids,
    answer_id,
    versus_id,
    site,
    layers=None,
    by_position=False,
):
    """Per layer and position (at a head's site: per layer and head, or per layer, head
    and position ``by_position``), the metric with the clean activation at the site put
    into the corrupted run there, less the corrupted run's."""
    clean = recorded_at(model, clean_ids, site)
    corrupt = metric_with_hooks(model, corrupt_ids, answer_id, versus_id)
    tokens = clean_ids.shape[1]
    every = slice(None)
    _, _, first_columns = site_point(model, site, 0)
    width = clean[0][:, first_columns].shape[-1]
    if site in ("q", "k", "v", "z"):
        size = head_size(model)
        heads = range(width // size)
        cells = (
            [(h, p) for h in heads for p in range(tokens)]
            if by_position
            else [(h, None) for h in heads]
        )
        shape = (len(heads), tokens) if by_position else (len(heads),)
    else:
        size, cells, shape = width, [(0, p) for p in range(tokens)], (tokens,)
    result = np.zeros((len(clean), *shape))
    for layer in range(len(clean)) if layers is None else layers:
        module, kind, columns = site_point(model, site, layer)
        start = columns.start or 0
        for index, (head, position) in enumerate(cells):
            part = slice(start + head * size, start + (head + 1) * size)
            positions = every if position is None else position
            value = clean[layer][positions, part]
            hook_kind, hook = restorer(kind, positions, part, value)
            restored = metric_with_hooks(
                model, corrupt_ids, answer_id, versus_id, [(module, hook_kind, hook)]
            )
            result[(layer, *np.unravel_index(index, shape))] = restored - corrupt
    return result


def reference_gradients(model, ids, answer_id, versus_id, site):
    """The metric's gradient with respect to each layer's tensor at the site (all its
    columns), by autograd with the tensors kept (retain_grad), (T, W) per layer."""
    kept = {}

    def keep(layer, tensor):
        tensor.retain_grad()
        kept[layer] = tensor

    model.requires_grad_(True)
    handles = []
    for layer in range(len(layers_of(model))):
        module, kind, _ = site_point(model, site, layer)
        if kind == "post":

            def keep_output(_m, _a, out, layer=layer):
                keep(layer, out[0] if isinstance(out, tuple) else out)

            handles.append(module.register_forward_hook(keep_output))
        else:

            def keep_input(_m, args, kwargs, layer=layer):
                keep(layer, hidden_of(args, kwargs))

            handles.append(module.register_forward_pre_hook(keep_input, with_kwargs=True))
    try:
        last = model(input_ids=ids).logits[0, -1].float()
        graph_metric(last, answer_id, versus_id).backward()
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    return [(kept[layer][0].detach(), kept[layer].grad[0]) for layer in sorted(kept)]


def final_norm(model):
    """The norm beside the layers in the base model (Llama's norm, GPT-2's ln_f)."""
    (norm,) = (
        module for module in model.base_model.children() if "norm" in type(module).__name__.lower()
    )
    return norm


def log_prob(model, ids, answer_id):
    with torch.inference_mode():
        return float(model(input_ids=ids).logits[0, -1].float().log_softmax(-1)[answer_id])


def reference_ablation(model, ids, answer_id, layers, heads, mean=False):
    """One whole forward per head, a hook zeroing (or averaging) its slice."""
    clean = log_prob(model, ids, answer_id)
    size = model.config.hidden_size // model.config.num_attention_heads
    result = np.zeros((len(layers), len(heads)))
    for row, layer in enumerate(layers):
        projection = output_projection(model, layer)
        for column, head in enumerate(heads):
            part = slice(head * size, (head + 1) * size)

            def hook(_module, args, part=part):
                changed = args[0].clone()
                changed[..., part] = args[0][0, :, part].mean(0) if mean else 0
                return (changed,)

            handle = projection.register_forward_pre_hook(hook)
            try:
                result[row, column] = log_prob(model, ids, answer_id) - clean
            finally:
                handle.remove()
    return result


def reference_dla(model, ids, answer_id, layers, heads):
    """From recorded states: each head's slice times its rows (or columns) of the output
    projection's matrix, through the final norm with the clean residual's scale, dotted
    with the answer's row of the unembedding."""
    recorded = {}
    handles = [
        output_projection(model, layer).register_forward_pre_hook(
            lambda _m, args, layer=layer: recorded.__setitem__(layer, args[0][0, -1])
        )
        for layer in layers
    ] + [
        output_projection(model, layer).register_forward_hook(
            lambda _m, _a, out, layer=layer: recorded.__setitem__(("out", layer), out[0, -1])
        )
        for layer in layers
    ]
    norm = final_norm(model)
    handles.append(
        norm.register_forward_pre_hook(lambda _m, args: recorded.__setitem__("x", args[0][0, -1]))
    )
    try:
        log_prob(model, ids, answer_id)
    finally:
        for handle in handles:
            handle.remove()
    x = recorded["x"].double()
    size = model.config.hidden_size // model.config.num_attention_heads
    unembedding = model.lm_head.weight[answer_id].double()
    result = np.zeros((len(layers), len(heads)))
    for row, layer in enumerate(layers):
        projection = output_projection(model, layer)
        for column, head in enumerate(heads):
            part = slice(head * size, (head + 1) * size)
            z = recorded[layer][part].double()
            if type(projection).__name__ == "Conv1D":  # GPT-2's: (in, out)
                written = z @ projection.weight[part, :].double()
            else:  # a Linear: (out, in)
                written = projection.weight[:, part].double() @ z
            post = _post_attention_norm(layers_of(model)[layer])
            if post is not None:  # the attention's output normed before the residual
                out = recorded["out", layer].double()
                written = written / torch.sqrt(out.pow(2).mean() + _eps(post)) * _gain(post)
            if isinstance(norm, torch.nn.LayerNorm):
                centred = written - written.mean()
                normed = centred / torch.sqrt(x.var(unbiased=False) + norm.eps)
                normed = normed * norm.weight.double()
            else:  # an RMS norm
                normed = written / torch.sqrt(x.pow(2).mean() + _eps(norm)) * _gain(norm)
            result[row, column] = float((normed @ unembedding).detach())
    return result


def _post_attention_norm(block):
    """The norm of the attention's output, in a layer that norms each sublayer's output
    too (it then has a post-feedforward norm); None in GPT-2 and Llama."""
    if hasattr(block, "post_feedforward_layernorm"):
        return block.post_attention_layernorm
    return None


def _eps(norm):
    return getattr(norm, "variance_epsilon", None) or norm.eps


def _gain(norm):
    """What an RMS norm multiplies the normed vector by, read from what it makes of a
    vector of ones (whose RMS is 1): w in Llama, 1 + w in Gemma, whichever it is."""
    ones = torch.ones(norm.weight.shape[0], dtype=torch.float64)
    with torch.no_grad():
        out = norm(ones.to(norm.weight.dtype)).double()
    return out * torch.sqrt(torch.tensor(1 + _eps(norm), dtype=torch.float64))


def transformer_lens_score(attention, tokens, detector):
    """One head's (T, T) attention: TransformerLens's score with exclude_bos=True."""
    size = len(tokens)
    same = np.equal.outer(tokens, tokens).astype(float)  # [i, j]: token j is token i
    np.fill_diagonal(same, 0)
    duplicate = np.tril(same)
    if detector == "previous_token":
        pattern = np.zeros((size, size))
        pattern[1:, :-1] = np.eye(size - 1)
    elif detector == "duplicate_token":
        pattern = duplicate
    else:  # induction: the duplicate pattern moved one key to the right
        pattern = np.tril(np.concatenate([np.zeros((size, 1)), duplicate[:, :-1]], axis=1))
    attention = attention.copy()
    attention[:, 0] = 0
    return float((attention * pattern).sum() / attention.sum())


def reference_retrieval(top_keys, written, prompt, answer):
    """The retrieval score in a few lines, as the paper's loop counts it (each answer
    position at most once): a head copies position j at a step when it weighs j most and
    the token written there is the token at j."""
    layers, heads = top_keys.shape[1:]
    scores = np.zeros((layers, heads))
    for layer in range(layers):
        for head in range(heads):
            copied = {
                int(top_keys[step, layer, head])
                for step, token in enumerate(written)
                if top_keys[step, layer, head] in answer
                and prompt[top_keys[step, layer, head]] == token
            }
            scores[layer, head] = len(copied) / len(answer)
    return scores


def prepared(generators, language_models, family, versus=False):
    """A family's extractor, its model, the token ids of TEXT and CORRUPT, and the ids of
    ANSWER (and VERSUS, with ``versus``) after TEXT."""
    extractor = language_models[family]
    path = generators[family]
    ids = token_ids(path, TEXT), token_ids(path, CORRUPT)
    assert ids[0].shape == ids[1].shape, "the corrupted text must keep the token count"
    answer_id = answer_token_id(path, TEXT, ANSWER)
    versus_id = answer_token_id(path, TEXT, VERSUS) if versus else None
    return extractor, extractor.loaded.model, ids, answer_id, versus_id


@contextlib.contextmanager
def eager_weights(model, change):
    """While open, the model runs its eager attention, and each layer's attention weights
    (the output of its softmax, the n-th call being layer n's) pass through
    ``change(layer, weights)``, (1, H, T, S)."""
    real = torch.nn.functional.softmax
    calls = [0]

    def softmax(*args, **kwargs):
        layer, calls[0] = calls[0], calls[0] + 1
        return change(layer, real(*args, **kwargs))

    own = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with mock.patch("torch.nn.functional.softmax", softmax):
            yield
    finally:
        model.set_attn_implementation(own)


def patterns_of(model, ids):
    """Each layer's attention weights in an eager run on ``ids``, (H, T, S) per layer."""
    kept = {}

    def keep(layer, weights):
        kept[layer] = weights[0].detach().clone()
        return weights

    with eager_weights(model, keep), torch.no_grad():
        model(input_ids=ids)
    return [kept[layer] for layer in sorted(kept)]


def reference_pattern_trace(
    model, clean_ids, corrupt_ids, answer_id, versus_id, layers=None, by_position=False
):
    """Per layer and head (and query position ``by_position``), the metric with the head's
    clean attention weights put into the corrupted run's eager attention, less the
    corrupted run's."""
    clean = patterns_of(model, clean_ids)
    corrupt = metric_with_hooks(model, corrupt_ids, answer_id, versus_id)
    heads, tokens = clean[0].shape[0], clean_ids.shape[1]
    shape = (heads, tokens) if by_position else (heads,)
    result = np.zeros((len(clean), *shape))
    for layer in range(len(clean)) if layers is None else layers:
        for cell in np.ndindex(*shape):
            head, rows = cell[0], (cell[1] if by_position else slice(None))

            def change(at, weights, layer=layer, head=head, rows=rows):
                if at != layer:
                    return weights
                weights = weights.clone()
                weights[0, head, rows] = clean[layer][head, rows]
                return weights

            with eager_weights(model, change):
                restored = metric_with_hooks(model, corrupt_ids, answer_id, versus_id)
            result[(layer, *cell)] = restored - corrupt
    return result


def reference_pattern_gradients(model, ids, answer_id, versus_id):
    """Each layer's attention weights in an eager run and the metric's gradient with
    respect to them, by autograd, ((H, T, S), (H, T, S)) per layer."""
    kept = {}

    def keep(layer, weights):
        weights.retain_grad()
        kept[layer] = weights
        return weights

    model.requires_grad_(True)
    try:
        with eager_weights(model, keep):
            last = model(input_ids=ids).logits[0, -1].float()
        graph_metric(last, answer_id, versus_id).backward()
    finally:
        model.zero_grad(set_to_none=True)
    return [(kept[layer][0].detach(), kept[layer].grad[0]) for layer in sorted(kept)]


def stack_layers(model, stack):
    """The layers of an encoder's stack ("encoder": BERT's, BART's, T5's) or of an
    encoder-decoder's decoder ("decoder")."""
    part = getattr(model.base_model, stack)
    for name in ("layer", "layers", "block"):
        if isinstance(getattr(part, name, None), torch.nn.ModuleList):
            return getattr(part, name)
    raise AssertionError(f"no list of layers in {type(part).__name__}")


def stack_site_point(model, stack, cross, site, layer):
    """(module, "pre" or "post", every column) of a site in one layer of an encoder or of
    an encoder-decoder's decoder (its self-attention, or its cross-attention where
    ``cross``), read from each layer's forward code in transformers: ``resid_mid`` is the
    input of the sublayer after the attention's, the residual it reads."""
    block = stack_layers(model, stack)[layer]
    if hasattr(block, "intermediate"):  # BERT: attention (self, output), intermediate, output
        attention, output = block.attention.self, block.attention.output.dense
        after, mlp = block.intermediate, block.output.dense
        q, k, v = attention.query, attention.key, attention.value
    elif hasattr(block, "fc1"):  # BART: self_attn, (encoder_attn,) fc1, fc2, each post-norm
        attention = block.encoder_attn if cross else block.self_attn
        after = block.fc1 if cross or stack == "encoder" else block.encoder_attn
        output, mlp = attention.out_proj, block.fc2
        q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
    else:  # T5: block.layer is [self-attention, (cross-attention,) feed-forward], pre-norm
        sublayer = block.layer[1 if cross else 0]
        attention = sublayer.EncDecAttention if cross else sublayer.SelfAttention
        after, output, mlp = (
            block.layer[2 if cross else 1],
            attention.o,
            block.layer[-1].DenseReluDense,
        )
        q, k, v = attention.q, attention.k, attention.v
    return {
        "resid": (block, "pre"),
        "attn": (output, "post"),
        "resid_mid": (after, "pre"),
        "mlp": (mlp, "post"),
        "resid_post": (block, "post"),
        "q": (q, "post"),
        "k": (k, "post"),
        "v": (v, "post"),
        "z": (output, "pre"),
    }[site]


def recorded_by(model, arguments, points):
    """Each layer's tensor at its (module, "pre" or "post") of ``points`` in one run with
    ``arguments``, (T, W) per layer: no logits read (the model may have no head)."""
    kept = {}
    handles = []
    try:
        for layer, (module, kind) in enumerate(points):
            if kind == "post":

                def keep_output(_m, _a, out, layer=layer):
                    kept[layer] = (out[0] if isinstance(out, tuple) else out)[0].clone()

                handles.append(module.register_forward_hook(keep_output))
            else:

                def keep_input(_m, args, kwargs, layer=layer):
                    kept[layer] = hidden_of(args, kwargs)[0].clone()

                handles.append(module.register_forward_pre_hook(keep_input, with_kwargs=True))
        with torch.no_grad():
            model(**arguments)
    finally:
        for handle in handles:
            handle.remove()
    return [kept[layer] for layer in range(len(points))]
