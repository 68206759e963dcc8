"""Nemotron-Math-v2 (``nvidia/Nemotron-Math-v2``): gpt-oss-120b solutions of AoPS / StackExchange problems.

Columns (dataset card, https://huggingface.co/datasets/nvidia/Nemotron-Math-v2): ``problem``, ``expected_answer``,
``original_expected_answer``, ``changed_answer_to_majority`` (bool), ``data_source`` (``aops``, ``stackflow``),
``messages`` (assistant ``content`` starts with the answer, ``reasoning_content`` holds the reasoning, python calls
go to ``stateful_python_code_exec``), ``tools``, ``metadata``, ``license``, ``used_in``, ``url``, ``user_url``,
``user_name``, and ``uuid`` -- except in the ``high_part0`` / ``high_part1`` splits, which have no ``uuid``.

- The split (``low``, ``medium``, ``high_partNN``) is the reasoning effort the trajectory was generated with; it is
  not in the row, so the caller passes the split name (a ``reasoning_effort`` column would win).
- ``metadata`` has one entry per evaluation setting, ``reason_{low,medium,high}_{with_tool,no_tool}`` =
  ``{"count": 8, "pass": 6, "accuracy": 0.75}`` (``count`` can be 7; an entry can be null), for any effort
  whatever the split. Correctness = the best accuracy over all of them; best setting, pass@k (``count``) and
  correct count (``pass``) come from that setting (ties: the first key in sorted order). Metadata given as a JSON
  string is parsed; metadata that is not JSON is flagged ``metadata_not_json``.
- Kept: ``expected_answer`` (``meta_expected_answer``), ``changed_answer_to_majority``
  (``meta_answer_changed_to_majority``), ``data_source`` (``source_origin``).
- A row without ``uuid`` gets a stable one from its content (``problem`` + ``messages``), flagged
  ``uuid_from_content``.
"""

import json
from typing import Any

from nemotron_assets.formats.harmony import REASONING_EFFORTS
from nemotron_assets.normalize.base import NormalizedRow, SourceFields, effort_from_split, optional_text
from nemotron_assets.normalize.canonical import content_uuid
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2
SETTING_PREFIX = "reason_"


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    row = chat_row(raw, fields, domain="math", task="solve")
    row.reasoning_effort = _effort(raw, split)
    metadata, readable = _metadata(raw.get("metadata"))
    if not readable:
        row.flag("metadata_not_json")
    best = best_setting(metadata)
    if best is not None:
        name, evaluation = best
        row.meta_eval_best_setting = name
        row.meta_correctness = float(evaluation["accuracy"])
        row.meta_pass_k = _int_or_none(evaluation.get("count"))
        row.meta_correct_count = _int_or_none(evaluation.get("pass"))
    row.meta_expected_answer = optional_text(raw, "expected_answer")
    changed = raw.get("changed_answer_to_majority")
    row.meta_answer_changed_to_majority = changed if isinstance(changed, bool) else None
    row.source_origin = optional_text(raw, "data_source")
    if row.source_uuid is None:
        messages_field = fields.messages_or("messages")
        row.source_uuid = content_uuid({"problem": raw.get("problem"), "messages": raw.get(messages_field)})
        row.flag("uuid_from_content")
    return row


def _effort(raw: dict[str, Any], split: str | None) -> str | None:
    hinted = raw.get("reasoning_effort")
    if isinstance(hinted, str) and hinted.lower() in REASONING_EFFORTS:
        return hinted.lower()
    return effort_from_split(split)


def _metadata(value: Any) -> tuple[dict[str, Any], bool]:
    """Parsed metadata and whether it was readable; absent metadata is readable and empty."""
    if value is None or value == "":
        return {}, True
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}, False
    return (value, True) if isinstance(value, dict) else ({}, False)


def best_setting(metadata: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The ``reason_*`` setting with the highest accuracy, or None when no setting reports one."""
    candidates = [
        (key, value)
        for key, value in sorted(metadata.items())
        if key.startswith(SETTING_PREFIX) and isinstance(value, dict) and _is_number(value.get("accuracy"))
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda item: float(item[1]["accuracy"]))  # max keeps the first of equal ones


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int_or_none(value: Any) -> int | None:
    return int(value) if _is_number(value) else None
