"""A rendered row becomes a scoring sample: checked, truncated to max_tokens and flagged."""

import numpy as np
import pytest

from nemotron_assets.defs.scoring.samples import scoring_sample


def test_a_long_row_keeps_its_head_and_is_flagged():
    sample = scoring_sample(np.arange(10), np.array([0, 0, 1, 1, 1, 0, 1, 1, 1, 1], np.uint8), max_tokens=6)
    assert sample.truncated and sample.ids.tolist() == [0, 1, 2, 3, 4, 5]
    assert sample.trained.tolist() == [False, False, True, True, True, False] and sample.tokens_scored == 3


def test_a_row_that_fits_is_not_flagged_and_its_first_token_is_never_scored():
    sample = scoring_sample(np.array([7, 8, 9]), np.array([1, 1, 0], np.uint8), max_tokens=3)
    assert not sample.truncated and sample.tokens_scored == 1


@pytest.mark.parametrize(("ids", "trained", "message"), [
    (np.array([1, 2]), np.array([1]), "same length"),
    (np.array([], dtype=np.int64), np.array([], dtype=np.uint8), "no tokens"),
    (np.array([1, -2]), np.array([0, 1]), "non-negative"),
    (np.array([1.0, 2.0]), np.array([0, 1]), "non-negative integers"),
    (np.array([1, 2]), np.array([0, 2]), "only 0 and 1"),
])
def test_malformed_rows_are_refused(ids, trained, message):
    with pytest.raises(ValueError, match=message):
        scoring_sample(ids, trained, max_tokens=8)
