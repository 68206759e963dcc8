"""The mapper most families share: a row that is an OpenAI-style conversation plus NVIDIA's provenance columns.

NVIDIA's post-training datasets store ``messages`` (and ``tools``) the way the OpenAI chat API does, with
``reasoning_content`` on assistant turns (Nano-3 era) or inline ``<think>`` (older ones), next to the same
provenance columns: ``uuid``, ``license``, ``used_in``, ``reasoning`` (on / off), ``capability_target``,
``category``, ``generator``. `chat_row` reads all of that; a family module adds what only it has.

The blend entry's ``messages_field`` / ``tools_field`` (`SourceFields`) name other columns for the conversation.
"""

from typing import Any

from nemotron_assets.normalize.base import (
    NormalizedRow,
    SourceFields,
    effort_for_reasoning,
    optional_text,
    require,
    text_list,
    used_in,
)
from nemotron_assets.normalize.canonical import canonical_messages, canonical_tools


def chat_row(
    raw: dict[str, Any],
    fields: SourceFields,
    *,
    domain: str | None,
    task: str | None = None,
    split_think_tags: bool = True,
) -> NormalizedRow:
    """The `NormalizedRow` of a conversation row: canonical messages and tools plus the shared provenance."""
    messages_field, tools_field = fields.messages_or("messages"), fields.tools_or("tools")
    canonical = canonical_messages(require(raw, messages_field), messages_field, split_think_tags=split_think_tags)
    reasoning = optional_text(raw, "reasoning")
    return NormalizedRow(
        messages=canonical.messages,
        tools=canonical_tools(raw.get(tools_field), tools_field),
        reasoning_effort=effort_for_reasoning(reasoning),
        meta_domain=domain,
        meta_task=task,
        source_uuid=optional_text(raw, "uuid"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw, "used_in", "used_in_training"),
        source_reasoning=reasoning,
        source_capability_target=optional_text(raw, "capability_target"),
        source_category=optional_text(raw, "category"),
        source_generators=text_list(raw.get("generator")),
        flags=list(canonical.flags),
        reasons=list(canonical.reasons),
    )
