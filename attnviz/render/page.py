"""An interactive attention page: one self-contained HTML file, nothing fetched.

Three views of the same maps, switched in the page and named as the pictures'
views: layer (one layer's heads as lines: query tokens left, key tokens right, a
line per pair whose opacity is the weight, a colour per head), model (every layer ×
head as a small heatmap) and head (one heatmap with its labels). Weights travel as
8-bit levels in base64 (a weight is ``level / 255``, within 0.002 of the exact
number) and are decoded in the browser; the script and the style are inlined from this package; a
Content-Security-Policy forbids the page to load anything at all.

With the heads' effects on an answer (``export --answer``), the model view tints each
head's frame by one effect (diverging colours centred on 0) and can sort each layer's
heads by it; with a corrupted twin (``--corrupt``), a fourth view draws the circuit that
carries the answer: its edges (an edge's score on hover), a head's map a click away.

Token text is data: it travels inside a JSON block in which ``<``, ``>`` and
``&`` are escaped, and the script only ever sets it as text, never as markup.
"""

from __future__ import annotations

import base64
import html
import math
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.aggregate import aggregate, unchainable
from attnviz.analysis.grid import pool_labels, pool_map
from attnviz.atomic_files import write_text
from attnviz.choices import Aggregate, Output, View
from attnviz.data_formats import strict_json
from attnviz.outputs import view_for
from attnviz.panels import notes_of, panels_of, query_labels_of
from attnviz.render import palette
from attnviz.render.circuit import circuit_layout, circuit_title, faithfulness_lines
from attnviz.render.effects import diverging_palette, metric_of
from attnviz.render.style import token_label
from attnviz.safe_text import space_visible, spaces_shown

if TYPE_CHECKING:
    from attnviz.analysis.effects import HeadEffects
    from attnviz.analysis.trace import Trace
    from attnviz.circuits.circuit import Circuit
    from attnviz.maps import AttentionMaps

MAX_CELLS = 12_000_000  # all maps' cells together: about 16 MB of base64; more are pooled
NOTEBOOK_CELLS = 1_500_000  # a notebook output stays small: about 2 MB
_POLICY = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


def _asset(name: str) -> str:
    return resources.files("attnviz.render").joinpath("page_assets", name).read_text("utf-8")


def _extra_maps(maps: AttentionMaps) -> list[tuple[str, int | None, np.ndarray]]:
    """The aggregations attnviz computes, as extra "heads": the mean and the max of each
    layer's heads, and the rollout over the layers (where the maps hold every token's row
    over every token, in self or masked attention)."""
    if maps.aggregate is not None:
        return []
    extra: list[tuple[str, int | None, np.ndarray]] = []
    for method in (Aggregate.MEAN, Aggregate.MAX) if len(maps.heads) > 1 else ():
        combined = aggregate(maps, method)
        extra += [
            (method.value, layer, combined.weights[i, 0]) for i, layer in enumerate(maps.layers)
        ]
    if len(maps.layers) > 1 and unchainable(maps) is None:
        extra.append(
            (Aggregate.ROLLOUT.value, None, aggregate(maps, Aggregate.ROLLOUT).weights[0, 0])
        )
    return extra


def _pool_for(panels: int, queries: int, keys: int, budget: int) -> int:
    """The smallest pooling that keeps every map's cells within the budget."""
    pool = 1
    while panels * math.ceil(queries / pool) * math.ceil(keys / pool) > budget:
        pool += 1
    return pool


def _effects_data(panels: list[dict[str, Any]], effects: HeadEffects) -> dict[str, Any]:
    """Each map's effects on the answer by column (None for a map that is no head, or a
    head the effects leave out), in the order of the page's maps."""
    held = {(layer, head) for layer in effects.layers for head in effects.heads}
    names = effects.of(effects.layers[0], effects.heads[0])  # the columns these effects have
    # The page opens on the first: what a corrupted text was given for, where it was.
    first = ["patch"] if "patch" in names else []
    columns: dict[str, list[float | None]] = {
        name: [] for name in [*first, *(name for name in names if name not in first)]
    }
    for panel in panels:
        place = (panel["layer"], panel["head"])
        found = effects.of(*place) if panel["kind"] == "head" and place in held else {}
        for name, values in columns.items():
            values.append(found.get(name))
    on = effects.on
    return {
        "answer": on.answer_token,
        "metric": metric_of(on),
        "method": on.method.value,
        "columns": columns,
        "palette": [list(colour) for colour in diverging_palette()],
    }


