"""Rank agreement between two lists of figures (a model against another model or
against measurement): Spearman's rho with average ranks for ties, in numpy."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as Spearman wants."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of paired figures (nan under 3 pairs)."""
    if len(a) != len(b):
        raise ValueError(f"spearman needs pairs: {len(a)} figures against {len(b)}")
    if len(a) < 3:
        return float("nan")
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
