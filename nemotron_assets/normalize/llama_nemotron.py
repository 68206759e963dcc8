"""Llama-Nemotron-Post-Training-Dataset (``nvidia/Llama-Nemotron-Post-Training-Dataset``, v1 / v1.1).

Fields (dataset card): ``input`` (v1.1: a list of ``{"role", "content"}`` messages; v1: one string, the user
prompt), ``output`` (the assistant answer, with ``<think>...</think>`` when reasoning is on), ``system_prompt``
(``detailed thinking on`` / ``off``), ``reasoning`` (``on`` / ``off``), ``category``, ``license``, ``generator``,
``used_in_training`` (comma-separated, e.g. ``Ultra, Super, Nano``), ``version``.

The ``detailed thinking on/off`` system prompt is a reasoning switch, not an instruction: it is dropped from the
developer message and only read when ``reasoning`` is missing. Other system prompts become instructions.
"""

import re
from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, RowError, effort_for_reasoning, optional_text, used_in
from nemotron_assets.normalize.chat import convert_messages

THINKING_SWITCH = re.compile(r"^\s*detailed thinking (on|off)\s*$", re.IGNORECASE)


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    output = raw.get("output")
    if not isinstance(output, str):
        raise RowError("output", "missing" if output is None else f"expected a string, got {type(output).__name__}")
    turns = _input_turns(raw.get("input")) + [{"role": "assistant", "content": output}]
    switch = None
    system_prompt = raw.get("system_prompt")
    if isinstance(system_prompt, str) and system_prompt.strip():
        match = THINKING_SWITCH.match(system_prompt)
        if match:
            switch = match.group(1).lower()
        else:
            turns.insert(0, {"role": "system", "content": system_prompt})
    chat = convert_messages(turns, where="input")
    reasoning = optional_text(raw, "reasoning") or switch
    category = optional_text(raw, "category") or split
    return NormalizedRow(
        messages=chat.messages,
        reasoning_effort=effort_for_reasoning(reasoning),
        instructions=chat.instructions,
        meta_domain=category,
        meta_task=category,
        source_uuid=optional_text(raw, "uuid"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw, "used_in_training", "used_in"),
        source_reasoning=reasoning,
        source_category=category,
        source_generator=optional_text(raw, "generator"),
    )


def _input_turns(value: Any) -> list[Any]:
    if isinstance(value, str):
        if not value.strip():
            raise RowError("input", "is empty")
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value:
        return list(value)
    raise RowError("input", "missing" if value is None else "expected a non-empty list of messages or a string")
