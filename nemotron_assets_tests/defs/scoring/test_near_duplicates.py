"""Near-duplicate pairs from blocked matrix products agree with brute force, and never hold the n x n matrix."""

import tracemalloc

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.scoring.near_duplicates import near_duplicate_pairs, write_near_duplicate_report

MARGIN = 1e-5  # float32 products may put a pair this close to the threshold on either side


def brute_force(vectors: np.ndarray, threshold: float) -> tuple[set, set]:
    """(pairs clearly above, pairs clearly below) from the full float64 cosine matrix."""
    units = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    cosine = units @ units.T
    n = len(vectors)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return ({p for p in pairs if cosine[p] >= threshold + MARGIN}, {p for p in pairs if cosine[p] < threshold - MARGIN})


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 40), dim=st.integers(1, 6), block_rows=st.integers(1, 17), seed=st.integers(0, 2**32 - 1),
       duplicates=st.integers(0, 10), threshold=st.floats(-0.5, 0.99))
def test_blocked_pairs_agree_with_brute_force(n, dim, block_rows, seed, duplicates, threshold):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    for _ in range(duplicates if n > 1 else 0):  # exact and scaled copies: cosine 1
        i, j = rng.integers(0, n, size=2)
        vectors[j] = vectors[i] * rng.uniform(0.5, 2.0)
    found = list(near_duplicate_pairs(vectors, threshold, block_rows))
    pairs = [(int(a), int(b)) for block in found for a, b in zip(block.first, block.second)]
    assert len(pairs) == len(set(pairs)) and all(a < b for a, b in pairs)
    assert pairs == sorted(pairs)
    above, below = brute_force(vectors, threshold)
    assert above <= set(pairs) and not (below & set(pairs))
    for block in found:
        assert (block.cosine >= threshold).all()


def test_the_threshold_is_inclusive_and_identical_rows_pair_up():
    vectors = np.array([[1, 0], [1, 0], [0, 1], [2, 0]], dtype=np.float32)
    found = [(int(a), int(b)) for block in near_duplicate_pairs(vectors, 1.0, block_rows=2)
             for a, b in zip(block.first, block.second)]
    assert found == [(0, 1), (0, 3), (1, 3)]


def test_memory_stays_at_a_tile_not_the_full_matrix():
    n, block = 6000, 500
    vectors = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    vectors[5999] = vectors[0]  # one pair across the first and the last block
    tracemalloc.start()
    count = sum(len(pairs) for pairs in near_duplicate_pairs(vectors, 0.999, block_rows=block))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    full_matrix = n * n * 4
    assert peak < full_matrix / 20, f"peak {peak:,} B vs the full matrix {full_matrix:,} B"
    assert count >= 1


def test_the_report_names_both_rows(tmp_path):
    vectors = np.array([[1, 0], [0, 1], [1, 0.01], [0, 1]], dtype=np.float32)
    stats = write_near_duplicate_report(["a", "b", "c", "d"], vectors, 0.95, tmp_path / "near.parquet", block_rows=3)
    rows = pq.read_table(tmp_path / "near.parquet").to_pylist()
    assert [(r["id_a"], r["id_b"], r["row_a"], r["row_b"]) for r in rows] == [("a", "c", 0, 2), ("b", "d", 1, 3)]
    assert rows[1]["cosine"] == pytest.approx(1.0)
    assert stats.pairs == 2 and stats.rows_in_pairs == 4 and stats.rows == 4


def test_a_zero_vector_is_refused():
    with pytest.raises(ValueError, match="row 1 is a zero vector"):
        list(near_duplicate_pairs(np.array([[1.0, 0.0], [0.0, 0.0]]), 0.9))
