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


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of paired figures (ties in either list count as neither
    agreeing nor disagreeing; nan under 3 pairs or when either list is constant):
    the share of pairs a model orders as measurement does, less those it
    orders the other way."""
    if len(a) != len(b):
        raise ValueError(f"kendall_tau needs pairs: {len(a)} figures against {len(b)}")
    if len(a) < 3:
        return float("nan")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    n0 = len(i)
    tx, ty = np.count_nonzero(dx == 0), np.count_nonzero(dy == 0)
    denom = np.sqrt(float(n0 - tx) * float(n0 - ty))
    return float(np.sum(dx * dy) / denom) if denom else float("nan")
