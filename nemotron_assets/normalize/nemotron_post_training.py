"""Nemotron-Post-Training-Dataset v1 / v2 (``nvidia/Nemotron-Post-Training-Dataset-v1``, ``-v2``).

Fields (dataset card features): ``uuid``, ``license``, ``generator``, ``version``, ``category`` (chat, code, math,
stem, tool_calling, multilingual_*), ``reasoning`` (``on`` / ``off``), ``messages`` (role, content, and in v1
``tool_calls`` with string ``arguments``), and in v1 ``metadata`` as a JSON **string**. Reasoning is inline
``<think>...</think>`` in the assistant content.

Assumptions: function tools come from a ``tools`` column when present, else from ``metadata["tools"]`` (the v1
card has no tools column); metadata that is not JSON does not stop the row, it is flagged ``metadata_not_json``.
The category is the domain (``multilingual_ja`` -> ``multilingual``).
"""

import json
from typing import Any

from nemotron_assets.normalize.base import NormalizedRow
from nemotron_assets.normalize.chat import chat_row, tool_specs


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    category = raw.get("category") or split
    row = chat_row(raw, domain=_domain(category), task=category)
    metadata, ok = _metadata(raw.get("metadata"))
    if not ok:
        row.flags.append("metadata_not_json")
    if not row.tools and metadata.get("tools"):
        row.tools = tool_specs(metadata["tools"], "metadata.tools")
    row.source_category = category
    return row


def _domain(category: Any) -> str | None:
    if not isinstance(category, str) or not category:
        return None
    return "multilingual" if category.startswith("multilingual") else category


def _metadata(value: Any) -> tuple[dict[str, Any], bool]:
    """Parsed metadata and whether it was readable; absent metadata is readable and empty."""
    if value is None or value == "":
        return {}, True
    if isinstance(value, dict):
        return value, True
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError):
        return {}, False
    return (parsed, True) if isinstance(parsed, dict) else ({}, False)
