"""Canonical conversation -> Harmony messages: the one place where OpenAI-style turns become Harmony channels.

Every row's Harmony text is rendered from its canonical ``messages`` and ``tools`` (``canonical.py``), never from
the raw row, so the text and the stored conversation cannot disagree:

- ``system`` turns become the instructions of the developer message (Harmony's own system message is fixed:
  ``formats/harmony.py`` `conversation_prelude`); empty ones are dropped.
- an assistant turn becomes ``analysis`` (its ``reasoning_content``, or a ``<think>`` block left in its text),
  then, when it calls tools, its text as a ``commentary`` preamble followed by one message per call, otherwise its
  text as ``final``. Reasoning and answer are stripped of surrounding whitespace.
- calls to a tool named in `PYTHON_TOOL_NAMES` become the built-in ``python`` tool on the analysis channel, the
  way gpt-oss writes tool-integrated reasoning; that tool's declaration is left out of the function tools.
- a tool result is written by the call it answers (by ``tool_call_id``, else ``name``, else order); a result that
  answers no call keeps the author ``functions.<name or unknown>``, and validation flags the row.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from nemotron_assets.formats.harmony import Message, ToolSpec
from nemotron_assets.normalize.canonical import CallMatcher, split_think

#: NeMo-Skills' python tool (Nemotron-Math-v2 declares it; OpenMathReasoning TIR calls are written as calls to it).
PYTHON_TOOL_NAMES = frozenset({"stateful_python_code_exec"})


@dataclass
class HarmonyConversation:
    """What Harmony needs besides the fixed prelude: the messages, the developer instructions, the function tools,
    and whether the built-in python tool is used (the system message then declares it)."""

    messages: list[Message] = field(default_factory=list)
    instructions: str | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    python_tool: bool = False


def harmony_conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> HarmonyConversation:
    """Convert a canonical conversation (as `canonical.canonical_messages` / `canonical_tools` build it)."""
    converter = _Converter()
    for message in messages:
        converter.message(message)
    out = converter.out
    out.instructions = "\n\n".join(converter.instructions) if converter.instructions else None
    out.tools = [_tool_spec(tool["function"]) for tool in tools if tool["function"]["name"] not in PYTHON_TOOL_NAMES]
    return out


def _tool_spec(function: dict[str, Any]) -> ToolSpec:
    description = function.get("description")
    return ToolSpec(function["name"], description if isinstance(description, str) else "", function.get("parameters"))


@dataclass
class _Converter:
    out: HarmonyConversation = field(default_factory=HarmonyConversation)
    instructions: list[str] = field(default_factory=list)
    matcher: CallMatcher = field(default_factory=CallMatcher)

    def message(self, message: dict[str, Any]) -> None:
        role, content = message["role"], message["content"]
        if role == "system":
            if content.strip():
                self.instructions.append(content)
        elif role == "user":
            self.out.messages.append(Message.user(content))
        elif role == "assistant":
            self.assistant(message)
        else:
            self.tool_result(message)

    def assistant(self, message: dict[str, Any]) -> None:
        reasoning, answer = reasoning_and_answer(message)
        if reasoning:
            self.out.messages.append(Message.analysis(reasoning))
        calls = message.get("tool_calls") or []
        if not calls:
            self.out.messages.append(Message.final(answer))
            return
        if answer:
            self.out.messages.append(Message.commentary(answer))
        for call in calls:
            self.call(call)

    def call(self, call: dict[str, Any]) -> None:
        name = call["function"]["name"]
        arguments = call["function"].get("arguments")
        arguments = {} if arguments is None else arguments
        self.matcher.called(call.get("id"), name)
        if name in PYTHON_TOOL_NAMES:
            self.out.python_tool = True
            self.out.messages.append(Message.python_call(python_code(arguments)))
        else:
            self.out.messages.append(Message.function_call(name, arguments_text(arguments)))

    def tool_result(self, message: dict[str, Any]) -> None:
        answered = self.matcher.answer(message.get("tool_call_id"), message.get("name"))
        name = answered[1] if answered is not None else (message.get("name") or "unknown")
        if answered is not None and name in PYTHON_TOOL_NAMES:
            self.out.messages.append(Message.python_result(message["content"]))
        else:
            self.out.messages.append(Message.function_result(name, message["content"]))


def reasoning_and_answer(message: dict[str, Any]) -> tuple[str, str]:
    """An assistant turn's reasoning (the ``analysis`` message) and its text (``final`` or the ``commentary``
    preamble), both stripped: ``reasoning_content`` when it says anything, else a ``<think>`` block of the text."""
    reasoning = message.get("reasoning_content") or ""
    if reasoning.strip():
        return reasoning.strip(), message["content"].strip()
    return split_think(message["content"])


def arguments_text(arguments: Any) -> str:
    """Arguments as compact JSON in their own key order; a string (arguments the source gave as non-JSON text) is
    written verbatim, so validation judges it."""
    if isinstance(arguments, str):
        return arguments
    return _ARGUMENTS_JSON.encode(arguments)


#: What ``json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))`` calls, built once: ``dumps`` builds a
#: new encoder on every call, which costs more than encoding a small arguments object.
_ARGUMENTS_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def python_code(arguments: Any) -> str:
    """The code of a python-tool call: ``{"code": ...}``, else the arguments as text."""
    if isinstance(arguments, dict) and isinstance(arguments.get("code"), str):
        return arguments["code"]
    return arguments_text(arguments)
