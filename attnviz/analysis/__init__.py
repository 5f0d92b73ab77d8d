"""Analysis on top of AttentionMaps: aggregation and rollout, head statistics, diffs."""
