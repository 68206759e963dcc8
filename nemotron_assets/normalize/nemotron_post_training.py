"""Nemotron-Post-Training-Dataset v1 / v2 (``nvidia/Nemotron-Post-Training-Dataset-v1``, ``-v2``).

Columns (v1 card features): ``uuid``, ``license``, ``generator`` (in v2 sometimes a comma-separated list such as
``"Qwen3-235B-A22B, Qwen3-30B-A3B"``), ``version``, ``category`` (chat, code, math, stem, tool_calling,
multilingual_*), ``reasoning`` (``on`` / ``off``), ``messages`` (role, content, and in v1 ``tool_calls`` with
string ``arguments``), and in v1 ``metadata`` as a JSON **string**. Reasoning is inline ``<think>...</think>`` in
the assistant content. v1 tool results carry no ``tool_call_id`` or ``name`` (matched to calls by order). v2
conversations usually start with a system message whose content is ``""``.

- ``tool_calling`` rows carry their tools in ``metadata = {"tools": [...]}`` (a ``tools`` column wins).
- ``code`` rows carry ``metadata = {"source", "dataset", "index", "split"}``: their user prompt is the placeholder
  ``"-"`` and those fields say where the redacted problem is (``source_origin``, ``source_ref_*``). The ``chat``
  split has empty user prompts. Both are kept and flagged ``placeholder_prompt``.
- metadata that is not JSON does not stop the row: it is flagged ``metadata_not_json``.
- The category is the domain (``multilingual_ja`` -> ``multilingual``) and `meta_task`.
"""

import json
from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, SourceFields
from nemotron_assets.normalize.canonical import canonical_tools
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    category = raw.get("category") or split
    row = chat_row(raw, fields, domain=_domain(category), task=category)
    metadata, readable = _metadata(raw.get("metadata"))
    if not readable:
        row.flag("metadata_not_json")
    if not row.tools and metadata.get("tools"):
        row.tools = canonical_tools(metadata["tools"], "metadata.tools")
    row.source_category = category
    row.source_origin = _text(metadata.get("source"))
    row.source_ref_dataset = _text(metadata.get("dataset"))
    row.source_ref_split = _text(metadata.get("split"))
    row.source_ref_index = _text(metadata.get("index"))
    return row


def _domain(category: Any) -> str | None:
    if not isinstance(category, str) or not category:
        return None
    return "multilingual" if category.startswith("multilingual") else category


def _text(value: Any) -> str | None:
    return None if value is None or isinstance(value, dict | list) else str(value)


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
