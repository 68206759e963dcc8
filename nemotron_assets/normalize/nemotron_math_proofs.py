"""Nemotron-Math-Proofs (``nvidia/Nemotron-Math-Proofs-v1``, split ``lean``): Lean 4 formalizations and proofs.

Columns (dataset card, https://huggingface.co/datasets/nvidia/Nemotron-Math-Proofs-v1): ``uuid``, ``problem``,
``source`` (``aops`` / ``mathstack``, kept as ``source_origin``), ``formal_statement`` (a Lean 4 declaration with
``sorry``; it may start with ``inductive`` as well as ``theorem``, and is null for some rows), ``lean_header``
(imports), ``messages`` (verified proof attempts, often ``[]``), ``sft_line_number`` (often null), ``url``,
``user_name``, ``user_url``, ``license``, ``used_in`` (often ``[]``), ``tools``.

A row with messages is a proof conversation (``meta_task="prove"``). A row without them still teaches
autoformalization: the user asks to formalize ``problem`` and the assistant answers with ``lean_header`` +
``formal_statement`` (``meta_task="formalize"``). A row with neither messages nor a formal statement has nothing
to train on and is skipped as ``no_proof_or_statement``.
"""

from typing import Any

from nemotron_assets.normalize.base import (
    NormalizedRow,
    RowError,
    Skipped,
    SourceFields,
    optional_text,
    require_text,
    used_in,
)
from nemotron_assets.normalize.canonical import assistant
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2
FORMALIZE_PROMPT = (
    "Formalize the following problem as a Lean 4 theorem statement. Give the imports and the statement, "
    "with `sorry` in place of the proof.\n\n{problem}"
)


def map_row(
    raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()
) -> NormalizedRow | Skipped:
    if raw.get(fields.messages_or("messages")):
        row = chat_row(raw, fields, domain="math_proof", task="prove")
    else:
        row = _formalization(raw)
        if row is None:
            return Skipped("no_proof_or_statement")
    row.source_origin = optional_text(raw, "source")
    return row


def _formalization(raw: dict[str, Any]) -> NormalizedRow | None:
    statement = raw.get("formal_statement")
    if statement is None or (isinstance(statement, str) and not statement.strip()):
        return None
    if not isinstance(statement, str):
        raise RowError("formal_statement", f"expected a string, got {type(statement).__name__}")
    problem = require_text(raw, "problem")
    header = (raw.get("lean_header") or "").strip()
    answer = f"{header}\n\n{statement.strip()}" if header else statement.strip()
    row = NormalizedRow(
        messages=[{"role": "user", "content": FORMALIZE_PROMPT.format(problem=problem.strip())}, assistant(answer)],
        meta_domain="math_proof",
        meta_task="formalize",
        source_uuid=optional_text(raw, "uuid"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw),
    )
    if not problem.strip():
        row.flag("placeholder_prompt")
    return row
