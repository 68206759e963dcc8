"""Selections from scores: ``<pool>_easy`` / ``<pool>_hard`` by NLL, ``<pool>_diverse`` by greedy k-center.

**Easy and hard.** Among the rows that have a score (``nll_mean`` not null), the ``k = floor(q * n + 0.5)``
rows with the lowest ``nll_mean`` are easy and the ``k`` with the highest are hard, ``q`` being
``scoring.select_quantile``. Rows are ordered by ``(nll_mean, row)``; easy is the start of that order, hard its end
read backwards (so among equal scores easy takes the earlier rows and hard the later ones). The result is a pure
function of the scores, and with ``q < 0.5``, ``2k <= n``: a row is never both.

A selection is written as a pool of its own (`write_selected_rows`): the pool's rows whose ``id`` is selected, with
all their columns, in the pool's order, so everything that reads a pool reads it.

**Diverse.** Greedy k-center (Gonzalez, 1985) picks rows that cover the embedding space: start from the row
nearest the centroid of all rows (a typical row, and a start that does not depend on row order), then repeatedly
add the row farthest from everything picked so far. Distance is Euclidean between unit vectors,
``sqrt(2 - 2 cos)``: it orders pairs exactly as cosine does and, being a metric, keeps greedy's guarantee that the
largest distance from any row to its nearest pick is at most twice the best possible with ``k`` picks. Ties go to
the earlier row. Cost: ``k`` passes over the ``n x d`` vectors; memory: one distance per row.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from nemotron_assets.defs.scoring.near_duplicates import unit_rows


@dataclass(frozen=True)
class NllSelection:
    """Row indices (into the scored rows), each ordered from the most to the least extreme."""

    easy: np.ndarray
    hard: np.ndarray
    unscored: int  # rows without a score, never selected


def quantile_count(n: int, quantile: float) -> int:
    """How many of `n` rows a quantile selects: ``floor(quantile * n + 0.5)``."""
    if not 0 < quantile < 0.5:
        raise ValueError(f"the quantile must be in (0, 0.5), got {quantile}")
    return math.floor(quantile * n + 0.5)


def select_by_nll(nll_mean: np.ndarray, quantile: float) -> NllSelection:
    """The easy (lowest ``nll_mean``) and hard (highest) rows; NaN means not scored (see the module docstring)."""
    nll_mean = np.asarray(nll_mean, dtype=np.float64)
    scored = np.flatnonzero(~np.isnan(nll_mean))
    k = quantile_count(len(scored), quantile)
    ascending = scored[np.lexsort((scored, nll_mean[scored]))]
    return NllSelection(ascending[:k], ascending[::-1][:k], len(nll_mean) - len(scored))


def greedy_k_center(vectors: np.ndarray, k: int) -> np.ndarray:
    """Indices of ``min(k, n)`` distinct rows in the order greedy k-center picks them (see the module docstring).

    Between unit vectors, farther means a lower cosine, so the loop keeps each row's cosine to its nearest pick and
    takes the row where that is lowest; picked rows are set to +inf so they are never taken twice (duplicates of a
    picked row have cosine 1 and come last)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    units = unit_rows(vectors)
    n = len(units)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = int(np.argmax(units @ units.mean(axis=0)))  # nearest the centroid: the highest dot product with it
    picked = [first]
    nearest = (units @ units[first]).astype(np.float64)
    nearest[first] = np.inf
    for _ in range(min(k, n) - 1):
        far = int(np.argmin(nearest))  # the first of equally far rows
        picked.append(far)
        np.maximum(nearest, units @ units[far], out=nearest)
        nearest[far] = np.inf
    return np.array(picked, dtype=np.int64)


def write_selected_rows(pool_parts: Sequence[str | Path], ids: Sequence[str], out_path: Path,
                        storage_options: dict | None = None) -> int:
    """Stream the pool's rows whose ``id`` is in `ids` (all columns, pool order) into `out_path`; returns the count."""
    scan = pl.scan_parquet([str(p) for p in pool_parts], storage_options=storage_options)
    scan.filter(pl.col("id").is_in(pl.Series(list(ids), dtype=pl.String))).sink_parquet(out_path, compression="zstd")
    return pl.scan_parquet(out_path).select(pl.len()).collect().item()
