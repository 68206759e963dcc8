"""OpenAI-style chat messages -> Harmony messages, shared by every family that stores ``messages``.

NVIDIA's post-training datasets store conversations the way the OpenAI chat API does (``role``, ``content``,
assistant ``tool_calls`` with ``function.name`` / ``function.arguments``, tool messages with ``tool_call_id``), plus
``reasoning_content`` on assistant turns (Nano-3 era datasets) or inline ``<think>...</think>`` (older ones). One
converter keeps the rules identical across families:

- ``system`` / ``developer`` turns become the developer message's instructions (Harmony's system message is fixed).
- an assistant turn becomes ``analysis`` (its reasoning), then, when it calls tools, its text as a ``commentary``
  preamble followed by one call per tool call (every call is kept), otherwise its text as ``final``.
- ``arguments`` may be a dict (Nemotron-Agentic ``tool_calling``) or a JSON string; a string that is not JSON is
  kept as it is, so validation flags the row instead of the converter hiding it.
- a tool result is attributed by ``tool_call_id``, else by ``name``, else to the oldest call still unanswered; a
  result nothing called keeps the author ``functions.<name or unknown>`` and validation flags it.
- calls to a tool listed in `python_names` (``stateful_python_code_exec``) become the built-in ``python`` tool on the
  analysis channel, the way gpt-oss writes tool-integrated reasoning.
- any other role is a `RowError` naming ``messages[i].role``: guessing who spoke would corrupt the training text.
"""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nemotron_assets.formats.harmony import JSON_CONTENT_TYPE, Message, ToolSpec
from nemotron_assets.normalize.base import NormalizedRow, RowError, effort_for_reasoning, optional_text, used_in

THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
TOOL_ROLES = ("tool", "ipython", "function")


def content_text(value: Any, where: str) -> str:
    """Message content as text: null is empty, a list of parts is the concatenation of its text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise RowError(where, "a content part without text")
        return "".join(parts)
    raise RowError(where, f"expected text, got {type(value).__name__}")


def split_think(text: str) -> tuple[str, str]:
    """``<think>reasoning</think>answer`` -> (reasoning, answer), both stripped. Text with only a closing
    ``</think>`` (generation started inside the thought) is split there; text without a think block has no
    reasoning."""
    match = THINK.search(text)
    if match is not None:
        return match.group(1).strip(), (text[: match.start()] + text[match.end() :]).strip()
    if "</think>" in text:
        reasoning, _, answer = text.partition("</think>")
        return reasoning.strip(), answer.strip()
    return "", text.strip()


def arguments_text(value: Any) -> str:
    """Tool-call arguments as JSON text; a string is kept verbatim (validation judges it), null means no arguments."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tool_specs(raw_tools: Any, where: str = "tools") -> list[ToolSpec]:
    """OpenAI tool declarations (``{"type": "function", "function": {...}}`` or the bare function object, as a list
    or a JSON string of one) -> `ToolSpec`s."""
    if raw_tools is None or raw_tools == "":
        return []
    if isinstance(raw_tools, str):
        try:
            raw_tools = json.loads(raw_tools)
        except ValueError as error:
            raise RowError(where, f"is not JSON ({error})") from None
    if not isinstance(raw_tools, list):
        raise RowError(where, f"expected a list of tools, got {type(raw_tools).__name__}")
    return [_tool_spec(tool, f"{where}[{i}]") for i, tool in enumerate(raw_tools)]


def _tool_spec(tool: Any, where: str) -> ToolSpec:
    if not isinstance(tool, dict):
        raise RowError(where, "a tool is not an object")
    function = tool.get("function", tool)
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise RowError(f"{where}.function.name", "missing")
    parameters = function.get("parameters")
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters)
        except ValueError:
            pass  # kept as a string: quality_valid_tool_schema reports it
    return ToolSpec(function["name"], function.get("description") or "", parameters)


@dataclass
class Chat:
    """The converted conversation: Harmony messages, the instructions for the developer message, and whether the
    built-in python tool was used (the system message then declares it)."""

    messages: list[Message] = field(default_factory=list)
    instructions: str | None = None
    python_tool: bool = False


