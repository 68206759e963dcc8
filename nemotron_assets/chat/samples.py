"""Canonical conversations -> SFT samples: token ids and an assistant mask, or a reason each one was dropped.

Steps for one conversation (`samples_for_conversations` runs them on a whole batch, tokenizing in one call):

1. Check the conversation's shape (`check_conversation`): bad input raises `InputError` naming the field.
2. Drop it as ``special_token_literal`` if any of its strings holds a special or added token of the tokenizer.
3. Plan its samples (`plan_samples`): without reasoning, the whole conversation, every assistant turn trained;
   with reasoning (an assistant ``reasoning_content``), one sample per user turn — the messages up to that turn's
   last assistant or tool message, trained only after the user message. A turn with no reply ends on the user
   message and is skipped as ``ends_on_user_turn`` (a whole conversation is kept as it is, trailing user turn
   included).
4. Render each sample with the template (text + trained character spans); a template that refuses it
   (``raise_exception``, ...) drops it as ``template_error``.
5. Tokenize all texts at once and map spans to tokens (`masks.assistant_mask`). A sample without a trained token
   is dropped as ``no_trained_tokens``. In the same lookup, the text of the masked roles (system, developer, user,
   tool) becomes token spans (`masked_roles.py`), which the packed shards' check holds the mask against.
"""

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from nemotron_assets.chat.masked_roles import inner_probes, inner_token_spans, masked_content_spans
from nemotron_assets.chat.masks import assistant_mask, mask_from_span_tokens, span_ends
from nemotron_assets.chat.templates import JinjaChatTemplate, RenderedSample, TemplateRenderError, end_of_turn_text
from nemotron_assets.chat.tokenizers import ChatTokenizer, TokenizedText
from nemotron_assets.sources.errors import InputError

ROLES = ("system", "developer", "user", "assistant", "tool")
_TEXT_FIELDS = ("content", "reasoning_content", "tool_call_id", "name")

SPECIAL_TOKEN_LITERAL = "special_token_literal"
ENDS_ON_USER_TURN = "ends_on_user_turn"
TEMPLATE_ERROR = "template_error"
NO_TRAINED_TOKENS = "no_trained_tokens"
INVALID_UNICODE = "invalid_unicode"
DROP_REASONS = (SPECIAL_TOKEN_LITERAL, ENDS_ON_USER_TURN, TEMPLATE_ERROR, NO_TRAINED_TOKENS, INVALID_UNICODE)

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None


