"""Shard planning (docs/architecture.md §1): contiguous, order-preserving, byte-balanced, deterministic, never
crashing on skewed sizes. Expected plans below are worked out by hand from the rule "cut at
``k * total_bytes // n`` at the nearest row boundary"."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.sources.plan import FileRange, plan_shards, shard_count_for


def rows_in_order(plan) -> list[tuple[int, int]]:
    """Every (file, row) the plan reads, shard after shard."""
    return [(r.file_index, row) for shard in plan for r in shard.ranges for row in range(r.row_start, r.row_end)]


def all_rows(rows: list[int]) -> list[tuple[int, int]]:
    return [(f, row) for f, count in enumerate(rows) for row in range(count)]


def ranges(plan) -> list[list[tuple[int, int, int]]]:
    return [[(r.file_index, r.row_start, r.row_end) for r in shard.ranges] for shard in plan]


SIZES = st.one_of(st.integers(0, 10), st.integers(0, 10**6), st.integers(10**9, 10**12), st.just(0))
FILES = st.lists(st.tuples(SIZES, st.one_of(st.integers(0, 40), st.just(0), st.integers(1000, 5000))),
                 max_size=8)


@settings(max_examples=300, deadline=None)
@given(files=FILES, extra_shards=st.integers(0, 12), data=st.data())
def test_every_row_in_exactly_one_shard_in_input_order(files, extra_shards, data):
    sizes, rows = [s for s, _ in files], [r for _, r in files]
    total_rows = sum(rows)
    num_shards = data.draw(st.integers(1, max(1, min(total_rows, 60)) + extra_shards))
    plan = plan_shards(sizes, rows, num_shards)
    assert len(plan) == num_shards
    assert [shard.index for shard in plan] == list(range(num_shards))
    assert rows_in_order(plan) == all_rows(rows)  # each row once, concatenation = input order
    for shard in plan:
        assert shard.rows == sum(r.row_end - r.row_start for r in shard.ranges)
        assert shard.empty == (shard.rows == 0)
        for r in shard.ranges:
            assert 0 <= r.row_start < r.row_end <= rows[r.file_index]  # no empty ranges, within the file
        assert [r.file_index for r in shard.ranges] == sorted({r.file_index for r in shard.ranges})
    assert plan_shards(list(sizes), list(rows), num_shards) == plan  # deterministic


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 5000), bytes_per_row=st.integers(1000, 10**6), data=st.data())
def test_uniform_file_shards_are_within_one_row_of_equal(rows, bytes_per_row, data):
    num_shards = data.draw(st.integers(1, rows))
    plan = plan_shards([rows * bytes_per_row], [rows], num_shards)
    low, high = rows // num_shards, -(-rows // num_shards)
    assert all(low <= shard.rows <= high for shard in plan), [shard.rows for shard in plan]


def test_skewed_sizes_100_1_1_into_4_shards():
    # weights 100, 1, 1 (total 102); cuts at 25, 51, 76 bytes. With one row per file the big file's single row
    # ends at byte 100: 25 -> row 0 (0.25 rounds down), 51 -> row 1 (0.51 rounds up), 76 -> row 1.
    plan = plan_shards([100, 1, 1], [1, 1, 1], 4)
    assert ranges(plan) == [[], [(0, 0, 1)], [], [(1, 0, 1), (2, 0, 1)]]
    assert [shard.empty for shard in plan] == [True, False, True, False]


def test_skewed_sizes_100_1_1_with_ten_rows_in_the_big_file():
    # Big file: 10 bytes per row. Cuts 25 -> 2.5 rows -> 3, 51 -> 5.1 -> 5, 76 -> 7.6 -> 8.
    plan = plan_shards([100, 1, 1], [10, 1, 1], 4)
    assert ranges(plan) == [[(0, 0, 3)], [(0, 3, 5)], [(0, 5, 8)], [(0, 8, 10), (1, 0, 1), (2, 0, 1)]]


def test_all_zero_size_files_fall_back_to_rows():
    # Weights become rows 2, 3, 1 (total 6); cuts at rows 2 and 4.
    plan = plan_shards([0, 0, 0], [2, 3, 1], 3)
    assert ranges(plan) == [[(0, 0, 2)], [(1, 0, 2)], [(1, 2, 3), (2, 0, 1)]]


def test_all_zero_files_without_rows_give_empty_shards():
    plan = plan_shards([0, 0], [0, 0], 3)
    assert len(plan) == 3 and all(shard.empty and shard.ranges == () for shard in plan)


def test_single_big_file_is_split_into_contiguous_row_ranges():
    # 100 bytes per row; cuts at 250, 500, 750 bytes = rows 2.5 -> 3, 5, 7.5 -> 8.
    plan = plan_shards([1000], [10], 4)
    assert [shard.ranges for shard in plan] == [
        (FileRange(0, 0, 3),), (FileRange(0, 3, 5),), (FileRange(0, 5, 8),), (FileRange(0, 8, 10),)]


def test_files_are_balanced_by_bytes_not_rows():
    # File 0: 900 bytes over 9 rows, file 1: 900 bytes over 1 row. Two shards: the cut is at byte 900, so
    # the single heavy row of file 1 gets a shard of its own.
    plan = plan_shards([900, 900], [9, 1], 2)
    assert ranges(plan) == [[(0, 0, 9)], [(1, 0, 1)]]


def test_file_without_rows_is_never_in_a_range():
    plan = plan_shards([50, 10**9, 50], [5, 0, 5], 2)
    assert ranges(plan) == [[(0, 0, 5)], [(2, 0, 5)]]


def test_more_shards_than_rows_leaves_empty_shards():
    plan = plan_shards([10, 10], [1, 1], 5)
    assert len(plan) == 5
    assert sum(not shard.empty for shard in plan) == 2
    assert rows_in_order(plan) == [(0, 0), (1, 0)]


@pytest.mark.parametrize(
    ("sizes", "rows", "num_shards", "message"),
    [([1, 2], [1], 1, "one entry per file"), ([1], [1], 0, "num_shards must be >= 1, got 0"),
     ([-1], [1], 1, "must not be negative"), ([1], [-1], 1, "must not be negative")],
)
def test_plan_shards_rejects_bad_arguments(sizes, rows, num_shards, message):
    with pytest.raises(ValueError, match=message):
        plan_shards(sizes, rows, num_shards)


@pytest.mark.parametrize(
    ("total_bytes", "total_rows", "target", "expected"),
    [
        (1000, 100, 300, 4),  # ceil(1000 / 300)
        (600, 100, 300, 2),  # exact multiple: no extra shard
        (601, 100, 300, 3),
        (1000, 2, 300, 2),  # at most one shard per row
        (10, 5, 100, 1),  # smaller than the target
        (0, 0, 100, 1),  # at least one
        (10**12, 10**6, 256 * 10**6, 3907),
    ],
)
def test_shard_count_for(total_bytes, total_rows, target, expected):
    assert shard_count_for(total_bytes, total_rows, target) == expected
