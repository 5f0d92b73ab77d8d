// attnviz's interactive page: plain JavaScript, no library, nothing fetched.
// Token text is only ever set with textContent: it is data, never markup.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("attnviz-data").textContent);
  const [mapCount, T, S] = data.shape;
  const levels = Uint8Array.from(atob(data.levels), (c) => c.charCodeAt(0));
  const lut = data.palette; // 256 × [r, g, b], the colour scale every attnviz picture uses
  const $ = (id) => document.getElementById(id);

  // The maps of each layer, in the order the page offers them: heads, then aggregates.
  const layers = [];
  const byLayer = new Map();
  const global = []; // maps over all layers (rollout, or an aggregate folding layers)
  data.maps.forEach((m, index) => {
    const entry = { ...m, index };
    if (m.layer === null) { global.push(entry); return; }
    if (!byLayer.has(m.layer)) { byLayer.set(m.layer, []); layers.push(m.layer); }
    byLayer.get(m.layer).push(entry);
  });
  if (!layers.length) { layers.push(null); byLayer.set(null, []); }

  const state = { view: data.view, layer: 0, head: 0, hideSpecial: false, checked: new Set([0]), hover: null };
  // Each head's effects on an answer (export --answer): a column tints the model view's
  // frames, from blue (the metric falls) through white (0) to red (it rises).
  const effects = data.effects;
  state.effect = effects ? Object.keys(effects.columns)[0] : null;
  state.sortByEffect = false;
  function effectOf(index) { return effects && state.effect ? effects.columns[state.effect][index] : null; }
  function effectColour(value) {
    const column = effects.columns[state.effect].filter((v) => v !== null);
    const top = Math.max(...column.map(Math.abs), 0);
    const share = top ? value / top : 0;
    return `rgb(${effects.palette[Math.round(((share + 1) / 2) * 255)].join(",")})`;
  }

  function choices() {
    const own = byLayer.get(layers[state.layer]) || [];
    return own.concat(global);
  }
  function label(m) {
    return m.head !== null && m.head !== undefined ? `head ${m.head}` : m.kind;
  }
  function visible(flags, count) {
    const kept = [];
    for (let i = 0; i < count; i++) if (!(state.hideSpecial && flags[i])) kept.push(i);
    return kept.length ? kept : Array.from({ length: count }, (_, i) => i);
  }
  function rawWeight(m, i, j) { return (levels[(m * T + i) * S + j] / 255) * data.scale; }
  // The weights of one map over the visible rows and columns, each row renormalised over
  // the columns kept when special tokens are hidden (as --no-special does).
  function matrix(m) {
    const rows = visible(data.querySpecial, T), cols = visible(data.keySpecial, S);
    const out = rows.map((i) => cols.map((j) => rawWeight(m, i, j)));
    if (state.hideSpecial && data.rowsAreDistributions) {
      for (const row of out) {
        const total = row.reduce((a, b) => a + b, 0);
        if (total > 0) for (let k = 0; k < row.length; k++) row[k] /= total;
      }
    }
    return { rows, cols, out };
  }
  function colour(w, top) {
    const c = lut[Math.max(0, Math.min(255, Math.round((w / (top || 1)) * 255)))];
    return c;
  }
  function fmt(w) { return w.toFixed(2); }
  const signed = window.attnvizCircuit.signed;
  function headColour(k, n) { return `hsl(${Math.round((k * 360) / Math.max(n, 1))}, 70%, 45%)`; }

  // --- controls ---------------------------------------------------------------
  function fillSelects() {
    const layerSelect = $("layer");
    layerSelect.replaceChildren(...layers.map((layer, k) => {
      const o = document.createElement("option");
      o.value = k; o.textContent = layer === null ? "all" : `layer ${layer}`; return o;
    }));
    layerSelect.value = state.layer;
    const headSelect = $("head");
    headSelect.replaceChildren(...choices().map((m, k) => {
      const o = document.createElement("option"); o.value = k; o.textContent = label(m); return o;
    }));
    state.head = Math.min(state.head, choices().length - 1);
    headSelect.value = state.head;
  }
  const views = data.circuit ? ["layer", "model", "head", "circuit"] : ["layer", "model", "head"];
  function setView(view) {
    state.view = view;
    document.body.dataset.view = view;  // the circuit view hides the maps' controls (page.css)
    for (const name of views) {
      $(`view-${name}`).classList.toggle("shown", name === view);
      $(`tab-${name}`).setAttribute("aria-selected", String(name === view));
    }
    draw();
  }
  function draw() {
    fillSelects();
    const rows = data.mode === "cross" ? "target tokens" : "query tokens";
    const cols = data.mode === "cross" ? "source tokens" : "key tokens";
    $("axes").textContent = `${data.model} · ${data.mode} attention · rows: ${rows}, columns: ${cols}`;
    if (state.view === "layer") drawLines();
    if (state.view === "model") drawGrid();
    if (state.view === "head") drawMap();
    if (state.view === "circuit") drawCircuit();
  }

  // --- layer view: lines from query tokens to key tokens, a colour per head -------
  function drawLines() {
    const options = choices();
    const toggles = $("head-toggles");
    toggles.replaceChildren(...options.map((m, k) => {
      const box = document.createElement("label");
      box.style.border = `2px solid ${headColour(k, options.length)}`;
      const input = document.createElement("input");
      input.type = "checkbox"; input.checked = state.checked.has(k); input.dataset.index = k;
      input.addEventListener("change", () => {
        if (input.checked) state.checked.add(k); else state.checked.delete(k);
        drawLines();
      });
      box.append(input, document.createTextNode(label(m)));
      return box;
    }));
    const first = options[state.head];
    const weights = matrix(first.index);
    const tokens = (side, indices, flags, labels) => indices.map((i, k) => {
      const t = document.createElement("div");
      t.className = "token" + (flags[i] ? " special" : "");
      t.dataset.position = k;
      t.textContent = labels[i];
      if (side === "key") { const w = document.createElement("span"); w.className = "w"; t.append(w); }
      return t;
    });
    const queries = tokens("query", weights.rows, data.querySpecial, data.queryTokens);
    const keys = tokens("key", weights.cols, data.keySpecial, data.keyTokens);
    $("queries").replaceChildren(...queries);
    $("keys").replaceChildren(...keys);
    queries.forEach((t, k) => {
      t.addEventListener("mouseenter", () => { state.hover = k; paintLines(); });
      t.addEventListener("mouseleave", () => { state.hover = null; paintLines(); });
    });
    paintLines();
  }
  function paintLines() {
    const options = choices();
    const canvas = $("lines");
    const rowHeight = 18;
    const queries = $("queries").children, keys = $("keys").children;
    const height = Math.max(queries.length, keys.length) * rowHeight;
    canvas.width = 160; canvas.height = height;
    const g = canvas.getContext("2d");
    g.clearRect(0, 0, canvas.width, canvas.height);
    const shown = [...state.checked].filter((k) => k < options.length);
    for (const q of queries) q.classList.toggle("active", Number(q.dataset.position) === state.hover);
    const current = matrix(options[state.head].index).out;
    for (const [k, key] of [...keys].entries()) {
      const w = key.querySelector(".w");
      w.textContent = state.hover === null ? "" : fmt(current[state.hover][k]);
      key.classList.toggle("dim", state.hover !== null && current[state.hover][k] < 0.01);
    }
    for (const k of shown) {
      const weights = matrix(options[k].index).out;
      g.strokeStyle = headColour(k, options.length);
      for (let i = 0; i < weights.length; i++) {
        if (state.hover !== null && i !== state.hover) continue;
        for (let j = 0; j < weights[i].length; j++) {
          const w = weights[i][j];
          if (w < 0.01) continue;
          g.globalAlpha = Math.min(1, w);
          g.lineWidth = 2;
          g.beginPath();
          g.moveTo(0, (i + 0.5) * rowHeight);
          g.lineTo(canvas.width, (j + 0.5) * rowHeight);
          g.stroke();
        }
      }
    }
    g.globalAlpha = 1;
  }

  // --- model view: every map small ------------------------------------------------
  // A cell's width and height: square, except along a side of a few tokens beside many
  // (eight times as many: the last token's row over a long text), drawn at least 40 px
  // long in cells of at most `largest`: a strip, not a line one pixel high.
  function cellSides(rows, columns, cell, largest) {
    const many = Math.max(rows, columns), shortest = Math.min(40, many * cell);
    const side = (n) => (many < 8 * n ? cell : Math.max(cell, Math.min(largest, shortest / n)));
    return [side(columns), side(rows)];
  }
  function paint(canvas, m, cell, largest) {
    const { out } = matrix(m);
    const h = out.length, w = out[0].length;
    const [across, down] = cellSides(h, w, cell, largest);
    canvas.width = w; canvas.height = h;
    canvas.style.width = `${w * across}px`; canvas.style.height = `${h * down}px`;
    const g = canvas.getContext("2d");
    const image = g.createImageData(w, h);
    for (let i = 0; i < h; i++) for (let j = 0; j < w; j++) {
      const c = colour(out[i][j], 1), p = (i * w + j) * 4;
      image.data[p] = c[0]; image.data[p + 1] = c[1]; image.data[p + 2] = c[2]; image.data[p + 3] = 255;
    }
    g.putImageData(image, 0, 0);
    return [across, down];
  }
  function drawGrid() {
    const grid = $("grid");
    const perRow = Math.max(...layers.map((layer) => (byLayer.get(layer) || []).length), global.length, 1);
    const size = Math.max(40, Math.min(110, Math.floor((window.innerWidth - 80) / perRow) - 10));
    const cell = Math.max(1, size / Math.max(T, S));
    grid.style.gridTemplateColumns = `auto repeat(${perRow}, auto)`;
    const items = [];
    const rowsOfMaps = layers.map((layer) => [layer === null ? "" : `L${layer}`, byLayer.get(layer) || []]);
    if (global.length) rowsOfMaps.push(["all", global]);
    rowsOfMaps.forEach(([name, maps], row) => {
      const head = document.createElement("div"); head.className = "row-label"; head.textContent = name;
      items.push(head);
      const order = maps.map((m, k) => [m, k]);
      if (state.sortByEffect) { // largest effect first; maps with none (aggregates) last
        const key = ([m]) => { const v = effectOf(m.index); return v === null ? -Infinity : v; };
        order.sort((a, b) => key(b) - key(a));
      }
      order.forEach(([m, k]) => {
        const figure = document.createElement("figure");
        figure.dataset.index = m.index;
        const canvas = document.createElement("canvas");
        paint(canvas, m.index, cell, 8);
        const caption = document.createElement("figcaption"); caption.textContent = label(m);
        const value = effectOf(m.index);
        if (value !== null) {
          figure.dataset.effect = value;
          canvas.style.border = `3px solid ${effectColour(value)}`;
          caption.textContent += ` · ${signed(value, 3)}`;
        }
        figure.append(canvas, caption);
        const layerIndex = row < layers.length ? row : state.layer;
        if (layerIndex === state.layer && (row < layers.length ? k : k + (byLayer.get(layers[state.layer]) || []).length) === state.head) figure.classList.add("current");
        figure.addEventListener("click", () => {
          state.layer = layerIndex;
          state.head = row < layers.length ? k : (byLayer.get(layers[state.layer]) || []).length + k;
          setView("head");
        });
        items.push(figure);
      });
      for (let k = maps.length; k < perRow; k++) items.push(document.createElement("div"));
    });
    grid.replaceChildren(...items);
  }

  // --- head view: one map with its labels -----------------------------------------
  function drawMap() {
    const m = choices()[state.head];
    const weights = matrix(m.index);
    const canvas = $("map");
    const cell = Math.max(2, Math.min(28, Math.floor(640 / Math.max(weights.rows.length, weights.cols.length))));
    const [across, down] = paint(canvas, m.index, cell, 28);
    const labels = (indices, tokens, vertical) => indices.map((i, k) => {
      const side = vertical ? across : down;
      const every = Math.ceil(12 / side); // labels never overlap: every n-th when cells are small
      const s = document.createElement("span");
      s.textContent = k % every === 0 ? tokens[i] : "";
      if (vertical) s.style.width = `${side}px`; else { s.style.height = `${side}px`; s.style.lineHeight = `${side}px`; }
      return s;
    });
    $("map-columns").replaceChildren(...labels(weights.cols, data.keyTokens, true));
    $("map-rows").replaceChildren(...labels(weights.rows, data.queryTokens, false));
    $("axes").textContent += ` · ${m.title}`;
    canvas.onmousemove = (event) => {
      const box = canvas.getBoundingClientRect();
      const i = Math.floor(((event.clientY - box.top) / box.height) * weights.rows.length);
      const j = Math.floor(((event.clientX - box.left) / box.width) * weights.cols.length);
      if (i < 0 || j < 0 || i >= weights.rows.length || j >= weights.cols.length) return;
      const tip = $("tooltip");
      tip.hidden = false;
      tip.dataset.row = weights.rows[i]; tip.dataset.column = weights.cols[j];
      tip.textContent = `${data.queryTokens[weights.rows[i]]} → ${data.keyTokens[weights.cols[j]]}  ${fmt(weights.out[i][j])}`;
      tip.style.left = `${event.clientX + 12}px`; tip.style.top = `${event.clientY + 12}px`;
    };
    canvas.onmouseleave = () => { $("tooltip").hidden = true; };
  }

  // --- circuit view: the edges that carry the answer (export --answer --corrupt) -----
  // Layers bottom to top, heads across and each layer's MLP in a column of its own, as
  // attnviz's circuit picture; an edge's width by |score|, its colour by sign.
  function openHead(name) {
    const [, layer, head] = name.match(/^a(\d+)\.h(\d+)$/).map(Number);
    const at = layers.indexOf(layer);
    const k = at < 0 ? -1 : (byLayer.get(layer) || []).findIndex((m) => m.head === head);
    if (k < 0) return; // that head's map is not on this page (--layer/--head left it out)
    state.layer = at; state.head = k; state.checked = new Set([k]);
    setView("head");
  }
  function drawCircuit() {
    $("axes").textContent = data.circuit.title;
    $("circuit-lines").textContent = data.circuit.lines.join("\n");
    window.attnvizCircuit.draw($("circuit"), data.circuit, $("tooltip"), openHead);
  }

  // --- wiring -----------------------------------------------------------------------
  for (const button of document.querySelectorAll(".tabs button")) {
    button.addEventListener("click", () => setView(button.dataset.view));
  }
  $("layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); draw(); });
  $("head").addEventListener("change", (e) => { state.head = Number(e.target.value); state.checked = new Set([state.head]); draw(); });
  $("hide-special").addEventListener("change", (e) => { state.hideSpecial = e.target.checked; draw(); });
  document.addEventListener("keydown", (event) => {
    if (event.target.tagName === "SELECT") return; // the selects move with the keys themselves
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    const move = moves[event.key];
    if (!move) return;
    event.preventDefault();
    state.layer = (state.layer + move[0] + layers.length) % layers.length;
    const count = choices().length;
    state.head = (Math.min(state.head, count - 1) + move[1] + count) % count;
    state.checked = new Set([state.head]);
    draw();
  });
  if (effects) {
    const select = $("effect");
    select.replaceChildren(...Object.keys(effects.columns).map((name) => {
      const o = document.createElement("option"); o.value = name; o.textContent = name; return o;
    }));
    select.value = state.effect;
    select.addEventListener("change", (e) => { state.effect = e.target.value; draw(); });
    $("sort-effect").addEventListener("change", (e) => { state.sortByEffect = e.target.checked; draw(); });
    $("effect-controls").hidden = false;
    const estimate = effects.method === "gradient" ? ", estimated from gradients" : "";
    data.notes.push(
      `frames: each head's effect on ${JSON.stringify(effects.answer)} (${effects.metric}${estimate}): ` +
      "red raises it, blue lowers it"
    );
  }
  if (data.circuit) {
    $("tab-circuit").hidden = false;
    data.notes.push("circuit: the edges that carry the answer; hover an edge for its score, click a head for its map");
  }
  $("notes").textContent = data.notes.join(" · ");
  window.attnviz = { data, state, weight: rawWeight, setView };
  setView(state.view);
  document.body.dataset.ready = "true";
})();
