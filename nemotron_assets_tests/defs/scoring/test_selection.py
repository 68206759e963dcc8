"""Easy/hard by NLL quantile and diverse by greedy k-center, checked against independent definitions."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.scoring.selection import greedy_k_center, quantile_count, select_by_nll


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.floats(0, 20, allow_nan=False), st.just(float("nan")),
                                 st.sampled_from([1.0, 2.0])), max_size=60),
       quantile=st.floats(0.01, 0.49))
def test_easy_and_hard_are_the_lowest_and_highest_scored_rows(values, quantile):
    nll = np.array(values, dtype=np.float64)
    selection = select_by_nll(nll, quantile)
    scored = [i for i, v in enumerate(values) if not math.isnan(v)]
    k = math.floor(quantile * len(scored) + 0.5)
    assert len(selection.easy) == len(selection.hard) == k and selection.unscored == len(values) - len(scored)
    assert not set(selection.easy.tolist()) & set(selection.hard.tolist())
    by_value = sorted(scored, key=lambda i: (values[i], i))
    assert selection.easy.tolist() == by_value[:k]
    assert selection.hard.tolist() == sorted(scored, key=lambda i: (-values[i], -i))[:k]


def test_quantile_counts_round_half_up():
    assert [quantile_count(n, 0.2) for n in (0, 1, 2, 3, 5, 10, 12)] == [0, 0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        quantile_count(10, 0.5)


def covering_radius(points: np.ndarray, centers: list[int]) -> float:
    distances = np.linalg.norm(points[:, None, :] - points[None, centers, :], axis=2)
    return float(distances.min(axis=1).max())


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 9), k=st.integers(1, 4), dim=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_greedy_k_center_is_within_twice_the_optimal_radius(n, k, dim, seed):
    vectors = np.random.default_rng(seed).normal(size=(n, dim))
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    picked = greedy_k_center(vectors, k).tolist()
    assert len(picked) == min(k, n) == len(set(picked))
    best = min(covering_radius(units, list(c)) for c in itertools.combinations(range(n), min(k, n)))
    assert covering_radius(units, picked) <= 2 * best + 1e-6


def test_greedy_k_center_picks_are_a_prefix_of_larger_picks():
    vectors = np.random.default_rng(1).normal(size=(200, 16))
    assert greedy_k_center(vectors, 5).tolist() == greedy_k_center(vectors, 20).tolist()[:5]


def test_greedy_k_center_starts_near_the_centroid_and_takes_duplicates_last():
    vectors = np.array([[1, 0], [1, 0.1], [0, 1], [1, 0], [-1, 0.05]], dtype=np.float32)
    picked = greedy_k_center(vectors, 5).tolist()
    assert picked[0] == 1  # the centroid points along (0.2, 0.23): row 1 is nearest among the unit rows
    assert picked[1] == 4 and sorted(picked) == [0, 1, 2, 3, 4] and picked[-1] == 3


def test_a_selection_is_written_as_the_pool_rows_in_pool_order(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nemotron_assets.defs.scoring.selection import write_selected_rows

    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": ["x", "y", "z"]}), tmp_path / "part-00000.parquet")
    pq.write_table(pa.table({"id": ["d", "e"], "text": ["u", "v"]}), tmp_path / "part-00001.parquet")
    parts = [tmp_path / "part-00000.parquet", tmp_path / "part-00001.parquet"]
    count = write_selected_rows(parts, ["e", "a", "c", "missing"], tmp_path / "selected.parquet")
    assert count == 3
    assert pq.read_table(tmp_path / "selected.parquet").to_pylist() == [
        {"id": "a", "text": "x"}, {"id": "c", "text": "z"}, {"id": "e", "text": "v"}]
