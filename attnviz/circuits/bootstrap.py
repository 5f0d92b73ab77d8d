"""Bootstrapped edge scores, as the 2025 MIB circuit-localisation shared task found them
to help (Mueller et al. 2025's benchmark): ``B`` resamples of a dataset's ``n`` pairs,
drawn with replacement, each resample's mean score of every edge, and an edge's score
the mean of its resamples' where every resample gives it the same sign, else 0 (an edge
whose sign turns with the pairs drawn is left out of every selection by |score|).

The draws are reproducible: ``numpy.random.default_rng(RESAMPLE_SEED).multinomial(n,
[1/n] * n, size=B)``, each row how many times each pair is drawn."""

from __future__ import annotations

import numpy as np

RESAMPLE_SEED = 0


def resamples(count: int, pairs: int) -> np.ndarray:
    """(B, n) how many times each of ``pairs`` pairs is drawn in each of ``count``
    resamples."""
    draws = np.random.default_rng(RESAMPLE_SEED)
    return draws.multinomial(pairs, np.full(pairs, 1.0 / pairs), size=count)


def bootstrapped(resampled: np.ndarray, pairs: int) -> np.ndarray:
    """From each resample's summed scores, (B, U, N), or (B, K, U, N) split by span: every
    edge's bootstrapped score, (U, N), or each (edge, span)'s (K, U, N), 0 where its sign
    did not hold in every resample."""
    means = resampled / pairs
    held = (means > 0).all(axis=0) | (means < 0).all(axis=0)
    return np.where(held, means.mean(axis=0), 0.0)
