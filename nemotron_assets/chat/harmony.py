"""Harmony chat SFT: a canonical conversation -> Harmony text plus the character spans a model is trained on.

**Which reasoning a sample keeps (a product decision).** openai-harmony's training render, with the library's
default config (``auto_drop_analysis=True``), drops every ``analysis`` message before the first ``final`` one when
the last assistant message is a final answer. A one-turn sample would then lose the very reasoning we want to train.
What we render instead, for a sample trained from message ``trained_from`` on (`samples.plan_samples`):

- the *history* (the messages before ``trained_from``: earlier turns, shown but not trained) loses its ``analysis``
  messages, as a model sees it at inference time: gpt-oss drops the reasoning of finished turns;
- the *trained part* keeps every message, its reasoning included.

So a sample's text equals openai-harmony's ``render_conversation_for_training`` with ``auto_drop_analysis=False`` of
the sample's Harmony messages from which the history's ``analysis`` messages were removed (tested token for token in
``nemotron_assets_tests/chat/test_render_harmony.py``). A whole conversation (``trained_from = 0``: no reasoning, or
scoring's whole-row render) has no history and keeps everything, as ``harmony_shard`` stores it. The rendering itself
is `nemotron_assets.formats.harmony.render_harmony`.

Trained text: for each assistant message of the trained part, everything after the role name ``assistant`` through
its terminator::

    <|start|>assistant<|channel|>final<|message|>21 °C.<|return|>
                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ trained

Masked text (for the packed shards' ``no_trained_token_on_masked_role`` check): every message that is not the
assistant's, whole, from its ``<|start|>`` through its terminator (system, developer, user and tool messages).

The canonical (OpenAI-style) messages become Harmony messages through `nemotron_assets.normalize.to_harmony`, in
one function, `harmony_messages`: system turns become the developer message's instructions, reasoning an
``analysis`` message, tool calls ``commentary`` calls to ``functions.NAME``, tool results ``functions.NAME``
messages.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nemotron_assets.chat.templates import RenderedSample, Span, TemplateRenderError
from nemotron_assets.formats.harmony import END, START, HarmonyError, Message, conversation_prelude, render_harmony
from nemotron_assets.normalize.to_harmony import harmony_conversation

HARMONY = "harmony"
ANALYSIS = "analysis"


@dataclass(frozen=True, slots=True)
class HarmonyConversation:
    """Harmony messages of a canonical conversation: the prelude (system, developer) and then the body, with
    `body_start` the index of the first body message."""

    messages: list[Message]
    body_start: int


def harmony_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                     reasoning_effort: str | None) -> HarmonyConversation:
    """The one place that turns canonical messages into Harmony messages (`normalize.to_harmony`, which takes the
    stored canonical form: ``developer`` written as ``system``, content always a string, every call with an id)."""
    stored = [_stored_form(message) for message in messages]
    converted = harmony_conversation(stored, list(tools or []))
    prelude = conversation_prelude(reasoning_effort, converted.instructions, converted.tools,
                                   python_tool=converted.python_tool)
    return HarmonyConversation(prelude + converted.messages, len(prelude))


def _stored_form(message: Mapping[str, Any]) -> dict[str, Any]:
    stored = dict(message)
    stored["role"] = "system" if message["role"] == "developer" else message["role"]
    stored["content"] = message.get("content") or ""
    if message.get("tool_calls"):
        stored["tool_calls"] = [{**call, "id": call.get("id")} for call in message["tool_calls"]]
    return stored


def _body_length(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many Harmony body messages `messages` convert to (a message's conversion depends only on the ones
    before it, so this is also where the next message's Harmony messages start)."""
    return len(harmony_conversation([_stored_form(message) for message in messages], []).messages)


def sample_messages(conversation: HarmonyConversation, first_trained: int) -> list[tuple[Message, bool]]:
    """The Harmony messages a sample renders, each with whether it is trained: the history (before index
    `first_trained`) without its ``analysis`` messages, then every message of the trained part (module docstring)."""
    return [(message, i >= first_trained and message.role == "assistant")
            for i, message in enumerate(conversation.messages)
            if i >= first_trained or message.channel != ANALYSIS]


class HarmonyTemplate:
    """The ``harmony`` chat template. `reasoning_effort` goes into the system message (openai-harmony's default is
    ``medium``)."""

    name = HARMONY
    end_of_turn = END

    def __init__(self, reasoning_effort: str | None = "medium") -> None:
        self.reasoning_effort = reasoning_effort

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
               trained_from: int = 0) -> RenderedSample:
        """Text and trained spans; messages before index `trained_from` are rendered (without their reasoning) but
        not trained."""
        conversation = harmony_messages(messages, tools, self.reasoning_effort)
        first_trained = conversation.body_start + _body_length(messages[:trained_from])
        kept = sample_messages(conversation, first_trained)
        try:
            text = render_harmony([message for message, _ in kept])
        except HarmonyError as error:
            raise TemplateRenderError(HARMONY, str(error)) from None
        blocks = _message_blocks(text, len(kept))
        skip = len(START) + len("assistant")
        trained = tuple((start + skip, end) for (start, end), (_, is_trained) in zip(blocks, kept) if is_trained)
        masked = tuple(block for block, (message, _) in zip(blocks, kept) if message.role != "assistant")
        return RenderedSample(text, trained, masked)


def _message_blocks(text: str, count: int) -> list[Span]:
    """Each message's characters, from its ``<|start|>`` to the end of its terminator. Content cannot hold
    ``<|start|>`` (the renderer refuses special-token literals), so message i starts at its i-th occurrence."""
    starts = []
    at = text.find(START)
    while at >= 0:
        starts.append(at)
        at = text.find(START, at + len(START))
    if len(starts) != count:
        raise RuntimeError(f"found {len(starts)} messages in the Harmony text, rendered {count}")
    return list(zip(starts, starts[1:] + [len(text)]))
