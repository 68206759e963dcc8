"""Nemotron-Instruction-Following-Chat (``nvidia/Nemotron-Instruction-Following-Chat-v1``).

Assumed fields (Nano-3 chat schema): ``uuid``, ``messages``, ``license``, ``used_in``, ``reasoning`` (``on`` /
``off``), ``capability_target`` (``chat``, ``structured_outputs``, ...), ``tools``. Reasoning ``off`` renders with
effort ``low`` and no analysis message; the original switch is kept in `source_reasoning` for the pools.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow
from nemotron_assets.normalize.chat import chat_row


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    return chat_row(raw, domain="chat", task="instruction_following")
