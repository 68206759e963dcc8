"""Harmony chat SFT: a canonical conversation -> Harmony text plus the character spans a model is trained on.

The text is what openai-harmony's ``render_conversation_for_training`` writes for the conversation's Harmony
messages, with the library's default config (``auto_drop_analysis=True``). That default drops every ``analysis``
message before the first ``final`` one when the last assistant message is a final answer (so a one-turn sample
loses its reasoning); ``auto_drop_analysis=False`` keeps it, as ``harmony_shard`` does. The rendering itself is
`nemotron_assets.formats.harmony.render_harmony`.

Trained text: for each assistant message, everything after the role name ``assistant`` through its terminator::

    <|start|>assistant<|channel|>final<|message|>21 °C.<|return|>
                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ trained

The canonical (OpenAI-style) messages become Harmony messages through `nemotron_assets.normalize.to_harmony`, in
one function, `harmony_messages`: system turns become the developer message's instructions, reasoning an
``analysis`` message, tool calls ``commentary`` calls to ``functions.NAME``, tool results ``functions.NAME``
messages.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nemotron_assets.formats.harmony import END, START, HarmonyError, Message, conversation_prelude, render_harmony
from nemotron_assets.normalize.to_harmony import harmony_conversation
from nemotron_assets.sft.templates import RenderedSample, TemplateRenderError

HARMONY = "harmony"


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


def dropped_by_default_config(messages: Sequence[Message]) -> list[bool]:
    """Which messages openai-harmony's ``auto_drop_analysis`` leaves out: when the last assistant message is on the
    ``final`` channel, every ``analysis`` message (of any author) before the first ``final`` message."""
    last_assistant = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if last_assistant is None or last_assistant.channel != "final":
        return [False] * len(messages)
    first_final = next((i for i, m in enumerate(messages) if m.channel == "final"), len(messages))
    return [i < first_final and m.channel == "analysis" for i, m in enumerate(messages)]


class HarmonyTemplate:
    """The ``harmony`` chat template. `reasoning_effort` goes into the system message (openai-harmony's default is
    ``medium``); `auto_drop_analysis` is the library's render option, on by default as in the library."""

    name = HARMONY
    end_of_turn = END

    def __init__(self, reasoning_effort: str | None = "medium", auto_drop_analysis: bool = True) -> None:
        self.reasoning_effort = reasoning_effort
        self.auto_drop_analysis = auto_drop_analysis

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
               trained_from: int = 0) -> RenderedSample:
        """Text and trained spans; messages before index `trained_from` are rendered but not trained."""
        conversation = harmony_messages(messages, tools, self.reasoning_effort)
        first_trained = conversation.body_start + _body_length(messages[:trained_from])
        kept = conversation.messages
        trained = [i >= first_trained and m.role == "assistant" for i, m in enumerate(kept)]
        if self.auto_drop_analysis:
            dropped = dropped_by_default_config(kept)
            trained = [t for t, drop in zip(trained, dropped) if not drop]
            kept = [m for m, drop in zip(kept, dropped) if not drop]
        try:
            text = render_harmony(kept)
        except HarmonyError as error:
            raise TemplateRenderError(HARMONY, str(error)) from None
        return RenderedSample(text, tuple(_assistant_spans(text, trained)))


def _assistant_spans(text: str, trained: list[bool]) -> list[tuple[int, int]]:
    """Each trained message's span: from after ``<|start|>assistant`` to the end of its terminator. Content cannot
    hold ``<|start|>`` (the renderer refuses special-token literals), so message i starts at its i-th occurrence."""
    starts = []
    at = text.find(START)
    while at >= 0:
        starts.append(at)
        at = text.find(START, at + len(START))
    if len(starts) != len(trained):
        raise RuntimeError(f"found {len(starts)} messages in the Harmony text, rendered {len(trained)}")
    ends = starts[1:] + [len(text)]
    skip = len(START) + len("assistant")
    return [(start + skip, end) for start, end, is_trained in zip(starts, ends, trained) if is_trained]
