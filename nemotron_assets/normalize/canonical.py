"""The canonical conversation: OpenAI-style messages and tools, the form every normalized row stores
(docs/architecture.md §4.3).

Every template renders from this form (Harmony text through ``to_harmony.py``, chat templates in the SFT step), so
it is small and strict::

    message := {"role": "system", "content": str}
             | {"role": "user", "content": str}
             | {"role": "assistant", "content": str, ["reasoning_content": str], ["tool_calls": [call, ...]]}
             | {"role": "tool", "content": str, "tool_call_id": str | null, "name": str | null}
    call    := {"id": str, "type": "function", "function": {"name": str, "arguments": {...}}}
    tool    := {"type": "function", "function": {"name": str, ...the source's other keys, unchanged}}

Keys appear in that order; ``reasoning_content`` and ``tool_calls`` only when non-empty. Stored as JSON text with
key order preserved (`json_text`), so ``arguments`` keeps the source's key order.

`canonical_messages` builds it from the OpenAI-style lists NVIDIA's datasets store:

- ``content`` may be a string, null, a JSON object or a list (`content_text`): null is ``""``; a list of
  ``{"type": "text", "text": ...}`` parts is its text; any other object or list is its canonical JSON text. Each
  conversion is reported as a flag, so the row is kept and the conversion counted.
- roles: ``developer`` becomes ``system``, ``ipython`` / ``function`` become ``tool``; any other unknown role is a
  `RowError` naming ``messages[i].role`` (guessing who spoke would corrupt the training text).
- ``arguments`` given as a JSON string is parsed (key order kept). Arguments that are not JSON, or JSON but not an
  object, are kept as the source gave them and flagged; such a row is invalid (``record.py``).
- a call without an ``id`` gets ``call_<n>`` (n = its position among the conversation's calls).
- a tool result is matched to its call by ``tool_call_id``, else by ``name``, else to the oldest call still
  unanswered (Post-Training v1 results carry neither), and then carries that call's id and name.
- with ``split_think_tags``, an assistant turn without ``reasoning_content`` whose text holds ``<think>...</think>``
  is split into ``reasoning_content`` and ``content`` (older datasets write reasoning inline).
"""

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from nemotron_assets.normalize.base import RowError, note_flag

ROLES = ("system", "user", "assistant", "tool")
ROLE_ALIASES = {"developer": "system", "ipython": "tool", "function": "tool"}
THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_CONTENT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_OID, "nemotron_assets.content_uuid")  # a fixed namespace of ours

#: Flags for content that was not a string (`content_text`).
CONTENT_FLAGS = {
    "object": "content_object_as_json",
    "text_parts": "content_parts_as_text",
    "list": "content_list_as_json",
    "scalar": "content_scalar_as_text",
}


