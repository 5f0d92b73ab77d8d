"""`attnviz explore`: a full-screen explorer over layers, heads and tokens (Textual).

The maps of every layer and head are computed once per sentence, so moving
between heads and layers only redraws. The heatmap is the same rich picture
`show` draws, and `g` the same grid of thumbnails as `show --view grid`; the
side panels reuse `top` and `heads`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from rich.console import Group
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.widgets import Footer, Header, Input, Static

from attnviz.analysis.aggregate import aggregate
from attnviz.analysis.heads import head_statistics
from attnviz.atomic_files import open_output
from attnviz.choices import Aggregate, Mode, Output, View
from attnviz.head_columns import SUMMED, Needs
from attnviz.maps import AttentionMaps
from attnviz.panels import panels_of
from attnviz.render.image import Painter
from attnviz.render.style import Style
from attnviz.render.terminal import render
from attnviz.render.terminal_grid import render_grid
from attnviz.safe_text import spaces_shown

# The statistics the side panel lists: a text's own (no detectors' probe, no span).
EXPLORED = [column for column in SUMMED if not column.detector and column.needs is not Needs.SPAN]

MIN_WIDTH, MIN_HEIGHT = 60, 16
SIDE_WIDTH = 38
AGGREGATES = (None, Aggregate.MEAN, Aggregate.MAX, Aggregate.ROLLOUT)  # what `m` cycles through
KEYS_HELP = """\
←/→  previous/next head        ↑/↓  previous/next layer
g    every layer × head        m    aggregate: none, mean, max, rollout
v    weights in the cells      Tab/Shift-Tab  move the query cursor
/    type a new sentence       e    export the view as a PNG
?    this help                 q    quit"""


@dataclass
class Explored:
    """What the explorer shows of its maps: a layer and a head (positions in
    ``maps.layers`` and ``maps.heads``), one map or the grid of them all, an aggregate or
    none, the weights in the cells or not, and the query row under the cursor."""

    maps: AttentionMaps
    layer: int = 0
    head: int = 0
    grid: bool = False
    aggregate_index: int = 0  # in AGGREGATES
    values: bool = False
    cursor: int = 0  # the selected query token

    # What a key changes (ExploreApp.action_show): each by a step, wrapping around.
    def step_head(self, step: int) -> None:
        self.head = (self.head + step) % len(self.maps.heads)

    def step_layer(self, step: int) -> None:
        self.layer = (self.layer + step) % len(self.maps.layers)

    def step_cursor(self, step: int) -> None:
        self.cursor = (self.cursor + step) % len(self.maps.query_tokens)

    def toggle_grid(self, _step: int) -> None:
        self.grid = not self.grid

    def toggle_values(self, _step: int) -> None:
        self.values = not self.values

    def next_aggregate(self, step: int) -> None:
        self.aggregate_index = (self.aggregate_index + step) % len(AGGREGATES)
        if self.aggregate_method is Aggregate.ROLLOUT and self.maps.mode is Mode.CROSS:
            self.aggregate_index = 0  # rollout needs self or masked attention

    @property
    def aggregate_method(self) -> Aggregate | None:
        return AGGREGATES[self.aggregate_index]

    def view(self) -> AttentionMaps:
        """The maps on screen: one head, a layer's heads, or an aggregate."""
        layer = self.maps.layers[self.layer]
        if self.aggregate_method is Aggregate.ROLLOUT:
            return aggregate(self.maps, Aggregate.ROLLOUT)
        if self.aggregate_method is not None:
            return aggregate(self.maps.select(layers=[layer]), self.aggregate_method)
        if self.grid:
            return self.maps
        return self.maps.select(layers=[layer], heads=[self.maps.heads[self.head]])

    def view_name(self) -> str:
        """What is on screen, for a file name: views never share one."""
        layer = self.maps.layers[self.layer]
        if self.aggregate_method is Aggregate.ROLLOUT:
            return "rollout"
        if self.aggregate_method is not None:
            return f"L{layer}-{self.aggregate_method.value}"
        if self.grid:
            return "grid"
        return f"L{layer}-H{self.maps.heads[self.head]}"

    def position(self) -> str:
        layer = self.maps.layers[self.layer]
        if self.aggregate_method is Aggregate.ROLLOUT:
            where = "rollout over all layers"
        elif self.aggregate_method:
            where = f"layer {layer} · {self.aggregate_method} of heads"
        elif self.grid:
            where = f"every layer × head · layer {layer} · head {self.maps.heads[self.head]} marked"
        else:
            where = f"layer {layer} · head {self.maps.heads[self.head]}"
        return f"{self.maps.model} · {self.maps.mode} · {where}"

    def top_panel(self, view: AttentionMaps) -> Group:
        query = self.maps.query_tokens[self.cursor]
        if self.aggregate_method is None:  # the current head, in the grid too
            matrix = self.maps.head(self.maps.layers[self.layer], self.maps.heads[self.head])
        else:
            matrix = next(panels_of(view)).matrix
        row = matrix[self.cursor]
        order = np.argsort(-row, kind="stable")[:8]
        lines = [Text(f"where {spaces_shown(query)!r} looks", style="bold")]
        peak = float(row[order[0]]) or 1.0
        for index in order:
            bar = "█" * max(1, round(float(row[index]) / peak * 14))
            label = spaces_shown(self.maps.key_tokens[index])[:12]
            lines.append(Text(f"{label:>12} {bar:<14} {row[index]:.2f}"))
        return Group(*lines)

    def stats_panel(self) -> Group:
        layer, head = self.maps.layers[self.layer], self.maps.heads[self.head]
        stats = head_statistics(self.maps.select(layers=[layer], heads=[head]))[0]
        lines = [Text(f"layer {layer} · head {head}", style="bold")]
        for name in EXPLORED:
            value = stats[name]
            lines.append(Text(f"{name:>9}  {'–' if value is None else f'{value:z.3f}'}"))
        lines.append(Text(f"{'top key':>9}  {spaces_shown(stats.top_key)}"))
        return Group(*lines)


