"""Llama-Nemotron-Post-Training-Dataset (``nvidia/Llama-Nemotron-Post-Training-Dataset``, v1 and v1.1).

Columns (dataset card): ``input`` (a list of ``{"role", "content"}`` messages in v1 and v1.1; one string is read
too), ``output`` (the answer, ``<think>...</think>`` first when reasoning is on), ``system_prompt``
(``detailed thinking on`` / ``off``), ``reasoning`` (``on`` / ``off``), ``category``, ``license``, ``generator``,
``used_in_training`` (a comma-separated string such as ``"Ultra, Super, Nano"``; typos such as ``Ulta`` are read
as the model they name), ``version``; no ``uuid``.

- The ``detailed thinking on/off`` system prompt is a reasoning switch, not an instruction: it is dropped from the
  conversation and only read when ``reasoning`` is missing. Other system prompts become a system turn.
- ``RL/instruction_following`` rows have ``args`` and no ``output``: a prompt without an answer, skipped as
  ``rl_prompt_without_output``.
- ``train/when2call_*`` rows hold ``messages`` and ``tools`` instead of ``input`` / ``output``: they are read as a
  chat conversation (``chat.py``).
"""

import re
from typing import Any

from nemotron_assets.normalize.base import (
    NormalizedRow,
    RowError,
    Skipped,
    SourceFields,
    effort_for_reasoning,
    optional_text,
    text_list,
)
from nemotron_assets.normalize.canonical import canonical_messages
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2
THINKING_SWITCH = re.compile(r"^\s*detailed thinking (on|off)\s*$", re.IGNORECASE)
#: The models ``used_in_training`` names, by their lower-case spelling in the data (typos included).
MODEL_NAMES = {"ultra": "Ultra", "ulta": "Ultra", "super": "Super", "nano": "Nano"}


def map_row(
    raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()
) -> NormalizedRow | Skipped:
    if raw.get("output") is None and raw.get("args") is not None:
        return Skipped("rl_prompt_without_output")
    if fields.messages is None and raw.get("input") is None and raw.get("messages") is not None:
        row = chat_row(raw, fields, domain=optional_text(raw, "category") or split, task=split or "when2call")
    else:
        row = _input_output_row(raw, split, fields)
    row.source_used_in = used_in_training(raw.get("used_in_training")) or row.source_used_in
    return row


def _input_output_row(raw: dict[str, Any], split: str | None, fields: SourceFields) -> NormalizedRow:
    input_field = fields.messages_or("input")
    output = raw.get("output")
    if not isinstance(output, str):
        raise RowError("output", "missing" if output is None else f"expected a string, got {type(output).__name__}")
    turns = _input_turns(raw.get(input_field), input_field) + [{"role": "assistant", "content": output}]
    switch = None
    system_prompt = raw.get("system_prompt")
    if isinstance(system_prompt, str) and system_prompt.strip():
        match = THINKING_SWITCH.match(system_prompt)
        if match:
            switch = match.group(1).lower()
        else:
            turns.insert(0, {"role": "system", "content": system_prompt})
    canonical = canonical_messages(turns, input_field)
    reasoning = optional_text(raw, "reasoning") or switch
    category = optional_text(raw, "category") or split
    return NormalizedRow(
        messages=canonical.messages,
        reasoning_effort=effort_for_reasoning(reasoning),
        meta_domain=category,
        meta_task=category,
        source_uuid=optional_text(raw, "uuid"),
        source_license=optional_text(raw, "license"),
        source_reasoning=reasoning,
        source_category=category,
        source_generators=text_list(raw.get("generator")),
        flags=list(canonical.flags),
        reasons=list(canonical.reasons),
    )


def used_in_training(value: Any) -> list[str]:
    """``"Ulta, Super"`` -> ``["Ultra", "Super"]``: known model names spelled one way, anything else as written."""
    return [MODEL_NAMES.get(name.lower(), name) for name in text_list(value)]


def _input_turns(value: Any, field: str) -> list[Any]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value:
        return list(value)
    raise RowError(field, "missing" if value is None else "expected a non-empty list of messages or a string")
