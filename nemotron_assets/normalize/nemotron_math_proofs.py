"""Nemotron-Math-Proofs (``nvidia/Nemotron-Math-Proofs-v1``, split ``lean``): Lean 4 formalizations and proofs.

Fields (dataset card, https://huggingface.co/datasets/nvidia/Nemotron-Math-Proofs-v1): ``uuid``, ``problem``
(always present), ``source`` (``aops`` / ``mathstack``), ``formal_statement`` (Lean 4 theorem with ``sorry``, null for
~4%), ``lean_header`` (imports), ``messages`` (verified proof attempts; an empty list when none), ``url``,
``user_name``, ``license``, ``used_in``.

A row with messages is a proof conversation (``meta_task="prove"``). A row without them still teaches
autoformalization: the user asks to formalize ``problem`` and the assistant answers with ``lean_header`` +
``formal_statement`` (``meta_task="formalize"``); such a row needs both.
"""

from typing import Any

from nemotron_assets.formats.harmony import Message
from nemotron_assets.normalize.base import NormalizedRow, optional_text, require_text, used_in
from nemotron_assets.normalize.chat import chat_row

FORMALIZE_PROMPT = (
    "Formalize the following problem as a Lean 4 theorem statement. Give the imports and the statement, "
    "with `sorry` in place of the proof.\n\n{problem}"
)


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    if raw.get("messages"):
        return chat_row(raw, domain="math_proof", task="prove")
    return _formalization(raw)


def _formalization(raw: dict[str, Any]) -> NormalizedRow:
    problem = require_text(raw, "problem")
    statement = require_text(raw, "formal_statement")
    header = (raw.get("lean_header") or "").strip()
    answer = f"{header}\n\n{statement.strip()}" if header else statement.strip()
    return NormalizedRow(
        messages=[Message.user(FORMALIZE_PROMPT.format(problem=problem.strip())), Message.final(answer)],
        meta_domain="math_proof",
        meta_task="formalize",
        source_uuid=optional_text(raw, "uuid"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw),
        source_category=optional_text(raw, "source"),
    )
