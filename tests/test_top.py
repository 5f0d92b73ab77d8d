"""attnviz top: the keys each query token weighs most, per head or of an aggregate."""

from __future__ import annotations

import json

from attnviz.cli import app


def test_top_prints_a_line_per_query_token(runner):
    result = runner.invoke(app, ["top", "attention is cool", "-l", "0", "--head", "1", "-k", "2"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# layer 0 · head 1"
    assert [line.split(" → ")[0] for line in lines[1:]] == ["attention", "is", "cool"]
    assert all(line.count(",") == 1 for line in lines[1:])


def test_top_of_an_aggregate(runner):
    result = runner.invoke(app, ["top", "attention is cool", "-a", "rollout", "-f", "json"])
    assert result.exit_code == 0 and result.stderr == ""
    block = json.loads(result.stdout)["maps"][0]
    assert block["title"].startswith("rollout") and block["layer"] is None
