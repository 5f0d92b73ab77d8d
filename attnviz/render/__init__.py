"""Renderers: they take AttentionMaps or arrays, never models."""
