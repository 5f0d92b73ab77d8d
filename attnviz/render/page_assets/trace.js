// attnviz's trace page: the layers × positions grid of a causal trace (or layers × heads,
// or layers and heads × positions, at a head's site), plain JavaScript,
// nothing fetched. Token text is only ever set with textContent: it is data, never markup.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("attnviz-data").textContent);
  const $ = (id) => document.getElementById(id);
  const positions = data.columns === null; // else a column per head, labelled
  const rows = data.effect.length, columns = positions ? data.tokens.length : data.columns.length;
  const top = Math.max(...data.effect.map((row) => Math.max(...row.map(Math.abs))), 0);
  // From blue (the metric falls) through white (0) to red (it rises), as attnviz's pictures.
  function colour(value) {
    const share = top ? value / top : 0;
    return data.palette[Math.round(((share + 1) / 2) * 255)];
  }
  const across = Math.max(1, Math.min(28, Math.floor(1000 / columns)));
  const down = 16;
  const canvas = $("trace");
  canvas.width = columns; canvas.height = rows;
  canvas.style.width = `${columns * across}px`; canvas.style.height = `${rows * down}px`;
  const g = canvas.getContext("2d");
  const image = g.createImageData(columns, rows);
  for (let i = 0; i < rows; i++) for (let j = 0; j < columns; j++) {
    const c = colour(data.effect[i][j]), p = (i * columns + j) * 4;
    image.data[p] = c[0]; image.data[p + 1] = c[1]; image.data[p + 2] = c[2]; image.data[p + 3] = 255;
  }
  g.putImageData(image, 0, 0);
  $("trace-rows").replaceChildren(...data.rows.map((label) => {
    const s = document.createElement("span");
    s.textContent = label; s.style.height = `${down}px`; s.style.lineHeight = `${down}px`;
    return s;
  }));
  const every = Math.ceil(12 / across); // labels never overlap: every n-th when cells are small
  $("trace-columns").replaceChildren(...(positions ? data.tokens : data.columns).map((token, k) => {
    const s = document.createElement("span");
    s.textContent = k % every === 0 ? token : ""; s.style.width = `${across}px`;
    return s;
  }));
  // Signed, three decimals; what rounds to zero is +0.000, never -0.000.
  const sign = (v) => {
    const shown = Math.abs(v) < 0.0005 ? 0 : v;
    return `${shown >= 0 ? "+" : ""}${shown.toFixed(3)}`;
  };
  canvas.onmousemove = (event) => {
    const box = canvas.getBoundingClientRect();
    const i = Math.floor(((event.clientY - box.top) / box.height) * rows);
    const j = Math.floor(((event.clientX - box.left) / box.width) * columns);
    if (i < 0 || j < 0 || i >= rows || j >= columns) return;
    const tip = $("tooltip");
    tip.hidden = false;
    tip.dataset.row = data.rows[i]; tip.dataset.column = j;
    const swapped = data.corruptTokens[j] === data.tokens[j] ? "" : ` (corrupted: ${data.corruptTokens[j]})`;
    const where = positions ? `position ${j} ${data.tokens[j]}${swapped}` : data.columns[j];
    tip.textContent = `${data.rows[i]} · ${where}  ${sign(data.effect[i][j])}`;
    tip.style.left = `${event.clientX + 12}px`; tip.style.top = `${event.clientY + 12}px`;
  };
  canvas.onmouseleave = () => { $("tooltip").hidden = true; };
  $("notes").textContent = data.notes.join(" · ");
  window.attnviz = { data };
  document.body.dataset.ready = "true";
})();