# --- JSON text ------------------------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII kept: one text per JSON value, whatever the source's key order."""
    return _CANONICAL_JSON.encode(value)


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` without building a new encoder on
#: every call (``dumps`` does; for a small value that costs more than the encoding).
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_text(value: Any) -> str:
    """Compact JSON with key order preserved (the storage form of ``messages`` / ``tools``), written by orjson
    (about 9x faster than ``json`` on an Agentic conversation). What orjson refuses -- a lone surrogate, which UTF-8
    cannot store, or an integer beyond 64 bits -- is written by ``json`` with ``\\u`` escapes instead, so it still
    round-trips."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def sha1_hex(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def content_uuid(value: Any) -> str:
    """A stable id for a row that has none: a name-based UUID (v5) of the canonical JSON of `value` (the row's
    content), so the same content gets the same id in any file, split or key order."""
    return str(uuid.uuid5(_CONTENT_NAMESPACE, canonical_json(value)))


# --- content --------------------------------------------------------------------------------------------------------


def content_text(value: Any) -> tuple[str, str | None]:
    """Message content as text, and what was converted (a key of `CONTENT_FLAGS`, or None for a string or null)."""
    if value is None:
        return "", None
    if isinstance(value, str):
        return value, None
    if isinstance(value, list) and all(_is_text_part(part) for part in value):
        return "".join(part if isinstance(part, str) else part["text"] for part in value), "text_parts"
    if isinstance(value, dict):
        return canonical_json(value), "object"
    if isinstance(value, list):
        return canonical_json(value), "list"
    return canonical_json(value), "scalar"  # a number or a boolean


def _is_text_part(part: Any) -> bool:
    if isinstance(part, str):
        return True
    return isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str)


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


# --- building blocks ------------------------------------------------------------------------------------------------


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(content: str, call_id: str | None, name: str | None) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}


def assistant(content: str, reasoning: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


@dataclass
class CallMatcher:
    """The calls made so far and not yet answered, in order: which call does a tool result answer?"""

    open_calls: list[tuple[str | None, str]] = field(default_factory=list)  # (call id, tool name)

    def called(self, call_id: str | None, name: str) -> None:
        self.open_calls.append((call_id, name))

    def answer(self, call_id: Any, name: Any) -> tuple[str | None, str] | None:
        """The open call with id `call_id`; without an id, the oldest open call (of `name`, when given). None when
        nothing matches (a result without a call)."""
        call_id = call_id if isinstance(call_id, str) and call_id else None
        name = name if isinstance(name, str) and name else None
        for k, (open_id, open_name) in enumerate(self.open_calls):
            by_id = call_id is not None and open_id == call_id
            by_order = call_id is None and name in (None, open_name)
            if by_id or by_order:
                return self.open_calls.pop(k)
        return None


# --- messages -------------------------------------------------------------------------------------------------------


@dataclass
class Canonical:
    """A canonical message list and the flags (with reasons) noticed while building it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def flag(self, code: str, reason: str | None = None) -> None:
        note_flag(self.flags, self.reasons, code, reason)


def canonical_messages(raw_messages: Any, where: str = "messages", *, split_think_tags: bool = True) -> Canonical:
    """The canonical form of an OpenAI-style message list; raises `RowError` when it is not a non-empty list of
    objects or a role is unknown."""
    if not isinstance(raw_messages, list):
        kind = type(raw_messages).__name__
        raise RowError(where, "missing" if raw_messages is None else f"expected a list, got {kind}")
    if not raw_messages:
        raise RowError(where, "is empty")
    builder = _Builder(where, split_think_tags, _source_call_ids(raw_messages))
    for i, raw in enumerate(raw_messages):
        builder.message(raw, f"{where}[{i}]")
    return builder.out


def _source_call_ids(raw_messages: list[Any]) -> set[str]:
    """Every call id the source gives, so a generated ``call_<n>`` never collides with one."""
    ids = set()
    for raw in raw_messages:
        calls = raw.get("tool_calls") if isinstance(raw, dict) else None
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                ids.add(call["id"])
    return ids


@dataclass
class _Builder:
    where: str
    split_think_tags: bool
    source_ids: set[str]
    out: Canonical = field(default_factory=Canonical)
    matcher: CallMatcher = field(default_factory=CallMatcher)
    calls: int = 0

    def message(self, raw: Any, where: str) -> None:
        if not isinstance(raw, dict):
            raise RowError(where, "a message is not an object")
        role = ROLE_ALIASES.get(raw.get("role"), raw.get("role"))
        if role not in ROLES:
            raise RowError(f"{where}.role", f"unknown role {raw.get('role')!r}")
        content = self.text(raw.get("content"))
        if role == "assistant":
            self.out.messages.append(self.assistant(raw, content, where))
        elif role == "tool":
            answered = self.matcher.answer(raw.get("tool_call_id"), raw.get("name"))
            call_id, name = answered if answered is not None else (_str_or_none(raw.get("tool_call_id")),
                                                                    _str_or_none(raw.get("name")))
            self.out.messages.append(tool_result(content, call_id, name))
        else:
            self.out.messages.append({"role": role, "content": content})

    def text(self, value: Any) -> str:
        text, converted = content_text(value)
        if converted is not None:
            self.out.flag(CONTENT_FLAGS[converted])
        return text

    def assistant(self, raw: dict[str, Any], content: str, where: str) -> dict[str, Any]:
        reasoning = self.text(raw.get("reasoning_content"))
        if self.split_think_tags and not reasoning.strip() and "</think>" in content:
            reasoning, content = split_think(content)
        raw_calls = raw.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise RowError(f"{where}.tool_calls", f"expected a list, got {type(raw_calls).__name__}")
        calls = [self.call(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(raw_calls)]
        return assistant(content, reasoning, calls)

    def call(self, raw: Any, where: str) -> dict[str, Any]:
        function = raw.get("function", raw) if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise RowError(f"{where}.function.name", "missing")
        name = function["name"]
        call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else self.new_id()
        self.calls += 1
        self.matcher.called(call_id, name)
        return tool_call(call_id, name, self.arguments(function.get("arguments"), f"{where}.function.arguments"))

    def new_id(self) -> str:
        candidate = f"call_{self.calls}"
        suffix = 0
        while candidate in self.source_ids:
            suffix += 1
            candidate = f"call_{self.calls}_{suffix}"
        self.source_ids.add(candidate)
        return candidate

    def arguments(self, value: Any, where: str) -> Any:
        """Arguments as a JSON object; anything else is kept as the source gave it, and flagged."""
        if value is None:
            return {}
        parsed = value
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                self.out.flag("tool_arguments_not_json", f"{where}: tool call arguments are not valid JSON")
                return value
        if not isinstance(parsed, dict):
            self.out.flag("tool_arguments_not_object", f"{where}: tool call arguments are not a JSON object")
            return value
        return parsed


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- tools ----------------------------------------------------------------------------------------------------------


def canonical_tools(raw_tools: Any, where: str = "tools") -> list[dict[str, Any]]:
    """OpenAI tool declarations -> canonical tools. Accepted: ``{"type": "function", "function": {...}}``, the bare
    function object, the Responses-API form ``{"type": "function", "name": ...}``, as a list or a JSON string of
    one. A ``parameters`` JSON string is parsed; one that is not JSON is kept (``quality_valid_tool_schema``
    reports it)."""
    if raw_tools is None or raw_tools == "":
        return []
    if isinstance(raw_tools, str):
        try:
            raw_tools = json.loads(raw_tools)
        except ValueError as error:
            raise RowError(where, f"is not JSON ({error})") from None
    if not isinstance(raw_tools, list):
        raise RowError(where, f"expected a list of tools, got {type(raw_tools).__name__}")
    return [_tool(tool, f"{where}[{i}]") for i, tool in enumerate(raw_tools)]


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise RowError(where, "a tool is not an object")
    if isinstance(tool.get("function"), dict):
        function = dict(tool["function"])
    else:
        function = {key: value for key, value in tool.items() if key != "type"}
    if not isinstance(function.get("name"), str) or not function["name"]:
        raise RowError(f"{where}.function.name", "missing")
    if isinstance(function.get("parameters"), str):
        try:
            function["parameters"] = json.loads(function["parameters"])
        except ValueError:
            pass  # kept as a string: quality_valid_tool_schema reports it
    return {"type": "function", "function": function}
