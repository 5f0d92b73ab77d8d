// attnviz's circuit as a graph in SVG, plain JavaScript, nothing fetched: drawn in the
// page's circuit view and on a circuit's own page (a notebook shows it). Names and tokens
// are only ever set with textContent: they are data, never markup.
"use strict";
window.attnvizCircuit = (function () {
  // Signed with `digits` decimals; what rounds to zero is +0.0…, never -0.0….
  function signed(v, digits) {
    const shown = Math.abs(v) < 0.5 * 10 ** -digits ? 0 : v;
    return `${shown >= 0 ? "+" : ""}${shown.toFixed(digits)}`;
  }
  // Draws the circuit `c` (the data attnviz writes of it) into `svg`: `tip` shows an
  // edge's score on hover, and a click on a head calls `onHead(name)`, where given.
  function draw(svg, c, tip, onHead) {
    const ns = svg.namespaceURI; // the page names no address
    const across = 56, down = 22, left = 70, bottom = 20;
    const labels = 110; // room for the MLP column's labels on the right
    const width = left + (c.heads + 2.2) * across + labels, height = bottom + (2 * c.layers + 2.4) * down;
    const px = (x) => left + (x + 0.8) * across, py = (y) => height - bottom - (y + 0.6) * down;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", width); svg.setAttribute("height", height);
    const make = (tag, attributes) => {
      const element = document.createElementNS(ns, tag);
      for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
      return element;
    };
    const where = new Map(c.nodes.map((n) => [n.name, n]));
    const largest = Math.max(...c.edges.map((e) => Math.abs(e[3])), 0) || 1;
    const used = new Set(["input", "logits"]);
    const parts = [];
    for (let layer = 0; layer < c.layers; layer++) {
      const label = make("text", { x: 4, y: py(2 * layer + 1) + 4, class: "axis" });
      label.textContent = `layer ${layer}`;
      parts.push(label);
    }
    for (const [first, then, drawnAt, score] of [...c.edges].reverse()) { // strongest on top
      const from = where.get(first), to = where.get(drawnAt);
      used.add(first); used.add(drawnAt);
      const strength = Math.sign(score) * Math.sqrt(Math.abs(score) / largest); // faint ones seen
      const x0 = px(from.x), y0 = py(from.y) - 4, x1 = px(to.x), y1 = py(to.y) + 4;
      const bend = 0.08 * Math.hypot(x1 - x0, y1 - y0);
      const path = make("path", {
        d: `M${x0},${y0} Q${(x0 + x1) / 2 + bend},${(y0 + y1) / 2} ${x1},${y1}`,
        class: "edge",
        stroke: `rgb(${c.palette[Math.round(((strength + 1) / 2) * 255)].join(",")})`,
        "stroke-width": (0.6 + 4.4 * Math.abs(strength)).toFixed(2),
        "stroke-opacity": 0.85,
      });
      Object.assign(path.dataset, { from: first, to: then, score });
      path.addEventListener("mousemove", (event) => {
        tip.hidden = false;
        tip.textContent = `${first} → ${then}  ${signed(score, 4)}`;
        tip.style.left = `${event.clientX + 12}px`; tip.style.top = `${event.clientY + 12}px`;
      });
      path.addEventListener("mouseleave", () => { tip.hidden = true; });
      parts.push(path);
    }
    for (const node of c.nodes) {
      const kept = used.has(node.name), head = /^a\d+\.h\d+$/.test(node.name);
      const dot = make("circle", {
        cx: px(node.x), cy: py(node.y), r: kept ? 4.5 : 2,
        class: `node${kept ? " used" : ""}${head ? " head" : ""}`,
      });
      dot.dataset.name = node.name;
      if (kept && head && onHead) dot.addEventListener("click", () => onHead(node.name));
      parts.push(dot);
      if (kept) {
        const text = make("text", { x: px(node.x) + 6, y: py(node.y) - 4, class: "label" });
        text.textContent = node.promotes ? `${node.name} →${node.promotes.slice(0, 10)}` : node.name;
        if (head) text.dataset.room = across - 10; // up to the next head's dot
        parts.push(text);
      }
    }
    svg.replaceChildren(...parts);
    for (const text of svg.querySelectorAll("text.label[data-room]")) fit(text, Number(text.dataset.room));
  }

  // A label no wider than `room`: smaller (10px to 7px), then cut at its end; the node it
  // names is there to hover or click (its head opens), so nothing is lost.
  function fit(text, room) {
    for (let size = 9; size >= 7 && text.getComputedTextLength() > room; size -= 1) {
      text.style.fontSize = `${size}px`; // a style: the page's own sets labels' size
    }
    while (text.getComputedTextLength() > room && text.textContent.length > 1) {
      text.textContent = `${text.textContent.slice(0, -2)}…`;
    }
  }

  return { draw, signed };
})();
