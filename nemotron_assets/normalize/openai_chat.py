"""``openai_chat``: rows already in the canonical OpenAI form -- ``messages``, optional ``tools`` and ``used_in``.

Meant for Nemotron-Post-Training-Dataset-v2 and the Nemotron SFT sets, whose rows are conversations with
``reasoning_content`` (or none) and OpenAI-style tool calls. The conversation is taken as it is: no ``<think>``
splitting, no renaming. Only what the canonical form cannot hold changes (``canonical.py``): non-text content
becomes text (flagged), string ``arguments`` are parsed, and calls and tool results get their ids and names.
The provenance columns NVIDIA's sets share (``uuid``, ``license``, ``reasoning``, ``category``, ``generator``,
``capability_target``) are read when present; ``domain`` (else ``category``) is the domain, the split the task.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, SourceFields, optional_text
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 1


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    domain = optional_text(raw, "domain") or optional_text(raw, "category")
    return chat_row(raw, fields, domain=domain, task=split, split_think_tags=False)