class ExploreApp(App[None]):
    """Step through the heads of one input's attention maps with the keyboard."""

    TITLE = "attnviz explore"
    CSS = f"""
    #body {{ height: 1fr; }}
    #map {{ width: 1fr; }}
    #side {{ width: {SIDE_WIDTH}; padding: 0 1; border-left: solid $primary; }}
    #top {{ height: auto; margin-bottom: 1; }}
    #sentence {{ display: none; dock: bottom; }}
    #sentence.open {{ display: block; }}
    #too-small {{ display: none; width: 100%; height: 100%; content-align: center middle; }}
    .cramped #too-small {{ display: block; }}
    .cramped #body {{ display: none; }}
    """
    BINDINGS: ClassVar = [
        Binding("left", "show('step_head', -1)", "head -"),
        Binding("right", "show('step_head', 1)", "head +"),
        Binding("up", "show('step_layer', -1)", "layer -"),
        Binding("down", "show('step_layer', 1)", "layer +"),
        Binding("g", "show('toggle_grid')", "grid"),
        Binding("m", "show('next_aggregate')", "aggregate"),
        Binding("v", "show('toggle_values')", "values"),
        Binding("tab", "show('step_cursor', 1)", "query +", priority=True),
        Binding("shift+tab", "show('step_cursor', -1)", "query -", priority=True),
        Binding("slash", "sentence", "new text"),
        Binding("e", "export", "export PNG"),
        Binding("question_mark", "help", "keys"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        maps: AttentionMaps,
        compute: Callable[[str], AttentionMaps],
        export_folder: Path = Path("."),
    ) -> None:
        super().__init__()
        self.shown = Explored(maps)
        self.compute = compute  # text -> maps of every layer and head
        self.export_folder = export_folder
        self.exported: list[Path] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with VerticalScroll(id="map", can_focus=False):
                yield Static(id="heatmap")
            with Vertical(id="side"):
                yield Static(id="top")
                yield Static(id="stats")
        yield Static(
            f"The terminal is too small: attnviz explore needs {MIN_WIDTH} × {MIN_HEIGHT}.",
            id="too-small",
        )
        yield Input(
            placeholder="a new sentence, then Enter (Esc to cancel)", id="sentence", disabled=True
        )
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()

    def on_resize(self, event: events.Resize) -> None:
        # The event's size: the app's own is still the size before this resize.
        self.redraw(event.size)

    def redraw(self, size: Size | None = None) -> None:
        width, height = size or self.size
        cramped = width < MIN_WIDTH or height < MIN_HEIGHT
        self.set_class(cramped, "cramped")
        if cramped:
            return
        shown = self.shown
        view = shown.view()
        map_width = max(20, width - SIDE_WIDTH - 3)
        if shown.grid and shown.aggregate_method is None:  # as show --view grid draws it
            highlight = (shown.maps.layers[shown.layer], shown.maps.heads[shown.head])
            picture = render_grid(
                view, width=map_width, height=height - 2, use_colour=True, highlight=highlight
            )
        else:
            picture = render(
                view,
                width=map_width,
                use_colour=True,
                values=shown.values,
                highlight_query=shown.cursor,
            )
        self.query_one("#heatmap", Static).update(picture)
        self.query_one("#top", Static).update(shown.top_panel(view))
        self.query_one("#stats", Static).update(shown.stats_panel())
        self.sub_title = shown.position()

    # --- keys ----------------------------------------------------------------------------

    def action_show(self, change: str, step: int = 1) -> None:
        """A key's change of what is shown (:class:`Explored`'s ``change``, by ``step``),
        then the screen drawn again."""
        getattr(self.shown, change)(step)
        self.redraw()

    def action_help(self) -> None:
        self.notify(KEYS_HELP, title="keys", timeout=10)

    def action_sentence(self) -> None:
        field = self.query_one("#sentence", Input)
        field.disabled = False
        field.add_class("open")
        field.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value
        self._close_sentence()
        if text.strip():
            self.query_one("#heatmap", Static).loading = True
            self.run_worker(lambda: self._recompute(text), thread=True, exclusive=True)

    def key_escape(self) -> None:
        self._close_sentence()

    def _close_sentence(self) -> None:
        field = self.query_one("#sentence", Input)
        field.value = ""
        field.remove_class("open")
        field.disabled = True
        self.set_focus(None)

    def _recompute(self, text: str) -> None:
        try:
            maps = self.compute(text)
        except Exception as error:  # a bad sentence: say why, keep the current maps
            self.call_from_thread(self.notify, str(error), severity="error")
        else:
            self.call_from_thread(self._show_new, maps)
        finally:
            self.call_from_thread(setattr, self.query_one("#heatmap", Static), "loading", False)

    def _show_new(self, maps: AttentionMaps) -> None:
        self.shown.maps = maps
        self.shown.cursor = 0
        self.redraw()

    def action_export(self) -> None:
        view = self.shown.view()
        kind = View.HEAD
        if self.shown.grid and self.shown.aggregate_method is None:
            kind = View.MODEL
        elif view.weights.shape[1] > 1:
            kind = View.LAYER
        _, data = next(Painter().files(view, kind, Output.PNG, Style()))
        path = self.export_folder / f"attnviz-{self.shown.view_name()}.png"
        with open_output(path, binary=True) as out:
            out.write(data)
        self.exported.append(path)
        self.notify(f"saved {path}")
