"""AttentionMaps in a notebook: an HTML table per map, coloured inline, nothing fetched.

The page is bounded: long inputs are pooled (as the terminal pools them) and
only as many maps are shown as fit a budget of cells, with a line saying so.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from attnviz.render.palette import ink, rgb
from attnviz.render.terminal import pool_labels, pool_map

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps

MAX_TOKENS = 48  # per side of a map; more are pooled
MAX_CELLS = 20_000  # over all maps shown: about 1.5 MB of HTML


def maps_html(maps: AttentionMaps) -> str:
    tokens = max(len(maps.query_tokens), len(maps.key_tokens))
    pool = math.ceil(tokens / MAX_TOKENS) if tokens > MAX_TOKENS else 1
    queries = pool_labels(maps.query_labels(), pool)
    keys = pool_labels(maps.key_tokens, pool)
    panels = list(maps.panels())
    shown = max(1, min(len(panels), MAX_CELLS // max(1, len(queries) * len(keys))))
    scale = float(maps.weights.max()) if maps.weights.size else 1.0
    if pool > 1:
        scale = max(float(pool_map(panel.matrix, pool).max()) for panel in panels[:shown])
    parts = [f"<div><b>{html.escape(maps.model)}</b> · {html.escape(maps.mode)} attention"]
    notes = []
    if pool > 1:
        notes.append(
            f"every {pool} neighbouring tokens pooled into one cell (rows averaged, columns summed)"
        )
    if shown < len(panels):
        notes.append(
            f"showing {shown} of {len(panels)} maps: pick others with "
            "maps.select(layers=[…], heads=[…])"
        )
    parts += [f"<p style='margin:2px 0'><i>{html.escape(note)}</i></p>" for note in notes]
    for _, _, title, matrix in panels[:shown]:
        rows = ["<tr><th></th>"]
        rows += [f"<th>{html.escape(token)}</th>" for token in keys]
        rows.append("</tr>")
        for token, row in zip(queries, pool_map(matrix, pool), strict=True):
            rows.append(f"<tr><th>{html.escape(token)}</th>")
            for weight in row:
                relative = float(weight) / scale if scale > 0 else 0.0
                rows.append(
                    f'<td style="background:rgb{rgb(relative)};color:{ink(relative)};'
                    f'padding:2px 4px" title="{weight:.4f}">{weight:.2f}</td>'
                )
            rows.append("</tr>")
        parts.append(
            f"<table style='display:inline-block;margin:4px;font-size:80%'>"
            f"<caption>{html.escape(title)}</caption>{''.join(rows)}</table>"
        )
    parts.append("</div>")
    return "".join(parts)
