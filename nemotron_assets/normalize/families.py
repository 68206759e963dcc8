"""The family registry: the identifier a blend entry names with ``family:`` -> its mapper.

Every mapper has the signature ``map_row(raw, split=None, fields=SourceFields()) -> NormalizedRow | Skipped``: the
split is passed because some datasets keep row facts in the split name (Nemotron-Math-v2's reasoning effort,
Science's MCQ/RQA), the fields because a blend entry may name other columns for the conversation
(``messages_field``, ``tools_field``; only families that read a conversation column accept them).
`normalize_row` is what the Harmony shard builder calls per row.

Versions: each family module has a ``MAPPER_VERSION`` and the shared code (canonical form, Harmony rendering,
record columns) has `RECORD_VERSION`; each is bumped whenever its output changes. `mapper_version` is their sum:
versions only go up, so the sum changes whenever either does, and a receipt that records it is stale exactly when
the code would write different rows.
"""

from collections.abc import Callable
from dataclasses import dataclass
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
    openai_chat,
    text,
)
from nemotron_assets.normalize.base import NormalizedRow, RowError, Skipped, SourceFields
from nemotron_assets.normalize.record import to_record

#: Version of the rules every family shares (``canonical.py``, ``to_harmony.py``, ``record.py``,
#: ``formats/harmony.py``). Bump it when they change a normalized row.
RECORD_VERSION = 2

Mapper = Callable[[dict[str, Any], str | None, SourceFields], NormalizedRow | Skipped]


@dataclass(frozen=True)
class Family:
    map_row: Mapper
    version: int
    reads_messages: bool  # reads a conversation column, so the blend's messages_field / tools_field apply


FAMILIES: dict[str, Family] = {
    "nemotron_math_v2": Family(nemotron_math_v2.map_row, nemotron_math_v2.MAPPER_VERSION, True),
    "nemotron_math_proofs": Family(nemotron_math_proofs.map_row, nemotron_math_proofs.MAPPER_VERSION, True),
    "nemotron_science": Family(nemotron_science.map_row, nemotron_science.MAPPER_VERSION, True),
    "nemotron_agentic": Family(nemotron_agentic.map_row, nemotron_agentic.MAPPER_VERSION, True),
    "nemotron_if_chat": Family(nemotron_if_chat.map_row, nemotron_if_chat.MAPPER_VERSION, True),
    "nemotron_competitive_programming": Family(
        nemotron_competitive_programming.map_row, nemotron_competitive_programming.MAPPER_VERSION, True
    ),
    "nemotron_post_training": Family(nemotron_post_training.map_row, nemotron_post_training.MAPPER_VERSION, True),
    "llama_nemotron": Family(llama_nemotron.map_row, llama_nemotron.MAPPER_VERSION, True),
    "open_math_reasoning": Family(open_math_reasoning.map_row, open_math_reasoning.MAPPER_VERSION, False),
    "openai_chat": Family(openai_chat.map_row, openai_chat.MAPPER_VERSION, True),
    "text": Family(text.map_row, text.MAPPER_VERSION, False),
}


def family(name: str) -> Family:
    """The family `name`; an unknown identifier is a `RowError` on the ``family`` field listing the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise RowError("family", f"unknown family {name!r} (known: {known})") from None


def mapper_version(name: str) -> int:
    """The version of everything that decides a normalized row of family `name` (see the module docstring)."""
    return RECORD_VERSION + family(name).version


def check_fields(name: str, fields: SourceFields) -> None:
    """Refuse ``messages_field`` / ``tools_field`` for a family that reads no conversation column (they would be
    silently ignored): a `RowError` naming the setting."""
    if family(name).reads_messages:
        return
    for setting, value in (("messages_field", fields.messages), ("tools_field", fields.tools)):
        if value is not None:
            raise RowError(setting, f"family {name!r} does not read a conversation column, so {setting} "
                                    f"{value!r} would be ignored; remove it")


def map_row(name: str, raw: Any, split: str | None = None, fields: SourceFields = SourceFields()
            ) -> NormalizedRow | Skipped:
    """Map one raw row of family `name`; a row that is not a JSON object is a `RowError` too."""
    mapper = family(name).map_row
    if not isinstance(raw, dict):
        raise RowError("<row>", f"expected a JSON object, got {type(raw).__name__}")
    return mapper(raw, split, fields)


def normalize_row(
    name: str, raw: Any, *, dataset: str, split: str | None, file: str | None, row_index: int,
    fields: SourceFields = SourceFields(),
) -> dict[str, Any] | Skipped:
    """One raw row -> one shard record, or `Skipped`. Raises `RowError` (``located`` adds dataset/file/row)."""
    mapped = map_row(name, raw, split, fields)
    return mapped if isinstance(mapped, Skipped) else to_record(mapped, dataset, split, file, row_index)
