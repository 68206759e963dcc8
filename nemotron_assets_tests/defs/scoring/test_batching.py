"""Length batching: every row once, the token budget kept, padding under the limit in every batch."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.scoring.batching import Batch, padding_fraction, plan_batches


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(1, 5000), max_size=300), batch_tokens=st.integers(1, 20000),
       max_padding=st.sampled_from([0.0, 0.05, 0.1, 0.5]))
def test_batches_cover_every_row_once_within_budget_and_padding(lengths, batch_tokens, max_padding):
    lengths = np.array(lengths, dtype=np.int64)
    batches = plan_batches(lengths, batch_tokens, max_padding)
    rows = np.concatenate([b.rows for b in batches]) if batches else np.zeros(0, dtype=np.int64)
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    for batch in batches:
        batch_lengths = lengths[batch.rows]
        assert batch.width == batch_lengths.max()
        assert batch.slots <= batch_tokens or len(batch.rows) == 1
        padding = batch.slots - batch_lengths.sum()
        assert padding == 0 or padding < max_padding * batch.slots
    if len(lengths):
        assert padding_fraction(batches, lengths) < max(max_padding, 1e-12) or padding_fraction(batches, lengths) == 0


def test_equal_lengths_fill_each_batch_to_the_budget():
    batches = plan_batches(np.full(10, 100), batch_tokens=350)
    assert [len(b.rows) for b in batches] == [3, 3, 3, 1]
    assert padding_fraction(batches, np.full(10, 100)) == 0.0


def test_rows_are_taken_longest_first_and_equal_lengths_keep_their_order():
    batches = plan_batches(np.array([5, 9, 5, 9, 7]), batch_tokens=1000, max_padding=1.0)
    assert len(batches) == 1 and batches[0].rows.tolist() == [1, 3, 4, 0, 2]


def test_a_short_row_after_long_ones_starts_its_own_batch():
    lengths = np.array([1000, 1000, 10])
    batches = plan_batches(lengths, batch_tokens=100_000)
    assert [b.rows.tolist() for b in batches] == [[0, 1], [2]]
    assert batches[1] == Batch(batches[1].rows, 10)


def test_a_row_longer_than_the_budget_gets_a_batch_of_its_own():
    batches = plan_batches(np.array([50, 8, 8]), batch_tokens=16)
    assert [b.rows.tolist() for b in batches] == [[0], [1, 2]]
