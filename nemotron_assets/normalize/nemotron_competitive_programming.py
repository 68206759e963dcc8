"""Nemotron-Competitive-Programming (``nvidia/Nemotron-Competitive-Programming-v1``): code solutions with reasoning.

Assumed fields (Nano-3 chat schema): ``uuid``, ``messages`` (assistant ``reasoning_content``), ``license``,
``used_in``, ``reasoning``, ``tools``. The split (``competitive_coding_python``, ``..._cpp``) becomes `meta_task`.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow
from nemotron_assets.normalize.chat import chat_row


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    return chat_row(raw, domain="code", task=split or "competitive_programming")