def _circuit_data(circuit: Circuit) -> dict[str, Any]:
    """The circuit as the page draws it: each node where the picture puts it (layers
    bottom to top), labelled with the token it promotes; each kept edge's score."""
    at, drawn_at = circuit_layout(circuit)
    index = {name: number for number, name in enumerate(circuit.graph.upstream)}
    promoted = circuit.promoted or ()
    return {
        "title": circuit_title(circuit),
        "lines": faithfulness_lines(circuit),
        "layers": circuit.graph.layers,
        "heads": circuit.graph.heads,
        "nodes": [
            {
                "name": name,
                "x": x,
                "y": y,
                "promotes": spaces_shown(promoted[index[name]])
                if name in index and promoted and name != "input"
                else None,
            }
            for name, (x, y) in at.items()
        ],
        "edges": [
            [first, then, drawn_at[then], float(score)]
            for first, then, score in circuit.kept_edges()
        ],
        "palette": [list(colour) for colour in diverging_palette()],
    }


def page_data(
    maps: AttentionMaps,
    *,
    budget: int = MAX_CELLS,
    view: str = "model",
    effects: HeadEffects | None = None,
    circuit: Circuit | None = None,
) -> dict:
    """What the page's script reads: tokens, flags, every map as 8-bit levels and, where
    given, each head's effects on an answer and the circuit that carries it."""
    panels, matrices = _panels(maps)
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    pool = _pool_for(len(matrices), queries, keys, budget)
    scale = 1.0
    if pool > 1:  # pooled cells hold sums of columns: scale by what is drawn
        matrices = [pool_map(matrix.astype(np.float32), pool) for matrix in matrices]
    if pool > 1 or maps.weighting is not None:  # value-weighted maps have no top of their own
        scale = max(float(matrix.max()) for matrix in matrices) or 1.0
    levels = np.clip(np.rint(np.stack(matrices) / scale * 255), 0, 255).astype(np.uint8)
    query_labels = pool_labels([space_visible(token) for token in query_labels_of(maps)], pool)
    key_labels = pool_labels([space_visible(token) for token in maps.key_tokens], pool)

    def flags(values: list[bool] | None, count: int) -> list[bool]:
        if values is None or pool > 1:
            return [False] * count
        return list(values)

    notes = []
    if pool > 1:
        notes.append(
            f"{queries} × {keys} tokens are pooled by {pool} to keep the page small: a cell "
            "is a group of neighbouring tokens (rows averaged, columns summed)"
        )
    context = notes_of(maps).removeprefix(" · ")
    if context:
        notes.append(context)
    return {
        "model": maps.model,
        "mode": maps.mode.value,
        "text": maps.text,
        "target": maps.target,
        "queryTokens": query_labels,
        "keyTokens": key_labels,
        "querySpecial": flags(maps.query_special, len(query_labels)),
        "keySpecial": flags(maps.key_special, len(key_labels)),
        "maps": panels,
        "shape": list(levels.shape),
        "scale": scale,
        "levels": base64.b64encode(levels.tobytes()).decode("ascii"),
        "pool": pool,
        "notes": notes,
        "view": view,
        "rowsAreDistributions": maps.aggregate not in (Aggregate.MAX, Aggregate.MAX_ALL)
        and maps.weighting is None,
        "palette": [list(palette.rgb(level / 255)) for level in range(256)],
        "effects": None if effects is None else _effects_data(panels, effects),
        "circuit": None if circuit is None else _circuit_data(circuit),
    }


def _panels(maps: AttentionMaps) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Each map the page shows, described, and its matrix: every head's (or the
    aggregate's), then the aggregates the page offers beside them."""
    panels: list[dict[str, Any]] = []
    matrices: list[np.ndarray] = []
    for panel in panels_of(maps):
        kind = "head" if maps.aggregate is None else maps.aggregate.value
        panels.append(
            {"layer": panel.layer, "head": panel.head, "kind": kind, "title": panel.title}
        )
        matrices.append(panel.matrix)
    for method, layer, matrix in _extra_maps(maps):
        where = "all layers" if layer is None else f"layer {layer}"
        title = f"{where} · {method} of heads" if method != "rollout" else "rollout over layers"
        panels.append({"layer": layer, "head": None, "kind": method, "title": title})
        matrices.append(matrix)
    return panels, matrices


