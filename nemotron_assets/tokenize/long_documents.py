"""Encode a batch of texts where some may be huge, with bounded memory and exactly the ids of whole texts.

A text longer than ``LONG_DOCUMENT_CHARS`` is cut at the points ``cuts.Cutter`` proves exact; its pieces are
encoded without the post-processor's template, a few at a time (at most the encoder's ``batch_chars``), and
the template's constant prefix and suffix are put around the concatenated ids once. Memory then follows the
piece size instead of the document size. When the tokenizer forbids cuts, or no line break passes the
check, the text is encoded whole and the reason is counted in ``LongDocuments`` (never silently).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from nemotron_assets.tokenize.cuts import PIECE_CHARS, Cutter
from nemotron_assets.tokenize.encoders import Encoder

LONG_DOCUMENT_CHARS = 1 << 20  # texts longer than ~1 M characters are encoded in pieces
NO_CUT_FOUND = "no line break between two visible characters passed the check"


@dataclass
class LongDocuments:
    """What happened to the long texts of a shard: encoded in pieces, or whole and why."""

    in_pieces: int = 0
    whole: dict[str, int] = field(default_factory=dict)  # reason -> number of texts

    def as_dict(self) -> dict:
        return {"in_pieces": self.in_pieces, "whole": dict(sorted(self.whole.items()))}


def encode_texts(texts: Sequence[str], encoder: Encoder, cutter: Cutter,
                 tally: LongDocuments | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(flat ids, lengths) as ``encoder.encode(texts)`` gives them, long texts encoded in pieces."""
    if all(len(text) <= LONG_DOCUMENT_CHARS for text in texts):
        return encoder.encode(texts)
    tally = tally if tally is not None else LongDocuments()
    parts: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, lengths) of runs of short texts and of long texts
    short: list[str] = []
    for text in texts:
        if len(text) <= LONG_DOCUMENT_CHARS:
            short.append(text)
            continue
        if short:
            parts.append(encoder.encode(short))
            short = []
        ids = encode_long(text, encoder, cutter, tally)
        parts.append((ids, np.array([len(ids)], dtype=np.int64)))
    if short:
        parts.append(encoder.encode(short))
    if len(parts) == 1:  # one huge text alone: no second copy of its ids
        return parts[0]
    return np.concatenate([ids for ids, _ in parts]), np.concatenate([lengths for _, lengths in parts])


def encode_long(text: str, encoder: Encoder, cutter: Cutter, tally: LongDocuments,
                piece_chars: int = PIECE_CHARS) -> np.ndarray:
    """The ids of one long text (template included), in pieces of about ``piece_chars`` when cuts are proven."""
    cuts = cutter.cut_points(text, piece_chars)
    if not cuts:
        reason = cutter.rules.refusal or NO_CUT_FOUND
        tally.whole[reason] = tally.whole.get(reason, 0) + 1
        ids, _ = encoder.encode([text])
        return ids
    tally.in_pieces += 1
    parts: list[np.ndarray] = []
    group: list[str] = []
    group_chars = 0
    for start, end in pairwise([0, *cuts, len(text)]):
        group.append(text[start:end])
        group_chars += end - start
        if group_chars >= encoder.batch_chars or end == len(text):
            ids, _ = encoder.encode(group, add_special_tokens=False)
            parts.append(ids)
            group, group_chars = [], 0
    dtype = parts[0].dtype  # fastokens' uint32 stays uint32: half the memory of int64 for a huge document
    prefix = np.array(cutter.rules.prefix, dtype=dtype)
    suffix = np.array(cutter.rules.suffix, dtype=dtype)
    return np.concatenate([prefix, *parts, suffix])


def check_sample(text: str, cutter: Cutter) -> tuple[str, bool]:
    """A bounded stand-in for ``text`` to compare two encoders on: (text, add_special_tokens).

    A short text stands for itself. A long one is represented by its first piece, encoded as the pieces
    are (without the template); when it has no cut, by its first ``LONG_DOCUMENT_CHARS`` characters. So a
    comparison never holds a huge document's encoding (hf-tokenizers needs ~600 bytes per token).
    """
    if len(text) <= LONG_DOCUMENT_CHARS:
        return text, True
    cuts = cutter.cut_points(text[:LONG_DOCUMENT_CHARS])
    if cuts:
        return text[:cuts[0]], False
    return text[:LONG_DOCUMENT_CHARS], True
