// A circuit's own page (a notebook shows a Circuit so): its faithfulness lines and its
// graph, an edge's score on hover. Plain JavaScript, nothing fetched.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("attnviz-data").textContent);
  const $ = (id) => document.getElementById(id);
  $("circuit-lines").textContent = data.circuit.lines.join("\n");
  window.attnvizCircuit.draw($("circuit"), data.circuit, $("tooltip"));
  window.attnviz = { data };
  document.body.dataset.ready = "true";
})();
