"""The family registry: the identifier a blend entry names with ``family:`` -> its mapper.

Every mapper has the signature ``map_row(raw, split=None) -> NormalizedRow``: the split is passed because some
datasets keep row facts in the split name (Nemotron-Math-v2's reasoning effort, Science's MCQ/RQA).
`normalize_row` is what the Harmony shard asset calls per row.
"""

from collections.abc import Callable
from typing import Any

from nemotron_assets.normalize import (
    llama_nemotron,
    nemotron_agentic,
    nemotron_competitive_programming,
    nemotron_if_chat,
    nemotron_math_proofs,
    nemotron_math_v2,
    nemotron_post_training,
    nemotron_science,
    open_math_reasoning,
    text,
)
from nemotron_assets.normalize.base import NormalizedRow, RowError, to_record

Mapper = Callable[[dict[str, Any], str | None], NormalizedRow]

FAMILIES: dict[str, Mapper] = {
    "nemotron_math_v2": nemotron_math_v2.map_row,
    "nemotron_math_proofs": nemotron_math_proofs.map_row,
    "nemotron_science": nemotron_science.map_row,
    "nemotron_agentic": nemotron_agentic.map_row,
    "nemotron_if_chat": nemotron_if_chat.map_row,
    "nemotron_competitive_programming": nemotron_competitive_programming.map_row,
    "nemotron_post_training": nemotron_post_training.map_row,
    "llama_nemotron": llama_nemotron.map_row,
    "open_math_reasoning": open_math_reasoning.map_row,
    "text": text.map_row,
}


def mapper_for(family: str) -> Mapper:
    """The mapper of `family`; an unknown identifier is a `RowError` on the ``family`` field listing the known ones."""
    try:
        return FAMILIES[family]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise RowError("family", f"unknown family {family!r} (known: {known})") from None


def map_row(family: str, raw: Any, split: str | None = None) -> NormalizedRow:
    """Map one raw row of `family`; a row that is not a JSON object is a `RowError` too."""
    mapper = mapper_for(family)
    if not isinstance(raw, dict):
        raise RowError("<row>", f"expected a JSON object, got {type(raw).__name__}")
    return mapper(raw, split)


def normalize_row(
    family: str, raw: Any, *, dataset: str, split: str | None, file: str | None, row_index: int
) -> dict[str, Any]:
    """One raw row -> one shard record. Raises `RowError` (use `RowError.located` for the dataset/file/row)."""
    return to_record(map_row(family, raw, split), dataset, split, file, row_index)
