"""Small counting helpers shared by the SFT steps: length histograms and first examples of drops."""

from collections import Counter
from collections.abc import Iterable

import numpy as np

HISTOGRAM_BUCKETS = 24  # token-length buckets [2^k, 2^(k+1)) for k < 24, the last one open
MAX_EXAMPLES = 5  # dropped_examples kept per output


def log2_histogram(lengths: Iterable[int] | np.ndarray) -> list[int]:
    """Counts of lengths per bucket [2^k, 2^(k+1)) (lengths of at least 1)."""
    values = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    values = values[values > 0]
    if not len(values):
        return [0] * HISTOGRAM_BUCKETS
    buckets = np.minimum(np.log2(values).astype(np.int64), HISTOGRAM_BUCKETS - 1)
    return [int(n) for n in np.bincount(buckets, minlength=HISTOGRAM_BUCKETS)]


def add_histograms(total: list[int], more: list[int]) -> list[int]:
    return [a + b for a, b in zip(total, more)]


def merged_counts(counts: Iterable[dict]) -> dict[str, int]:
    """Counters from several receipts, added up, keys sorted."""
    total: Counter = Counter()
    for count in counts:
        total.update(count)
    return dict(sorted(total.items()))
