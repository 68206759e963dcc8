"""Nemotron-Agentic (``nvidia/Nemotron-Agentic-v1``): splits ``tool_calling`` and ``interactive_agent``.

Columns: ``tool_calling`` has ``uuid``, ``messages``, ``license``, ``used_in``, ``tools``; ``interactive_agent``
adds ``reasoning``. Messages often start with a system message whose content is ``""``; assistant turns may have
``tool_calls: null`` and ``reasoning_content``; tool-call ``arguments`` are objects (dicts), sometimes JSON strings;
message ``content`` can be a string, an object (a tool result) or a list -- all become text (``canonical.py``).
The split becomes `meta_task`.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, SourceFields
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    return chat_row(raw, fields, domain="agentic", task=split or "tool_calling")
