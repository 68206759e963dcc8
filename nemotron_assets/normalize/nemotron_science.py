"""Nemotron-Science (``nvidia/Nemotron-Science-v1``): multiple-choice (``MCQ``) and reasoning QA (``RQA``) splits.

Columns: ``uuid``, ``messages`` (assistant ``reasoning_content``; often a leading system message with content
``""``), ``license``, ``used_in`` (``["nano_v3"]``), ``tools`` (``[]``); no ``reasoning`` column. The task
(``mcq`` / ``rqa``) comes from a ``task`` field when present, else from the split name.

Some RQA prompts hold a backspace character where the ``\\b`` of ``\\boxed`` was read as an escape
(``"\\x08oxed{}"``); it is written back as ``\\boxed`` and the row flagged ``boxed_backspace_repaired``.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, SourceFields
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2
TASKS = ("mcq", "rqa")
BROKEN_BOXED, BOXED = "\x08oxed", "\\boxed"


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    row = chat_row(raw, fields, domain="science", task=_task(raw, split))
    for message in row.messages:
        if BROKEN_BOXED in message["content"]:
            message["content"] = message["content"].replace(BROKEN_BOXED, BOXED)
            row.flag("boxed_backspace_repaired")
    return row


def _task(raw: dict[str, Any], split: str | None) -> str | None:
    for hint in (raw.get("task"), split):
        if isinstance(hint, str):
            lowered = hint.lower()
            for task in TASKS:
                if task in lowered:
                    return task
    return None