@dataclass
class _Converter:
    where: str
    python_names: frozenset[str]
    chat: Chat = field(default_factory=Chat)
    instructions: list[str] = field(default_factory=list)
    pending: list[tuple[str | None, str]] = field(default_factory=list)  # (call id, author of its result)

    def message(self, raw: Any, i: int) -> None:
        where = f"{self.where}[{i}]"
        if not isinstance(raw, dict):
            raise RowError(where, "a message is not an object")
        role = raw.get("role")
        text = content_text(raw.get("content"), f"{where}.content")
        if role in ("system", "developer"):
            if text.strip():
                self.instructions.append(text)
        elif role == "user":
            self.chat.messages.append(Message.user(text))
        elif role == "assistant":
            self.assistant(raw, text, where)
        elif role in TOOL_ROLES:
            self.tool_result(raw, text)
        else:
            raise RowError(f"{where}.role", f"unknown role {role!r}")

    def assistant(self, raw: dict[str, Any], text: str, where: str) -> None:
        reasoning = raw.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning.strip():
            reasoning, answer = reasoning.strip(), text.strip()
        else:
            reasoning, answer = split_think(text)
        if reasoning:
            self.chat.messages.append(Message.analysis(reasoning))
        calls = raw.get("tool_calls") or []
        if not isinstance(calls, list):
            raise RowError(f"{where}.tool_calls", "expected a list")
        if not calls:
            self.chat.messages.append(Message.final(answer))
            return
        if answer:
            self.chat.messages.append(Message.commentary(answer))
        for j, call in enumerate(calls):
            self.call(call, f"{where}.tool_calls[{j}]")

    def call(self, call: Any, where: str) -> None:
        function = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise RowError(f"{where}.function.name", "missing")
        name, arguments = function["name"], function.get("arguments")
        call_id = call.get("id")
        if name in self.python_names:
            self.chat.python_tool = True
            self.chat.messages.append(Message.python_call(_python_code(arguments)))
            self.pending.append((call_id, "python"))
        else:
            self.chat.messages.append(
                Message("assistant", arguments_text(arguments), "commentary", f"functions.{name}", JSON_CONTENT_TYPE)
            )
            self.pending.append((call_id, f"functions.{name}"))

    def tool_result(self, raw: dict[str, Any], text: str) -> None:
        author = self.result_author(raw.get("tool_call_id"), raw.get("name"))
        if author == "python":
            self.chat.messages.append(Message.python_result(text))
        else:
            self.chat.messages.append(Message("tool", text, "commentary", "assistant", name=author))

    def result_author(self, call_id: Any, name: Any) -> str:
        """Whose result this is: the open call with this id; without an id, the oldest open call (of this name, when
        the result is named); otherwise the named tool, or ``functions.unknown``, which validation then flags."""
        named = None
        if isinstance(name, str) and name:
            named = "python" if name in self.python_names else f"functions.{name}"
        for k, (pending_id, author) in enumerate(self.pending):
            matches_id = call_id is not None and pending_id == call_id
            matches_open = call_id is None and named in (None, author)
            if matches_id or matches_open:
                return self.pending.pop(k)[1]
        return named or "functions.unknown"


def _python_code(arguments: Any) -> str:
    """The code of a python-tool call: ``{"code": ...}`` as a dict or JSON string, else the string itself."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        arguments = parsed
    if isinstance(arguments, dict) and isinstance(arguments.get("code"), str):
        return arguments["code"]
    return arguments_text(arguments)


def convert_messages(raw_messages: Any, where: str = "messages", python_names: Iterable[str] = ()) -> Chat:
    """Convert an OpenAI-style message list; raises `RowError` when it is not a non-empty list or a role is
    unknown."""
    if not isinstance(raw_messages, list):
        kind = type(raw_messages).__name__
        raise RowError(where, "missing" if raw_messages is None else f"expected a list, got {kind}")
    if not raw_messages:
        raise RowError(where, "is empty")
    converter = _Converter(where, frozenset(python_names))
    for i, raw in enumerate(raw_messages):
        converter.message(raw, i)
    converter.chat.instructions = "\n\n".join(converter.instructions) if converter.instructions else None
    return converter.chat


def chat_row(
    raw: dict[str, Any], *, domain: str | None, task: str | None = None, python_names: Iterable[str] = ()
) -> NormalizedRow:
    """The `NormalizedRow` of a row that is a conversation plus the provenance fields NVIDIA's chat datasets share
    (``uuid``, ``license``, ``used_in``, ``reasoning``, ``capability_target``, ``category``, ``generator``)."""
    python_names = tuple(python_names)
    chat = convert_messages(raw.get("messages"), python_names=python_names)
    tools = [tool for tool in tool_specs(raw.get("tools")) if tool.name not in python_names]
    reasoning = optional_text(raw, "reasoning")
    return NormalizedRow(
        messages=chat.messages,
        tools=tools,
        reasoning_effort=effort_for_reasoning(reasoning),
        instructions=chat.instructions,
        python_tool=chat.python_tool,
        meta_domain=domain,
        meta_task=task,
        source_uuid=optional_text(raw, "uuid"),
        source_license=optional_text(raw, "license"),
        source_used_in=used_in(raw, "used_in", "used_in_training"),
        source_reasoning=reasoning,
        source_capability_target=optional_text(raw, "capability_target"),
        source_category=optional_text(raw, "category"),
        source_generator=optional_text(raw, "generator"),
    )