def _script_json(data: dict) -> str:
    """JSON that cannot end the script element it sits in, whatever the tokens hold."""
    text = strict_json(data)  # a NaN there would stop the page's script on a SyntaxError
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_html(
    maps: AttentionMaps,
    *,
    budget: int = MAX_CELLS,
    view: View | str = View.MODEL,
    title: str = "",
    effects: HeadEffects | None = None,
    circuit: Circuit | None = None,
) -> str:
    """The whole page for ``maps`` as one string, opening on ``view`` (head, layer or
    model; any other is a usage error); with ``effects``, the heads' effects on an answer
    tint the model view; with ``circuit``, the circuit view draws it."""
    opens = view_for(view, Output.HTML).value
    data = page_data(maps, budget=budget, view=opens, effects=effects, circuit=circuit)
    heading = title or f"{maps.model} · {maps.mode.value} attention"
    return _document(heading, data, "page", uses=("circuit",))


def circuit_page_html(circuit: Circuit) -> str:
    """A circuit's own page, offline and self-contained: its faithfulness lines and its
    graph (the page's circuit view, without the maps), an edge's score on hover."""
    data = {"circuit": _circuit_data(circuit)}
    return _document(circuit_title(circuit), data, "circuit_page", uses=("circuit",))


def trace_page_html(trace: Trace) -> str:
    """A causal trace as one offline page: the layers × positions grid (or layers ×
    heads, or layers and heads × positions) in diverging colours, each cell's row, column
    and effect on hover."""
    on = trace.on
    notes = [
        f"answer {on.answer_token!r} · {metric_of(on)}: clean {on.clean_metric:z.3f}, "
        f"corrupted {on.corrupt_metric:z.3f}",
        "a cell: how much of the metric comes back with the clean activation restored "
        "there (red raises it, blue lowers it)",
    ]
    if on.method.value == "gradient":
        notes.append("estimated from gradients (attribution patching)")
    rows, headers, values = trace.grid()
    data = {
        "tokens": [token_label(token) for token in trace.tokens],
        "corruptTokens": [token_label(token) for token in trace.corrupt_tokens],
        "layers": trace.layers,
        "rows": rows,
        "columns": headers,  # null: the columns are the positions
        "effect": np.round(values.astype(np.float64), 6).tolist(),
        "palette": [list(colour) for colour in diverging_palette()],
        "notes": notes,
    }
    return _document(f"{trace.model} · trace at {trace.site.value}", data, "trace")


def _document(heading: str, data: dict, assets: str, uses: tuple[str, ...] = ()) -> str:
    """A page: the style, the markup and the script of ``assets`` (page, trace or
    circuit_page), the scripts it ``uses`` before it, and ``data`` for them."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{_POLICY}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(heading)}</title><style>{_asset('page.css')}</style></head>"
        f"<body><h1 id='heading'>{html.escape(heading)}</h1>"
        f"{_asset(f'{assets}.html')}"
        f"<script type='application/json' id='attnviz-data'>{_script_json(data)}</script>"
        + "".join(f"<script>{_asset(f'{script}.js')}</script>" for script in (*uses, assets))
        + "</body></html>\n"
    )


def notebook_html(maps: AttentionMaps) -> str:
    """The page in an iframe's ``srcdoc``: no require.js, the same in JupyterLab, the
    classic Notebook, VS Code and Colab; bounded in size."""
    return _framed(page_html(maps, budget=NOTEBOOK_CELLS), 720)


def circuit_notebook_html(circuit: Circuit) -> str:
    """A circuit as a notebook shows it: its one-line header, then its own page framed."""
    height = 142 + 44 * circuit.graph.layers + 18 * len(faithfulness_lines(circuit))
    return f"<p><code>{html.escape(repr(circuit))}</code></p>" + _framed(
        circuit_page_html(circuit), height
    )


def _framed(page: str, height: int) -> str:
    """A page in an iframe's ``srcdoc``, its scripts allowed and nothing else."""
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" '
        f"style='width:100%;height:{height}px;border:1px solid #8884' "
        "sandbox='allow-scripts'></iframe>"
    )


def show_html(
    maps: AttentionMaps, path: str | Path | None = None, *, open_browser: bool = True
) -> Path:
    """Write the page of ``maps`` (to ``path``, or a new file in the temporary folder) and
    open it in the default browser, for scripts; return where it is."""
    import tempfile
    import webbrowser

    if path is None:
        handle, name = tempfile.mkstemp(prefix="attnviz-", suffix=".html")
        os.close(handle)
        path = name
    target = Path(path)
    write_text(page_html(maps), target)  # whole or not at all, as every file attnviz writes
    if open_browser:
        webbrowser.open(target.resolve().as_uri())
    return target
