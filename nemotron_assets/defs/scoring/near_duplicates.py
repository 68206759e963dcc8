"""Near-duplicate pairs: every pair of rows whose embeddings have cosine similarity >= a threshold.

All pairs of ``n`` rows is an ``n x n`` similarity matrix: 40 GB of float32 for 100,000 rows. Instead the rows are
cut into blocks of ``block_rows`` and the matrix is computed one ``block x block`` tile at a time (a matrix product
of two blocks of unit vectors), keeping only the entries at or above the threshold. Only the upper triangle is
visited (tiles with first block <= second block, and ``i < j`` inside diagonal tiles), so each pair is found once,
as ``(i, j)`` with ``i < j``. Memory: the vectors, one tile, and the pairs found.

Pairs come out sorted by ``(i, j)``: the tiles of one block row are gathered and sorted before they are yielded.
Cosines are float32 (a tile's matrix product), so a pair within ~1e-6 of the threshold may fall on either side of
it depending on how the product is blocked; everything else is exact.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BLOCK_ROWS = 2048
REPORT_SCHEMA = pa.schema([("id_a", pa.string()), ("id_b", pa.string()), ("row_a", pa.int64()),
                           ("row_b", pa.int64()), ("cosine", pa.float32())])


@dataclass(frozen=True)
class Pairs:
    """Pairs ``(first[k], second[k])`` of row indices, ``first < second``, and their cosine similarity."""

    first: np.ndarray  # int64
    second: np.ndarray  # int64
    cosine: np.ndarray  # float32

    def __len__(self) -> int:
        return len(self.first)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """The rows scaled to length 1 (float32); a zero row has no direction and is an error."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if vectors.size and (norms == 0).any():
        raise ValueError(f"row {int(np.flatnonzero(norms[:, 0] == 0)[0])} is a zero vector: cosine is undefined")
    return vectors / np.where(norms == 0, 1, norms)


def near_duplicate_pairs(vectors: np.ndarray, threshold: float, block_rows: int = BLOCK_ROWS) -> Iterator[Pairs]:
    """Every pair with cosine >= `threshold`, one block row of the upper triangle at a time (see the module
    docstring)."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    units = unit_rows(vectors)
    n = len(units)
    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        found = [_tile_pairs(units, start, stop, other, min(other + block_rows, n), threshold)
                 for other in range(start, n, block_rows)]
        first = np.concatenate([f.first for f in found])
        second = np.concatenate([f.second for f in found])
        cosine = np.concatenate([f.cosine for f in found])
        order = np.lexsort((second, first))
        yield Pairs(first[order], second[order], cosine[order])


def _tile_pairs(units: np.ndarray, start: int, stop: int, other: int, other_stop: int, threshold: float) -> Pairs:
    tile = units[start:stop] @ units[other:other_stop].T
    hits = tile >= threshold
    if other == start:
        hits = np.triu(hits, k=1)  # the diagonal tile: i < j only
    rows, cols = np.nonzero(hits)
    return Pairs((rows + start).astype(np.int64), (cols + other).astype(np.int64), tile[rows, cols])


@dataclass
class NearDuplicateStats:
    rows: int = 0
    pairs: int = 0
    rows_in_pairs: int = 0  # distinct rows that have at least one near-duplicate
    threshold: float = 0.0


def write_near_duplicate_report(ids: list[str], vectors: np.ndarray, threshold: float, out_path: Path,
                                block_rows: int = BLOCK_ROWS) -> NearDuplicateStats:
    """The pairs as Parquet (`REPORT_SCHEMA`: both ids, both row numbers, the cosine), streamed per block row."""
    if len(ids) != len(vectors):
        raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
    stats = NearDuplicateStats(rows=len(ids), threshold=threshold)
    in_pairs = np.zeros(len(ids), dtype=bool)
    id_array = pa.array(ids, pa.string())
    with pq.ParquetWriter(out_path, REPORT_SCHEMA, compression="zstd") as writer:
        for pairs in near_duplicate_pairs(vectors, threshold, block_rows):
            if not len(pairs):
                continue
            writer.write_table(pa.table({
                "id_a": id_array.take(pairs.first), "id_b": id_array.take(pairs.second),
                "row_a": pairs.first, "row_b": pairs.second, "cosine": pairs.cosine,
            }, schema=REPORT_SCHEMA))
            stats.pairs += len(pairs)
            in_pairs[pairs.first] = True
            in_pairs[pairs.second] = True
    stats.rows_in_pairs = int(in_pairs.sum())
    return stats
