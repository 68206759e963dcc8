"""Shard planning: a pure function from (sorted files, sizes, rows, shard count) to row ranges.

The files, in sorted order, are seen as one long sequence of rows. Each row weighs its file's bytes per
row, and the sequence is cut at ``k * total_bytes // n`` for ``k = 1 .. n-1``, at the nearest row boundary.
So shards are contiguous and byte-balanced, a large file is split by contiguous row ranges (a shard reads
only its range, never every n-th row), and concatenating the shards in order gives back the input order.
Integer arithmetic only: the same inputs give the same plan on every machine. Shards can come out empty
(more shards than rows); they are kept in the plan, marked empty, and left out of blends.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FileRange:
    """Rows ``[row_start, row_end)`` of file number ``file_index`` of the sorted file list."""

    file_index: int
    row_start: int
    row_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


@dataclass(frozen=True)
class ShardPlan:
    index: int
    ranges: tuple[FileRange, ...]

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.ranges)

    @property
    def empty(self) -> bool:
        return self.rows == 0


def shard_count_for(total_bytes: int, total_rows: int, target_shard_bytes: int) -> int:
    """Shards needed to keep each near ``target_shard_bytes``: at least 1, at most one per row."""
    wanted = max(1, math.ceil(total_bytes / target_shard_bytes))
    return max(1, min(wanted, total_rows))


def plan_shards(sizes: list[int], rows: list[int], num_shards: int) -> list[ShardPlan]:
    """Cut the files (already in their final sorted order) into ``num_shards`` contiguous shards."""
    if len(sizes) != len(rows):
        raise ValueError("sizes and rows must have one entry per file")
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if any(s < 0 for s in sizes) or any(r < 0 for r in rows):
        raise ValueError("sizes and rows must not be negative")
    # A file's weight is its size; files without rows weigh nothing. If every file with rows has size 0
    # (only possible in synthetic inputs) rows stand in for bytes so the cuts stay meaningful.
    weights = [s if r > 0 else 0 for s, r in zip(sizes, rows)]
    if sum(weights) == 0:
        weights = list(rows)
    total_weight = sum(weights)
    cuts = [_cut_row(k * total_weight // num_shards, weights, rows) for k in range(1, num_shards)]
    total_rows = sum(rows)
    bounds = [0, *cuts, total_rows]
    file_starts = _prefix_sums(rows)
    return [
        ShardPlan(i, tuple(_ranges_between(bounds[i], bounds[i + 1], rows, file_starts)))
        for i in range(num_shards)
    ]


def _prefix_sums(values: list[int]) -> list[int]:
    out, acc = [], 0
    for v in values:
        out.append(acc)
        acc += v
    return out


def _cut_row(cut_weight: int, weights: list[int], rows: list[int]) -> int:
    """Global row index at which the cumulative weight reaches ``cut_weight`` (rounded to nearest row)."""
    weight_before, rows_before = 0, 0
    for w, r in zip(weights, rows):
        if r > 0 and w > 0 and cut_weight < weight_before + w:
            inside = ((cut_weight - weight_before) * r + w // 2) // w
            return rows_before + min(r, inside)
        weight_before += w
        rows_before += r
    return rows_before


def _ranges_between(start: int, end: int, rows: list[int], file_starts: list[int]) -> list[FileRange]:
    ranges = []
    for i, (first, count) in enumerate(zip(file_starts, rows)):
        lo, hi = max(start, first), min(end, first + count)
        if lo < hi:
            ranges.append(FileRange(i, lo - first, hi - first))
    return ranges
