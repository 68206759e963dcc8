"""Nemotron-Math-v2 (``nvidia/Nemotron-Math-v2``): gpt-oss-120b solutions of AoPS / StackExchange problems.

Fields (dataset card and NeMo-Skills docs, https://huggingface.co/datasets/nvidia/Nemotron-Math-v2): ``problem``,
``expected_answer``, ``messages`` (OpenAI-style, assistant ``reasoning_content`` and ``tool_calls`` to
``stateful_python_code_exec``), ``tools``, ``metadata`` with one entry per generation setting
``reason_{low,medium,high}_{with_tool,no_tool}`` = ``{"count": 8, "pass": 6, "accuracy": 0.75}``, ``license``,
``used_in``, ``data_source``. The split (``low``, ``medium``, ``high_part00``..) is the reasoning effort the
trajectory was generated with; it is not in the row, so the caller passes the split name.

- correctness = the best accuracy over the settings; best setting, pass@k (``count``) and correct count (``pass``)
  come from that setting (ties: the first key in sorted order, so the choice is stable).
- python tool calls become the built-in ``python`` tool on the analysis channel.
Assumption: ``metadata`` may also arrive as a JSON string (Parquet exports); it is parsed the same way.
"""

import json
from typing import Any

from nemotron_assets.formats.harmony import REASONING_EFFORTS
from nemotron_assets.normalize.base import NormalizedRow, RowError, effort_from_split
from nemotron_assets.normalize.chat import chat_row

PYTHON_TOOL_NAMES = ("stateful_python_code_exec",)
SETTING_PREFIX = "reason_"


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    row = chat_row(raw, domain="math", task="solve", python_names=PYTHON_TOOL_NAMES)
    row.reasoning_effort = _effort(raw, split)
    best = best_setting(_metadata(raw.get("metadata")))
    if best is not None:
        name, evaluation = best
        row.meta_eval_best_setting = name
        row.meta_correctness = float(evaluation["accuracy"])
        row.meta_pass_k = _int_or_none(evaluation.get("count"))
        row.meta_correct_count = _int_or_none(evaluation.get("pass"))
    return row


def _effort(raw: dict[str, Any], split: str | None) -> str | None:
    hinted = raw.get("reasoning_effort")
    if isinstance(hinted, str) and hinted.lower() in REASONING_EFFORTS:
        return hinted.lower()
    return effort_from_split(split)


def _metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RowError("metadata", "is not JSON") from None
    if not isinstance(value, dict):
        raise RowError("metadata", f"expected an object, got {type(value).__name__}")
    return value


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
