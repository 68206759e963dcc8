"""A normalized row and the shard record it becomes (DESIGN.md section 3).

Every family mapper turns one raw row into a `NormalizedRow`: Harmony messages (without the system/developer
prelude), the function tools the conversation may call, the reasoning effort, and the metadata the pools filter on.
`to_record` then renders the Harmony text and derives the columns every shard has, so the quality and statistics
rules live in one place instead of ten mappers.

A row the mapper cannot read at all (a required field missing, an unknown role) raises `RowError` naming the field;
the caller counts it as a drop with that reason. A row that can be read but not stored as valid Harmony text (a
special-token literal in its content, tool arguments that are not JSON, a tool result without a call) is *kept*:
`to_record` returns it with ``quality_valid_harmony=False``, best-effort text and the reasons in
``quality_flags`` / ``quality_reason``, because dropping happens in the pools, where it is counted.
"""

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from nemotron_assets.errors import InputError
from nemotron_assets.formats.harmony import (
    REASONING_EFFORTS,
    HarmonyError,
    Message,
    SpecialTokenError,
    ToolSpec,
    conversation_prelude,
    render_harmony,
    validate_messages,
)

LOSS_MODE = "assistant_all"
DIFFICULTY_BINS: tuple[str, ...] = ("low", "medium", "high")
#: Correctness at or above this is an easy problem (difficulty "low"); at or below `HARD_AT_MOST` a hard one.
EASY_AT_LEAST = 0.875
HARD_AT_MOST = 0.25
DEFAULT_EFFORT = "medium"


class RowError(ValueError):
    """A raw row the family mapper cannot read: `field` names what is missing or invalid (``messages[3].role``)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def located(self, dataset: str | None = None, path: str | None = None, row: int | None = None) -> InputError:
        """The same error with the dataset, file and row the caller knows, as the project's `InputError`."""
        return InputError(self.reason, dataset=dataset, path=path, row=row, field=self.field)


@dataclass
class NormalizedRow:
    """What a family mapper knows about one raw row; `to_record` turns it into shard columns.

    `messages` holds the conversation after the prelude; `instructions` (the source's system prompt) goes into the
    developer message. `flags` are problems the mapper noticed but that do not stop the row (``metadata_not_json``).
    """

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    reasoning_effort: str | None = None
    instructions: str | None = None
    python_tool: bool = False
    meta_domain: str | None = None
    meta_task: str | None = None
    meta_correctness: float | None = None
    meta_pass_k: int | None = None
    meta_correct_count: int | None = None
    meta_eval_best_setting: str | None = None
    meta_difficulty_bin: str | None = None
    source_uuid: str | None = None
    source_license: str | None = None
    source_used_in: list[str] = field(default_factory=list)
    source_reasoning: str | None = None
    source_capability_target: str | None = None
    source_category: str | None = None
    source_generator: str | None = None
    flags: list[str] = field(default_factory=list)


# --- small readers the mappers share --------------------------------------------------------------------------------


def require(raw: dict[str, Any], name: str) -> Any:
    """`raw[name]`, which must be present and not null."""
    value = raw.get(name)
    if value is None:
        raise RowError(name, "missing" if name not in raw else "is null")
    return value


