"""Nemotron-Instruction-Following-Chat (``nvidia/Nemotron-Instruction-Following-Chat-v1``).

Columns: ``chat_if`` has ``uuid``, ``messages``, ``license`` (odc-by-1.0), ``used_in``, ``tools``, ``reasoning``
(``on`` / ``off``) and ``capability_target`` (``chat``, ``instruction_following``); ``structured_outputs`` has no
``reasoning`` / ``capability_target`` and an empty ``used_in``. Reasoning ``off`` renders with effort ``low``; the
original switch stays in `source_reasoning` for the pools. The split becomes `meta_task`.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, SourceFields
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    return chat_row(raw, fields, domain="chat", task=split or "instruction_following")
