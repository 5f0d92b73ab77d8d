"""Circuits: which paths between a decoder's heads and MLPs carry an answer. Everything
that is only about circuits lives here and imports downward only (the request, the
choices, the model readers of attnviz.pretrained); the CLI (attnviz.cli.circuit) and
the picture and page (attnviz.render.circuit, render.page) read its results.

The data (standard library and numpy; no torch):

- :mod:`~attnviz.circuits.graph`: the graph, its nodes and edges and their layout.
- :mod:`~attnviz.circuits.options`: what ``circuit`` asks, checked once.
- :mod:`~attnviz.circuits.pairs`: a circuit's pairs as given, each checked.
- :mod:`~attnviz.circuits.scored`: the :class:`ScoredGraph` every reader goes through:
  the graph, each edge's score and the circuit, over the axes it names.
- :mod:`~attnviz.circuits.selections`: a scored graph's circuit, from the ask.
- :mod:`~attnviz.circuits.ilp`: ``--select ilp``'s integer program (scipy's HiGHS).
- :mod:`~attnviz.circuits.circuit`: the :class:`Circuit` result and its JSON document.
- :mod:`~attnviz.circuits.files`: a circuit's JSON file read back, every field checked.
- :mod:`~attnviz.circuits.eap_ig`: hannamw/EAP-IG's graph file, written and read.
- :mod:`~attnviz.circuits.foreign`: each other tool's file of a circuit, its writer.
- :mod:`~attnviz.circuits.mib`: MIB's fractions, CPR and CMD.
- :mod:`~attnviz.circuits.bootstrap`, :mod:`~attnviz.circuits.training`: bootstrapped
  scores; how an optimised mask was learned.

The passes over a model (torch):

- :mod:`~attnviz.circuits.node_outputs`: what each upstream node writes in a run.
- :mod:`~attnviz.circuits.differences`: the scoring record, corrupted less clean.
- :mod:`~attnviz.circuits.edges`: the graph read in a model; exact edge scores.
- :mod:`~attnviz.circuits.norms`: the norms an edge enters a layer through.
- :mod:`~attnviz.circuits.estimates`: EAP and EAP-IG's gradient estimates.
- :mod:`~attnviz.circuits.ablated`: the values zero and mean ablation put on an edge.
- :mod:`~attnviz.circuits.faithfulness`: a circuit's metric, every other edge replaced.
- :mod:`~attnviz.circuits.optimized`: a mask learned for faithfulness.

The driver and its phases:

- :mod:`~attnviz.circuits.phases`: what the passes give back, and the phases.
- :mod:`~attnviz.circuits.passes`: each pass over the pairs, in this process.
- :mod:`~attnviz.circuits.distributed`: the same passes over Ray workers.
- :mod:`~attnviz.circuits.driver`: a circuit over pairs, phase by phase.
- :mod:`~attnviz.circuits.given`: a file's scores in place of the scoring pass.
- :mod:`~attnviz.circuits.cost`, :mod:`~attnviz.circuits.notes`: what a long run will
  cost, and what a run says of the circuit it found.
"""
