"""A rendered row ready to score: token ids, which tokens are trained, and whether it was cut.

Completion-only scoring reads the trained mask the SFT renderer produces (1 = a token the model is trained to
produce: the assistant turns and their end-of-turn). Token ``t`` is scored by predicting it from tokens ``0..t-1``,
so the first token is never scored, even if trained: nothing comes before it.

A row longer than ``max_tokens`` keeps its first ``max_tokens`` tokens (the context a trainer with that sequence
length would see) and is flagged ``truncated``; its trained tokens past the cut are not scored.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScoringSample:
    ids: np.ndarray  # int64, shape (n,)
    trained: np.ndarray  # bool, shape (n,)
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def tokens_scored(self) -> int:
        """Trained tokens that have a context: every trained token but the first position."""
        return int(self.trained[1:].sum())


def scoring_sample(ids: np.ndarray, trained: np.ndarray, max_tokens: int) -> ScoringSample:
    """Check a rendered row and cut it to `max_tokens` (flagged). `trained` is 0/1 (uint8 from the renderer)."""
    ids = np.asarray(ids)
    trained = np.asarray(trained)
    if ids.ndim != 1 or trained.shape != ids.shape:
        raise ValueError(f"ids and trained mask must be 1-D of the same length, got {ids.shape} and {trained.shape}")
    if len(ids) == 0:
        raise ValueError("a rendered row has no tokens")
    if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0:
        raise ValueError("token ids must be non-negative integers")
    if not np.isin(trained, (0, 1)).all():
        raise ValueError("the trained mask must hold only 0 and 1")
    truncated = len(ids) > max_tokens
    if truncated:
        ids, trained = ids[:max_tokens], trained[:max_tokens]
    return ScoringSample(ids.astype(np.int64), trained.astype(bool), truncated)
