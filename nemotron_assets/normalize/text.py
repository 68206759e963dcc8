"""Plain ``text`` rows (pretraining-style documents, or any dataset whose blend entry names a `text_field`).

Decision: a document is one assistant answer with no user turn. Harmony needs a conversation, and the whole
document is what the model should learn to produce, so with ``loss_mode="assistant_all"`` every character stays
under the loss; inventing a user prompt would add text that is not in the data. An empty or whitespace-only text
has nothing to learn and is skipped as ``empty_text``. The blend entry's ``text_field`` picks the column.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, Skipped, SourceFields, optional_text, require_text, used_in
from nemotron_assets.normalize.canonical import assistant

MAPPER_VERSION = 2


def map_row(
    raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()
) -> NormalizedRow | Skipped:
    text = require_text(raw, fields.text)
    if not text.strip():
        return Skipped("empty_text")
    return NormalizedRow(
        messages=[assistant(text)],
        reasoning_effort="low",
        meta_domain=optional_text(raw, "domain"),
        meta_task="document",
        source_uuid=optional_text(raw, "uuid") or optional_text(raw, "id"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw),
    )
