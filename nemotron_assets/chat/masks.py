"""Character spans -> a per-token assistant mask, and truncation of an over-long sample.

The mask follows transformers' ``apply_chat_template(..., return_assistant_tokens_mask=True)`` rule exactly, quirks
included, because our ids and masks must equal its output:

- for each trained span ``[start, end)`` in order: the first token is the token holding character ``start``, the
  last one the token holding character ``end - 1`` ("holding" = the first token whose character offsets contain
  it: a character split over several byte-level tokens maps to the first of them);
- a span whose start is not in any token (past the end of the text) stops the loop: later spans are not marked;
- when the last token is None or 0 the span runs to the end of the sequence (transformers tests ``if end_token``).

The char -> token lookup is a `TokenLocator`, so the same rule serves any tokenizer: Hugging Face
``Encoding.char_to_token`` on the reference path, byte offsets on the fast paths (`nemotron_assets.chat.tokenizers`).
It answers all of a sample's span ends in one call, which keeps the fast paths vectorized.
"""

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from nemotron_assets.chat.templates import Span


class TokenLocator(Protocol):
    def tokens_at(self, chars: Sequence[int]) -> list[int | None]:
        """For each character index, the index of the token holding it (None for an index outside the text)."""
        ...


def assistant_mask(n_tokens: int, spans: Sequence[Span], locator: TokenLocator) -> np.ndarray:
    """uint8[n_tokens], 1 on the tokens of the trained spans (transformers' rule, see the module docstring)."""
    return mask_from_span_tokens(n_tokens, locator.tokens_at(span_ends(spans)))


def span_ends(spans: Sequence[Span]) -> list[int]:
    """The characters whose tokens `mask_from_span_tokens` needs: each span's first and last character."""
    return [char for start, end in spans for char in (start, end - 1)]


def mask_from_span_tokens(n_tokens: int, ends: Sequence[int | None]) -> np.ndarray:
    """The mask of `assistant_mask` from the tokens holding `span_ends` (for callers that locate other characters
    in the same `TokenLocator.tokens_at` call)."""
    mask = np.zeros(n_tokens, dtype=np.uint8)
    for first, last in zip(ends[0::2], ends[1::2]):
        if first is None:
            break
        mask[first : last + 1 if last else n_tokens] = 1
    return mask


def truncate_sample(ids: np.ndarray, mask: np.ndarray, max_tokens: int,
                    end_of_turn: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Keep the head of an over-long sample and still end it on the template's end-of-turn tokens.

    A sample of at most `max_tokens` is returned unchanged. Otherwise the first ``max_tokens - len(end_of_turn)``
    tokens are kept and `end_of_turn` appended, untrained (mask 0): the text needs its turn closed, but the model
    did not finish its reply there and must not learn to stop mid-reply. If the kept head already ends with
    `end_of_turn` (the cut falls just after a turn), nothing is appended and the head is cut at `max_tokens`.
    Callers drop a truncated sample whose mask is all zero (nothing left to train on)."""
    if len(ids) != len(mask):
        raise ValueError(f"ids and mask differ in length ({len(ids)} != {len(mask)})")
    if len(ids) <= max_tokens:
        return ids, mask
    eot = np.asarray(end_of_turn, dtype=ids.dtype)
    if len(eot) == 0:
        raise ValueError("truncation needs the template's end-of-turn token ids, got none")
    if max_tokens <= len(eot):
        raise ValueError(f"max_tokens={max_tokens} leaves no room before the {len(eot)} end-of-turn token(s)")
    if np.array_equal(ids[max_tokens - len(eot) : max_tokens], eot):
        return ids[:max_tokens].copy(), mask[:max_tokens].copy()
    head = max_tokens - len(eot)
    new_ids = np.concatenate([ids[:head], eot])
    new_mask = np.concatenate([mask[:head], np.zeros(len(eot), dtype=mask.dtype)])
    return new_ids, new_mask