def require_text(raw: dict[str, Any], name: str, *, allow_empty: bool = False) -> str:
    """`raw[name]` as a string; an empty string is refused unless `allow_empty` (a prompt must say something)."""
    value = require(raw, name)
    if not isinstance(value, str):
        raise RowError(name, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise RowError(name, "is empty")
    return value


def optional_text(raw: dict[str, Any], name: str) -> str | None:
    value = raw.get(name)
    return None if value is None else str(value)


def used_in(raw: dict[str, Any], *names: str) -> list[str]:
    """The ``used_in`` provenance as a list: datasets store a list (``["nano_v3"]``) or one comma-separated string."""
    for name in names or ("used_in",):
        value = raw.get(name)
        if isinstance(value, list):
            return [str(item) for item in value]
        if isinstance(value, str) and value.strip():
            return [part.strip() for part in value.split(",") if part.strip()]
    return []


def effort_from_split(split: str | None) -> str | None:
    """``high_part00`` / ``medium`` / ``low`` -> the reasoning effort the split was generated with."""
    if not split:
        return None
    head = split.lower().replace("-", "_").split("_")[0].split(".")[0]
    return head if head in REASONING_EFFORTS else None


def effort_for_reasoning(reasoning: str | None) -> str | None:
    """Reasoning ``off`` rows have no chain of thought, which Harmony writes as the lowest effort; ``on`` (or
    unknown) keeps the default. Harmony has no "off", so `source_reasoning` keeps the original switch."""
    return "low" if (reasoning or "").strip().lower() == "off" else None


def difficulty_from_correctness(correctness: float | None) -> str | None:
    """A problem most samples solve is easy (``low``), one few solve is hard (``high``); thresholds match the
    high/low correctness pools of DESIGN.md section 3."""
    if correctness is None:
        return None
    if correctness >= EASY_AT_LEAST:
        return "low"
    if correctness <= HARD_AT_MOST:
        return "high"
    return "medium"


# --- the record -----------------------------------------------------------------------------------------------------


def canonical_tools_json(tools: list[ToolSpec]) -> str:
    """Tools as sorted-key compact JSON, so the same tool set always hashes to the same `source_tools_id`."""
    payload = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha1_hex(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def tool_schema_problems(tools: list[ToolSpec]) -> list[str]:
    """Why the tool declarations are unusable: a function's parameters must be a JSON-schema object (or absent)."""
    problems = []
    for tool in tools:
        parameters = tool.parameters
        if parameters is None:
            continue
        if not isinstance(parameters, dict):
            problems.append(f"tool {tool.name!r}: parameters is not a JSON object")
        elif parameters.get("type", "object") != "object":
            problems.append(f"tool {tool.name!r}: parameters has type {parameters.get('type')!r}, not 'object'")
    return problems


@dataclass
class _Rendered:
    text: str
    flags: list[str]
    reasons: list[str]


def _render(row: NormalizedRow) -> _Rendered:
    """Render prelude + messages; never raises for content problems, it flags them instead."""
    effort = row.reasoning_effort or DEFAULT_EFFORT
    try:
        prelude = conversation_prelude(effort, row.instructions, row.tools, python_tool=row.python_tool)
        messages = prelude + row.messages
        text = render_harmony(messages)
    except SpecialTokenError as error:
        return _Rendered("", ["special_token"], [str(error)])
    except HarmonyError as error:  # bad tool name, header field, lone surrogate, non-JSON schema default
        return _Rendered("", ["unrenderable"], [str(error)])
    reasons = validate_messages(messages)
    return _Rendered(text, [_flag_for(reason) for reason in reasons], reasons)


def _flag_for(reason: str) -> str:
    """A short, countable code for a validation reason (the reason itself stays in `quality_reason`)."""
    if "not valid JSON" in reason:
        return "tool_arguments_not_json"
    if "no matching call" in reason:
        return "tool_result_without_call"
    if "unknown role" in reason:
        return "unknown_role"
    return "invalid_harmony"


def _tool_counts(messages: list[Message]) -> tuple[int, int, list[str]]:
    """Calls, results and the called tool names in first-call order (``python`` for the built-in tool)."""
    calls = results = 0
    names: list[str] = []
    for message in messages:
        if message.role == "assistant" and message.recipient is not None:
            calls += 1
            name = message.recipient.removeprefix("functions.")
            if name not in names:
                names.append(name)
        elif message.role == "tool":
            results += 1
    return calls, results, names


def _completion_nonempty(messages: list[Message]) -> bool:
    """The assistant answers something: a non-empty final answer, or at least one tool call (an agent turn)."""
    for m in messages:
        if m.role == "assistant" and (m.recipient is not None or (m.channel == "final" and m.content.strip())):
            return True
    return False


def to_record(row: NormalizedRow, dataset: str, split: str | None, file: str | None, row_index: int) -> dict[str, Any]:
    """The shard columns of DESIGN.md section 3 for one normalized row (plus `meta_task`, `quality_flags`,
    `quality_reason` and `source_category` / `source_generator`)."""
    rendered = _render(row)
    schema_problems = tool_schema_problems(row.tools)
    flags = list(dict.fromkeys(row.flags + rendered.flags + (["invalid_tool_schema"] if schema_problems else [])))
    reasons = rendered.reasons + schema_problems
    calls, results, names = _tool_counts(row.messages)
    difficulty = row.meta_difficulty_bin or difficulty_from_correctness(row.meta_correctness)
    text = rendered.text
    return {
        "id": sha1_hex(text),
        "dataset": dataset,
        "split": split,
        "text": text,
        "loss_mode": LOSS_MODE,
        "meta_domain": row.meta_domain,
        "meta_task": row.meta_task,
        "meta_correctness": row.meta_correctness,
        "meta_pass_k": row.meta_pass_k,
        "meta_correct_count": row.meta_correct_count,
        "meta_eval_best_setting": row.meta_eval_best_setting,
        "meta_difficulty_bin": difficulty,
        "meta_reasoning_effort": row.reasoning_effort or DEFAULT_EFFORT,
        "meta_tool_call_count": calls,
        "meta_tool_result_count": results,
        "meta_tool_names": names,
        "quality_valid_harmony": not rendered.flags,
        "quality_completion_nonempty": _completion_nonempty(row.messages),
        "quality_valid_tool_schema": not schema_problems,
        "quality_has_tool": calls > 0,
        "quality_is_duplicate": False,
        "quality_flags": flags,
        "quality_reason": "; ".join(reasons) or None,
        "stats_char_len": len(text),
        "stats_approx_tokens": len(text) // 4,
        "source_uuid": row.source_uuid,
        "source_license": row.source_license,
        "source_used_in": row.source_used_in,
        "source_reasoning": row.source_reasoning,
        "source_capability_target": row.source_capability_target,
        "source_category": row.source_category,
        "source_generator": row.source_generator,
        "source_tools_id": sha1_hex(canonical_tools_json(row.tools)) if row.tools else None,
        "source_file": file,
        "source_row": row_index,
    }
