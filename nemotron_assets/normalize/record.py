"""A `NormalizedRow` -> the columns of one normalized shard row (docs/architecture.md §4.3).

The quality and statistics rules live here once instead of in every mapper. The columns (`COLUMNS` is the list the
shard's Parquet schema is built from; kinds: string, float, int, bool, strings = list of strings):

- ``id``: SHA1 of ``text``, the Harmony text rendered from ``messages`` / ``tools`` (``to_harmony.py``).
- ``messages``, ``tools``: the canonical conversation as JSON text, key order kept (``canonical.py``).
- ``dataset``, ``split``: the blend entry and its source split; ``loss_mode``: ``assistant_all``.
- ``meta_domain``, ``meta_task``: math / code / science / ...; the family's task (``mcq``, ``tir``, a split name).
- ``meta_correctness`` (0..1 or null) with ``meta_pass_k``, ``meta_correct_count``, ``meta_eval_best_setting``.
- ``meta_difficulty_bin``: low / medium / high / null (the mapper's, else from correctness).
- ``meta_reasoning_effort``: low / medium / high (``medium`` unless the row or its split says otherwise).
- ``meta_tool_call_count``, ``meta_tool_result_count``, ``meta_tool_names`` (``python`` = the built-in tool).
- ``meta_expected_answer`` (Math-v2, OpenMathReasoning), ``meta_answer_changed_to_majority`` (Math-v2
  ``changed_answer_to_majority``), ``meta_problem_type`` (OpenMathReasoning).
- ``quality_valid_harmony``: no flag of `INVALID_FLAGS`; ``quality_flags`` lists every flag (countable codes such
  as ``content_object_as_json``, ``placeholder_prompt``) and ``quality_reason`` says why in words.
- ``quality_completion_nonempty``: a final answer that is not just whitespace, or at least one tool call.
- ``quality_valid_tool_schema``: every function tool's parameters is a JSON-schema object (or absent).
- ``quality_has_tool``: at least one tool call. ``quality_is_duplicate``: false here, set by dedup.
- ``quality_placeholder_prompt``: a user turn is empty, whitespace or ``"-"`` (a redacted or missing prompt).
- ``stats_char_len``, ``stats_approx_tokens``: the length of ``text`` and that // 4.
- ``source_uuid``, ``source_license``, ``source_used_in``, ``source_reasoning``, ``source_capability_target``,
  ``source_category``, ``source_generators``: provenance as the dataset gives it (``generator`` split on commas).
- ``source_origin``: where the problem came from (Math-v2 ``data_source``, Competitive-Programming and Math-Proofs
  ``source``, OpenMathReasoning ``problem_source``).
- ``source_difficulty`` (Competitive-Programming's label as written), ``source_question_id``.
- ``source_ref_dataset``, ``source_ref_split``, ``source_ref_index``: the row a redacted prompt comes from
  (Competitive-Programming columns, Post-Training v1 ``code`` metadata), so a later step can restore it.
- ``source_tools_id``: SHA1 of the canonical JSON (sorted keys) of ``tools``; null without tools.
- ``source_file``, ``source_row``: where the raw row is.
"""

import json
from functools import lru_cache
from typing import Any

from nemotron_assets.formats.harmony import (
    HarmonyError,
    Message,
    SpecialTokenError,
    ToolSpec,
    conversation_prelude,
    render_harmony,
    validate_messages,
)
from nemotron_assets.normalize.base import DEFAULT_EFFORT, NormalizedRow, difficulty_from_correctness
from nemotron_assets.normalize.canonical import canonical_json, json_text, sha1_hex
from nemotron_assets.normalize.to_harmony import HarmonyConversation, harmony_conversation

LOSS_MODE = "assistant_all"
#: A prompt that says nothing: the code sets redact prompts as "-" (Competitive-Programming, Post-Training v1
#: ``code``), the chat set leaves some empty.
PLACEHOLDER_PROMPTS = ("", "-")
#: Flags that make ``quality_valid_harmony`` false: the text cannot be stored (special token, unrenderable) or does
#: not say what the source said (arguments that are not a JSON object, a result without a call, raw TIR tags).
INVALID_FLAGS = frozenset({
    "special_token", "unrenderable", "tool_arguments_not_json", "tool_arguments_not_object",
    "tool_result_without_call", "unknown_role", "invalid_harmony", "tir_unparsed_tool_call",
})

COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "string"), ("dataset", "string"), ("split", "string"), ("text", "string"), ("messages", "string"),
    ("tools", "string"), ("loss_mode", "string"),
    ("meta_domain", "string"), ("meta_task", "string"), ("meta_correctness", "float"), ("meta_pass_k", "int"),
    ("meta_correct_count", "int"), ("meta_eval_best_setting", "string"), ("meta_difficulty_bin", "string"),
    ("meta_reasoning_effort", "string"), ("meta_tool_call_count", "int"), ("meta_tool_result_count", "int"),
    ("meta_tool_names", "strings"), ("meta_expected_answer", "string"), ("meta_answer_changed_to_majority", "bool"),
    ("meta_problem_type", "string"),
    ("quality_valid_harmony", "bool"), ("quality_completion_nonempty", "bool"), ("quality_valid_tool_schema", "bool"),
    ("quality_has_tool", "bool"), ("quality_placeholder_prompt", "bool"), ("quality_is_duplicate", "bool"),
    ("quality_flags", "strings"), ("quality_reason", "string"),
    ("stats_char_len", "int"), ("stats_approx_tokens", "int"),
    ("source_uuid", "string"), ("source_license", "string"), ("source_used_in", "strings"),
    ("source_reasoning", "string"), ("source_capability_target", "string"), ("source_category", "string"),
    ("source_generators", "strings"), ("source_origin", "string"), ("source_difficulty", "string"),
    ("source_question_id", "string"), ("source_ref_dataset", "string"), ("source_ref_split", "string"),
    ("source_ref_index", "string"), ("source_tools_id", "string"), ("source_file", "string"), ("source_row", "int"),
)


def to_record(row: NormalizedRow, dataset: str, split: str | None, file: str | None, row_index: int) -> dict[str, Any]:
    """The shard columns (`COLUMNS`) of one normalized row."""
    conversation = harmony_conversation(row.messages, row.tools)
    effort = row.reasoning_effort or DEFAULT_EFFORT
    tools_json = json_text(row.tools)
    text, render_flags, render_reasons = _render(conversation, effort, tools_json)
    schema_problems = tool_schema_problems(conversation.tools)
    placeholder = has_placeholder_prompt(row.messages) or "placeholder_prompt" in row.flags
    flags = list(dict.fromkeys(
        row.flags + render_flags + (["invalid_tool_schema"] if schema_problems else [])
        + (["placeholder_prompt"] if placeholder else [])
    ))
    reasons = row.reasons + render_reasons + schema_problems
    calls, results, names = _tool_counts(conversation.messages)
    return {
        "id": sha1_hex(text),
        "dataset": dataset,
        "split": split,
        "text": text,
        "messages": json_text(row.messages),
        "tools": tools_json,
        "loss_mode": LOSS_MODE,
        "meta_domain": row.meta_domain,
        "meta_task": row.meta_task,
        "meta_correctness": row.meta_correctness,
        "meta_pass_k": row.meta_pass_k,
        "meta_correct_count": row.meta_correct_count,
        "meta_eval_best_setting": row.meta_eval_best_setting,
        "meta_difficulty_bin": row.meta_difficulty_bin or difficulty_from_correctness(row.meta_correctness),
        "meta_reasoning_effort": effort,
        "meta_tool_call_count": calls,
        "meta_tool_result_count": results,
        "meta_tool_names": names,
        "meta_expected_answer": row.meta_expected_answer,
        "meta_answer_changed_to_majority": row.meta_answer_changed_to_majority,
        "meta_problem_type": row.meta_problem_type,
        "quality_valid_harmony": not INVALID_FLAGS.intersection(flags),
        "quality_completion_nonempty": _completion_nonempty(conversation.messages),
        "quality_valid_tool_schema": not schema_problems,
        "quality_has_tool": calls > 0,
        "quality_placeholder_prompt": placeholder,
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
        "source_generators": row.source_generators,
        "source_origin": row.source_origin,
        "source_difficulty": row.source_difficulty,
        "source_question_id": row.source_question_id,
        "source_ref_dataset": row.source_ref_dataset,
        "source_ref_split": row.source_ref_split,
        "source_ref_index": row.source_ref_index,
        "source_tools_id": _tools_id(row.tools),
        "source_file": file,
        "source_row": row_index,
    }


