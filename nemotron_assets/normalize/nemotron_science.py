"""Nemotron-Science (``nvidia/Nemotron-Science-v1``): multiple-choice (``MCQ``) and reasoning QA (``RQA``) splits.

Assumed fields (the Nano-3 chat schema shared by Nemotron-Science / -Competitive-Programming / -IF-Chat cards):
``uuid``, ``messages`` (assistant ``reasoning_content``), ``license``, ``used_in``, ``reasoning``, ``tools``. The
task (``mcq`` / ``rqa``) comes from a ``task`` field when present, else from the split name.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow
from nemotron_assets.normalize.chat import chat_row

TASKS = ("mcq", "rqa")


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    return chat_row(raw, domain="science", task=_task(raw, split))


def _task(raw: dict[str, Any], split: str | None) -> str | None:
    for hint in (raw.get("task"), split):
        if isinstance(hint, str):
            lowered = hint.lower()
            for task in TASKS:
                if task in lowered:
                    return task
    return None
