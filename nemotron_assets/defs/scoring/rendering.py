"""Pool rows -> token ids and trained masks, rendered the way the scored model was trained to read them.

Every row of a pool is rendered once, as a whole conversation (no per-user-turn split), with *every* assistant
turn trained, using the model folder's own chat template (`chat_template.find_chat_templates`), or Harmony for a
Harmony tokenizer. The rendering, tokenization and masks are the SFT renderer's (``nemotron_assets/sft``): this
module only picks the template and tokenizer for a model folder and adapts the SFT calls to scoring, in one
function, `render_conversations`, which is the glue point between the two packages.

Differences from SFT samples, on purpose:

- no per-turn split: the score is about the whole row, so a reasoning conversation stays one sample;
- Harmony keeps the reasoning (a whole conversation has no history whose reasoning Harmony SFT would drop): it is
  part of what is scored;
- a conversation without tools (``tools`` null or ``[]``) renders with ``tools=None``, as a trainer calls
  ``apply_chat_template`` for it (a template tests ``tools is not none``).

Rows the renderer cannot take are dropped with the SFT drop reasons (``special_token_literal``,
``template_error``, ``invalid_unicode``) and counted by the caller.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nemotron_assets.chat.harmony import HarmonyTemplate
from nemotron_assets.chat.samples import (
    INVALID_UNICODE,
    SPECIAL_TOKEN_LITERAL,
    TEMPLATE_ERROR,
    check_conversation,
    find_literal,
    render_sample,
    tokenize_samples,
)
from nemotron_assets.chat.templates import JinjaChatTemplate, TemplateRenderError
from nemotron_assets.chat.tokenizer_choice import load_chat_tokenizer
from nemotron_assets.defs.scoring.chat_template import find_chat_templates
from nemotron_assets.defs.scoring.model_files import ModelFiles
from nemotron_assets.sources.errors import InputError

Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None
Conversation = tuple[Messages, Tools]


@dataclass(frozen=True)
class Rendered:
    """One row's ids (int) and trained mask (0/1), or the reason it was dropped and why."""

    ids: np.ndarray | None = None
    trained: np.ndarray | None = None
    dropped: str | None = None
    detail: str = ""


ConversationRenderer = Callable[[Sequence[Conversation]], list[Rendered]]


def conversation_from_row(row: Mapping[str, Any], path: str, row_index: int) -> Conversation:
    """The canonical conversation of a pool row: ``messages`` and ``tools`` are JSON text (``normalize/record.py``),
    or already-decoded lists. Bad JSON raises `InputError` naming the file, row and column."""
    messages = _decoded(row.get("messages"), path, row_index, "messages")
    tools = _decoded(row.get("tools"), path, row_index, "tools")
    return messages, (tools or None)


def _decoded(value: Any, path: str, row_index: int, column: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error}", path=path, row=row_index, field=column) from None


class ModelRenderer:
    """Renders conversations for the model in `files`: its own tokenizer, and its chat template(s) or Harmony."""

    def __init__(self, files: ModelFiles) -> None:
        self.templates = find_chat_templates(files.folder)
        self.tokenizer = load_chat_tokenizer(str(files.folder))
        self.harmony = HarmonyTemplate() if self.templates.harmony else None
        self.jinja = {name: JinjaChatTemplate(t.source, t.where, self.tokenizer.template_tokens)
                      for name, t in self.templates.templates.items()}

    def template_for(self, has_tools: bool) -> Any:
        if self.harmony is not None:
            return self.harmony
        return self.jinja[self.templates.select(has_tools).name]

    def __call__(self, conversations: Sequence[Conversation]) -> list[Rendered]:
        return render_conversations(conversations, self.template_for, self.tokenizer)


def render_conversations(conversations: Sequence[Conversation], template_for: Callable[[bool], Any],
                         tokenizer: Any) -> list[Rendered]:
    """The glue to the SFT renderer: each conversation rendered whole with every assistant turn trained, all texts
    tokenized in one call. `template_for(has_tools)` gives the SFT template for a conversation. A conversation that
    is not canonical raises the SFT's `InputError` (the caller adds file and row)."""
    results: list[Rendered | None] = [None] * len(conversations)
    pending = []
    for i, (messages, tools) in enumerate(conversations):
        check_conversation(messages, tools)
        literal = find_literal(messages, tools, tokenizer)
        if literal is not None:
            results[i] = Rendered(dropped=SPECIAL_TOKEN_LITERAL, detail=f"the text holds {literal!r}")
            continue
        try:
            rendered = render_sample(messages, tools, template_for(bool(tools)))
        except TemplateRenderError as error:
            results[i] = Rendered(dropped=TEMPLATE_ERROR, detail=str(error))
            continue
        try:
            rendered.text.encode("utf-8")
        except UnicodeEncodeError:
            results[i] = Rendered(dropped=INVALID_UNICODE, detail="the text holds a lone surrogate")
            continue
        pending.append((i, rendered))
    tokenized = tokenize_samples([rendered for _, rendered in pending], tokenizer)
    for (i, _), (ids, trained) in zip(pending, tokenized):
        results[i] = Rendered(ids, trained)
    return results  # type: ignore[return-value]