def _render(conversation: HarmonyConversation, effort: str, tools_json: str) -> tuple[str, list[str], list[str]]:
    """Harmony text, flags and reasons; never raises for content problems (an unstorable row keeps ``text=""``)."""
    try:
        messages = _prelude(conversation, effort, tools_json) + conversation.messages
        text = render_harmony(messages)
    except SpecialTokenError as error:
        return "", ["special_token"], [str(error)]
    except HarmonyError as error:  # bad tool name, header field, lone surrogate, non-JSON schema default
        return "", ["unrenderable"], [str(error)]
    reasons = validate_messages(messages)
    return text, [_flag_for(reason) for reason in reasons], reasons


#: Preludes already built, by (effort, instructions, tools JSON, python tool): the rows of a dataset share a few
#: tool sets, and writing a tool set's TypeScript-like declarations is a large part of rendering a tool row.
_PRELUDES: dict[tuple[str, str | None, str, bool], list[Message]] = {}
_PRELUDES_KEPT = 256


def _prelude(conversation: HarmonyConversation, effort: str, tools_json: str) -> list[Message]:
    key = (effort, conversation.instructions, tools_json, conversation.python_tool)
    prelude = _PRELUDES.get(key)
    if prelude is None:
        prelude = conversation_prelude(effort, conversation.instructions, conversation.tools,
                                       python_tool=conversation.python_tool)
        if len(_PRELUDES) >= _PRELUDES_KEPT:
            _PRELUDES.clear()
        _PRELUDES[key] = prelude
    return prelude


def _tools_id(tools: list[dict[str, Any]]) -> str | None:
    """SHA1 of the canonical JSON (sorted keys) of ``tools``; None without tools. The canonical JSON of a list is
    its items' canonical JSON, joined: each tool's is sorted once (`_canonical_tool`), whatever set it comes in."""
    if not tools:
        return None
    return sha1_hex("[" + ",".join(map(_canonical_tool, tools)) + "]")


def _canonical_tool(tool: dict[str, Any]) -> str:
    """``canonical_json(tool)``, kept by the tool's stored JSON. The rows of a dataset combine a few tools into many
    tool sets (the bench's 10,000 Agentic rows: 12 tools, 4,265 sets), and sorting each new set's keys cost about a
    sixth of an Agentic row's normalizing. The stored JSON determines the tool (key order kept, 1 and 1.0 apart),
    except that it writes NaN and the infinities as ``null`` (`json_text`): a tool whose text holds ``null`` is
    sorted every time."""
    text = json_text(tool)
    return canonical_json(tool) if "null" in text else _canonical_tool_of_text(text)


@lru_cache(maxsize=4096)
def _canonical_tool_of_text(text: str) -> str:
    return canonical_json(json.loads(text))  # json, not orjson: it reads the \u escapes of a lone surrogate back


def _flag_for(reason: str) -> str:
    """A short, countable code for a validation reason (the reason itself stays in `quality_reason`)."""
    if "not valid JSON" in reason:
        return "tool_arguments_not_json"
    if "no matching call" in reason:
        return "tool_result_without_call"
    if "unknown role" in reason:
        return "unknown_role"
    return "invalid_harmony"


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


def has_placeholder_prompt(messages: list[dict[str, Any]]) -> bool:
    """A user turn that is empty, whitespace or ``"-"``: the conversation answers a prompt we do not have."""
    return any(m["role"] == "user" and m["content"].strip() in PLACEHOLDER_PROMPTS for m in messages)


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
    """The assistant answers something: a final answer that is not just whitespace, or at least one tool call."""
    for m in messages:
        if m.role == "assistant" and (m.recipient is not None or (m.channel == "final" and m.content.strip())):
            return True
    return False