class ChatTemplate(Protocol):
    """A Jinja template (`templates.JinjaChatTemplate`) or Harmony (`harmony.HarmonyTemplate`)."""

    name: str

    def render(self, messages: Messages, tools: Tools = None, trained_from: int = 0) -> RenderedSample: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One training sample. `user_turn` is the 0-based user turn it ends with for a reasoning conversation split per
    turn, None for a whole conversation; `messages` is how many of the conversation's messages it renders;
    `masked_spans` the token ranges of masked-role text, flat (``[start0, end0, start1, end1, ...]``)."""

    ids: np.ndarray  # int32
    assistant_mask: np.ndarray  # uint8, 1 = trained
    user_turn: int | None
    messages: int
    masked_spans: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))


@dataclass
class ConversationSamples:
    """What one conversation gave: its samples, the samples or conversation dropped (reason -> count), and for each
    drop a line saying why (for a run's ``dropped_examples``)."""

    samples: list[Sample] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    why: list[str] = field(default_factory=list)

    def drop(self, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        self.why.append(f"{reason}: {detail}")


@dataclass(frozen=True, slots=True)
class PlannedSample:
    """A prefix of the conversation to render: ``messages[:end]``, trained from message `trained_from` on."""

    end: int
    trained_from: int
    user_turn: int | None


# --- 1. shape -------------------------------------------------------------------------------------------------------


def check_conversation(messages: Any, tools: Any) -> None:
    """Raise `InputError` naming the field when the conversation is not the canonical form (see
    `nemotron_assets.chat`); optional keys may be absent or None."""
    if not isinstance(messages, list) or not messages:
        raise InputError("expected a non-empty list of messages", field="messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InputError("a message is not an object", field=where)
        if message.get("role") not in ROLES:
            raise InputError(f"role {message.get('role')!r} is not one of {', '.join(ROLES)}", field=f"{where}.role")
        for key in _TEXT_FIELDS:
            value = message.get(key)
            if value is not None and not isinstance(value, str):
                raise InputError(f"expected a string, got {type(value).__name__}", field=f"{where}.{key}")
        if message.get("tool_calls") is not None:
            _check_tool_calls(message["tool_calls"], f"{where}.tool_calls")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise InputError("expected a list of tool objects", field="tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InputError("a tool needs function.name", field=f"tools[{i}].function.name")


def _check_tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise InputError("expected a list", field=where)
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InputError("a tool call needs function.name", field=f"{where}[{j}].function.name")


# --- 2. special-token literals --------------------------------------------------------------------------------------


def _strings(value: Any, out: list[str]) -> None:
    """Collect every string in a JSON-like value, dict keys included."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            out.append(key)
            _strings(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            _strings(item, out)


def conversation_strings(messages: Messages, tools: Tools) -> list[str]:
    """Every string a template could write: message values (keys are field names, not text), the strings inside
    tool calls (argument names included) and the tool declarations."""
    out: list[str] = []
    for message in messages:
        for key, value in message.items():
            if isinstance(value, str):
                out.append(value)
            elif key == "tool_calls" and value:
                _strings(value, out)
    if tools:
        _strings(tools, out)
    return out


def find_literal(messages: Messages, tools: Tools, tokenizer: ChatTokenizer) -> str | None:
    """The first special/added token literal in the conversation's strings, or None. The strings are searched as
    one text joined by NUL, a character no token literal contains, so a literal cannot straddle two of them."""
    return tokenizer.literals.first_in("\0".join(conversation_strings(messages, tools)))


# --- 3. which samples -----------------------------------------------------------------------------------------------


def has_reasoning(messages: Messages) -> bool:
    return any(m.get("role") == "assistant" and (m.get("reasoning_content") or "").strip() for m in messages)


def plan_samples(messages: Messages) -> list[PlannedSample]:
    """Without reasoning: the whole conversation. With reasoning: per user turn, the messages up to the next user
    message, trained after this one (a conversation with reasoning but no user message stays whole)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not has_reasoning(messages) or not users:
        return [PlannedSample(len(messages), 0, None)]
    ends = users[1:] + [len(messages)]
    return [PlannedSample(end, user + 1, turn) for turn, (user, end) in enumerate(zip(users, ends))]


# --- 4 + 5. render, tokenize, mask ----------------------------------------------------------------------------------


def render_sample(messages: Messages, tools: Tools, template: ChatTemplate, trained_from: int = 0) -> RenderedSample:
    """The text of `messages` and its trained spans (every assistant turn from message `trained_from` on)."""
    return template.render(messages, tools, trained_from)


def mask_for(tokenized: TokenizedText, rendered: RenderedSample) -> np.ndarray:
    return assistant_mask(len(tokenized.ids), rendered.trained_spans, tokenized.locator)


def tokenize_samples(rendered: Sequence[RenderedSample], tokenizer: ChatTokenizer) -> list[tuple[np.ndarray,
                                                                                                  np.ndarray]]:
    """(ids int32, assistant mask uint8) of each rendered sample, tokenizing the batch in one call."""
    tokenized = tokenizer.encode_batch([sample.text for sample in rendered])
    return [(t.ids, mask_for(t, sample)) for t, sample in zip(tokenized, rendered)]


def tokenize_sample(rendered: RenderedSample, tokenizer: ChatTokenizer) -> tuple[np.ndarray, np.ndarray]:
    return tokenize_samples([rendered], tokenizer)[0]


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def samples_for_conversations(conversations: Iterable[tuple[Messages, Tools]], template: ChatTemplate,
                              tokenizer: ChatTokenizer, checked: bool = False) -> list[ConversationSamples]:
    """Samples of each (messages, tools) conversation, in order. Raises `InputError` for a conversation that is not
    canonical (the caller adds the file and line; ``checked``: the caller has run `check_conversation` on each one
    already) and `TemplateNotPrefixStable` for an unusable template."""
    results: list[ConversationSamples] = []
    pending: list[tuple[ConversationSamples, PlannedSample, RenderedSample, Messages]] = []
    for messages, tools in conversations:
        result = ConversationSamples()
        results.append(result)
        if not checked:
            check_conversation(messages, tools)
        literal = find_literal(messages, tools, tokenizer)
        if literal is not None:
            result.drop(SPECIAL_TOKEN_LITERAL, f"the text holds {literal!r}, a special token of {tokenizer.name}")
            continue
        for plan in plan_samples(messages):
            prefix = messages[: plan.end]
            if plan.user_turn is not None and prefix[-1].get("role") == "user":
                result.drop(ENDS_ON_USER_TURN, f"user turn {plan.user_turn} has no reply")
                continue
            try:
                rendered = render_sample(prefix, tools, template, plan.trained_from)
            except TemplateRenderError as error:
                result.drop(TEMPLATE_ERROR, str(error))
                continue
            if not _encodable(rendered.text):
                result.drop(INVALID_UNICODE, "the text holds a lone surrogate, which is not UTF-8")
                continue
            pending.append((result, plan, rendered, prefix))
    tokenized = tokenizer.encode_batch([rendered.text for _, _, rendered, _ in pending])
    closing = _end_of_turn(template)
    for (result, plan, rendered, prefix), tokens in zip(pending, tokenized):
        mask, masked = _mask_and_masked_spans(tokens, rendered, prefix, closing)
        if not mask.any():
            result.drop(NO_TRAINED_TOKENS, "no token of the sample is trained")
            continue
        result.samples.append(Sample(tokens.ids, mask, plan.user_turn, plan.end, masked))
    return results


def _end_of_turn(template: ChatTemplate) -> str | None:
    """A Jinja template's end-of-turn text (masked_roles.py moves past it), None when it cannot be found or the
    template locates masked text itself (Harmony)."""
    if not isinstance(template, JinjaChatTemplate):
        return None
    try:
        return end_of_turn_text(template)
    except InputError:
        return None


def _mask_and_masked_spans(tokens: TokenizedText, rendered: RenderedSample, messages: Messages,
                           end_of_turn: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The assistant mask and the flat token spans of masked-role text, located in one lookup."""
    masked_chars = rendered.masked_spans
    if masked_chars is None:
        masked_chars = masked_content_spans(messages, rendered.text, end_of_turn)
    ends = span_ends(rendered.trained_spans)
    found = tokens.locator.tokens_at(ends + inner_probes(masked_chars))
    n_tokens = len(tokens.ids)
    spans = inner_token_spans(found[len(ends):], n_tokens)
    return (mask_from_span_tokens(n_tokens, found[: len(ends)]),
            np.asarray([bound for span in spans for bound in span], dtype=np.int32))


def samples_for_conversation(messages: Messages, tools: Tools, template: ChatTemplate,
                             tokenizer: ChatTokenizer) -> ConversationSamples:
    """`samples_for_conversations` for one conversation."""
    return samples_for_conversations([(messages, tools)], template, tokenizer)[0]
