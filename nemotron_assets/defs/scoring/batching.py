"""Group rows of different lengths into padded batches that waste little compute.

A forward pass over a batch costs ``rows x longest row`` token slots; the slots beyond a row's own length are
padding, computed and thrown away. Sorting rows by length puts similar lengths together. We sort only within a
bounded *window* of rows (the caller's: a few thousand rows of a pool part), so memory stays bounded and results can
be written back in the pool's order after each window.

`plan_batches` walks the window from the longest row down and adds a row to the current batch while

- the batch still fits the token budget: ``(rows + 1) * width <= batch_tokens`` (``width`` = the batch's first,
  longest row), and
- the batch's padding stays below ``max_padding`` of its slots (or is zero).

Because rows come longest first, a row that fails the padding test would fail it for every shorter row too, so the
batch is closed there. Every batch then wastes less than ``max_padding`` of its slots, hence so does the window,
whatever the length distribution: a lone very short row simply gets a batch of its own.
"""

from dataclasses import dataclass

import numpy as np

MAX_PADDING = 0.10


@dataclass(frozen=True)
class Batch:
    """Rows of the window (indices, longest first) and the padded length they share."""

    rows: np.ndarray
    width: int

    @property
    def slots(self) -> int:
        return len(self.rows) * self.width


def plan_batches(lengths: np.ndarray, batch_tokens: int, max_padding: float = MAX_PADDING) -> list[Batch]:
    """Cover every row of the window exactly once (see the module docstring). A row longer than `batch_tokens` gets
    a batch of its own; lengths must be >= 1."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    if len(lengths) and lengths.min() < 1:
        raise ValueError("every row needs at least one token")
    order = np.argsort(-lengths, kind="stable")  # longest first; equal lengths keep window order
    batches: list[Batch] = []
    start, width, real = 0, 0, 0
    for position, row in enumerate(order):
        length = int(lengths[row])
        count = position - start
        if count:
            slots = (count + 1) * width
            padding = slots - real - length
            if slots > batch_tokens or (padding > 0 and padding >= max_padding * slots):
                batches.append(Batch(order[start:position], width))
                count = 0
        if count == 0:
            start, width, real = position, length, 0
        real += length
    if len(order):
        batches.append(Batch(order[start:], width))
    return batches


def padding_fraction(batches: list[Batch], lengths: np.ndarray) -> float:
    """Share of the batches' token slots that are padding (0.0 for no rows)."""
    slots = sum(batch.slots for batch in batches)
    if slots == 0:
        return 0.0
    real = sum(int(np.asarray(lengths)[batch.rows].sum()) for batch in batches)
    return 1.0 - real / slots
