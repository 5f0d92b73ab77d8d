"""AttentionMaps in a notebook: an HTML table per map, coloured inline, nothing fetched."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from attnviz.render.palette import ink, rgb

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


def maps_html(maps: AttentionMaps) -> str:
    scale = float(maps.weights.max()) or 1.0
    parts = [f"<div><b>{html.escape(maps.model)}</b> · {html.escape(maps.mode)} attention"]
    for _, _, title, matrix in maps.panels():
        rows = ["<tr><th></th>"]
        rows += [f"<th>{html.escape(token)}</th>" for token in maps.key_tokens]
        rows.append("</tr>")
        for token, row in zip(maps.query_tokens, matrix, strict=True):
            rows.append(f"<tr><th>{html.escape(token)}</th>")
            for weight in row:
                relative = float(weight) / scale
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
