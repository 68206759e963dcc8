"""Holdout splits and repeat weights for SFT conversations and JSONL rows, by stable hashes.

**Holdout.** A blend's ``holdout: {valid: 0.01, test: 0.01, seed: 42}`` sends each conversation (or JSONL row) to
``train``, ``valid`` or ``test``. The decision depends on one string, the *split key*, and the seed:

    split key  = the text of the first message whose role is ``user``           (`split_key`)
                 content that is not a string is keyed by its canonical JSON (below);
                 a row without a user message is keyed by the canonical JSON of the whole row
    digest     = sha256(utf-8 of f"{seed}\\x00{split key}")      (lone surrogates kept with "surrogatepass")
    x          = the first 8 bytes of digest as a big-endian unsigned integer, 0 <= x < 2**64
    split      = "valid" if x < floor(valid * 2**64)
                 "test"  if x < floor(valid * 2**64) + floor(test * 2**64)
                 "train" otherwise

Canonical JSON is ``json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))``.

Why the first user prompt: every solution of one problem carries the same prompt, so they all land in the same
split and no test problem leaks into training through a sibling solution. Why a hash and not a shuffle: the split of a
row depends on that row alone, so adding rows never moves one, and every process and machine agrees (Python's
``hash()`` is salted per process and is never used here). Datasets listed under the blend's ``valid:`` or ``test:``
lists bypass the hash and go wholly to that split (`assign_split`'s ``fixed``).

**Repeat weights.** In SFT a dataset's ``weight`` is a repeat factor ``w = k + f`` (``k`` whole, ``0 <= f < 1``):
every row is used ``k`` times, and once more when

    u = first 8 bytes of sha256(utf-8 of f"repeat\\x00{seed}\\x00{row key}") as a big-endian integer
    u < floor(f * 2**64)

so a fraction ``f`` of the rows, chosen by hash, gets the extra copy (`repeat_count`). The row key should be the
row's stable id (e.g. its content hash), never its position. The ``repeat`` tag keeps this choice independent of
the holdout choice even with the same seed. Raising ``w`` only ever adds copies: a row kept at ``f`` is kept at
every ``f' > f``.

Everything here is pure and deterministic: the same inputs give the same answer everywhere.
"""

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Split = Literal["train", "valid", "test"]
SPLITS: tuple[Split, ...] = ("train", "valid", "test")
_SCALE = 1 << 64  # hashes are compared as 64-bit fractions of this


@dataclass(frozen=True)
class Holdout:
    """The blend's ``holdout`` settings: the fractions of split keys that go to ``valid`` and ``test``."""

    valid: float = 0.0
    test: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("valid", "test"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"holdout.{name} must be a number between 0 and 1, got {value!r}")
        if self.valid + self.test > 1.0:
            raise ValueError(f"holdout.valid + holdout.test must be <= 1, got {self.valid} + {self.test}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"holdout.seed must be an integer, got {self.seed!r}")


def canonical_json(value: Any) -> str:
    """The one JSON spelling of a value used for hashing: sorted keys, no spaces, unicode kept."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def first_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The content of the first ``user`` message as text, or None when no message is from the user."""
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if content is None:
                return ""
            return content if isinstance(content, str) else canonical_json(content)
    return None


def split_key(messages: Sequence[Mapping[str, Any]] | None, row: Mapping[str, Any] | None = None) -> str:
    """The string a conversation's split depends on: its first user prompt, else the whole row (canonical JSON)."""
    text = first_user_text(messages) if messages else None
    if text is not None:
        return text
    if row is None:
        raise ValueError("a conversation without a user message needs its row to be keyed by")
    return canonical_json(row)


def _fraction_hash(text: str) -> int:
    """The first 8 bytes of sha256(text) as an integer in [0, 2**64): a uniform 64-bit fraction."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big")


def _threshold(fraction: float) -> int:
    """floor(fraction * 2**64), exactly: multiplying a float by a power of two never rounds."""
    return math.floor(fraction * _SCALE)


def holdout_split(key: str, holdout: Holdout) -> Split:
    """The split of one split key under the holdout fractions and seed (see the module docstring)."""
    x = _fraction_hash(f"{holdout.seed}\x00{key}")
    valid_end = _threshold(holdout.valid)
    if x < valid_end:
        return "valid"
    if x < valid_end + _threshold(holdout.test):
        return "test"
    return "train"


def assign_split(key: str, holdout: Holdout | None, fixed: Split | None = None) -> Split:
    """Where a row goes: ``fixed`` when its dataset is listed under the blend's valid/test lists, else by hash.

    Without a ``holdout`` setting every row of a train dataset stays in ``train``.
    """
    if fixed is not None:
        if fixed not in SPLITS:
            raise ValueError(f"unknown split {fixed!r} (expected one of {', '.join(SPLITS)})")
        return fixed
    if holdout is None:
        return "train"
    return holdout_split(key, holdout)


def repeat_count(weight: float, key: str, seed: int) -> int:
    """How many times the row with stable id ``key`` is used at repeat factor ``weight`` (module docstring)."""
    if not (isinstance(weight, int | float) and math.isfinite(weight) and weight >= 0):
        raise ValueError(f"a repeat weight must be a finite number >= 0, got {weight!r}")
    whole = math.floor(weight)
    fraction = weight - whole
    if fraction == 0.0:
        return whole
    extra = _fraction_hash(f"repeat\x00{seed}\x00{key}") < _threshold(fraction)
    return whole + int(extra)
