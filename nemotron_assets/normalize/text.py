"""Plain ``text`` rows (pretraining-style documents, or any dataset whose blend entry names a `text_field`).

Decision: a document is one assistant ``final`` message with no user turn. Harmony needs a conversation, and the
whole document is what the model should learn to produce, so with ``loss_mode="assistant_all"`` every character
stays under the loss; inventing a user prompt would add text that is not in the data. An empty or whitespace-only
text is a `RowError` (nothing to learn). `text_field` picks another column (the blend entry's ``text_field``).
"""

from typing import Any

from nemotron_assets.formats.harmony import Message
from nemotron_assets.normalize.base import NormalizedRow, optional_text, require_text, used_in

DEFAULT_TEXT_FIELD = "text"


def map_row(raw: dict[str, Any], split: str | None = None, text_field: str = DEFAULT_TEXT_FIELD) -> NormalizedRow:
    text = require_text(raw, text_field)
    return NormalizedRow(
        messages=[Message.final(text)],
        reasoning_effort="low",
        meta_domain=optional_text(raw, "domain"),
        meta_task="document",
        source_uuid=optional_text(raw, "uuid") or optional_text(raw, "id"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw),
    )
