"""Nemotron-Agentic (``nvidia/Nemotron-Agentic-v1``): splits ``tool_calling`` and ``interactive_agent``.

Fields (dataset card, https://huggingface.co/datasets/nvidia/Nemotron-Agentic-v1, and conversions of it): ``uuid``,
``messages`` with roles system/user/assistant/tool, assistant ``content`` null next to ``tool_calls`` (or a preamble,
kept as commentary), ``reasoning_content``, tool messages with ``tool_call_id``; ``tools`` in OpenAI function
format; ``license``, ``used_in``, ``reasoning``. In ``tool_calling`` the ``arguments`` are dicts, in
``interactive_agent`` JSON strings: both are accepted and every call is kept. The split becomes `meta_task`.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow
from nemotron_assets.normalize.chat import chat_row


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    return chat_row(raw, domain="agentic", task=split or "tool_calling")
