"""Shard records (normalize/record.py): columns, quality rules, ids, and the Harmony text against openai-harmony.

Expected values are written by hand (canonical JSON strings, SHA1 of them via hashlib) or come from openai-harmony
rendering a conversation built with the library's own API.
"""

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import Author, Conversation, RenderConversationConfig, Role, TextContent
from openai_harmony import Message as LibraryMessage

from nemotron_assets.defs.harmony.build import SCHEMA
from nemotron_assets.normalize.base import NormalizedRow
from nemotron_assets.normalize.canonical import assistant, canonical_json
from nemotron_assets.normalize.families import normalize_row
from nemotron_assets.normalize.record import COLUMNS, INVALID_FLAGS, _tools_id, has_placeholder_prompt, to_record
from nemotron_assets_tests.harmony_reference import library_developer, library_system
from nemotron_assets_tests.json_strategies import json_values

FIXTURES = Path(__file__).parent / "fixtures"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                                                                                       "enum": ["c", "f"]}},
                   "required": ["city"]}}}
#: The same tool with every object's keys in another order, nested properties included.
WEATHER_REORDERED = {"function": {
    "parameters": {"required": ["city"], "properties": {"unit": {"enum": ["c", "f"], "type": "string"},
                                                        "city": {"type": "string"}}, "type": "object"},
    "description": "Current weather.", "name": "get_weather"}, "type": "function"}
#: Canonical JSON of [WEATHER] written by hand: sorted keys at every level, no whitespace.
WEATHER_CANONICAL = ('[{"function":{"description":"Current weather.","name":"get_weather","parameters":'
                     '{"properties":{"city":{"type":"string"},"unit":{"enum":["c","f"],"type":"string"}},'
                     '"required":["city"],"type":"object"}},"type":"function"}]')
CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def record(raw: dict, family: str = "openai_chat", split: str | None = None) -> dict:
    return normalize_row(family, raw, dataset="d", split=split, file="f.jsonl", row_index=7)


def fixture(family: str, index: int) -> dict:
    return json.loads((FIXTURES / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()[index])


# --- columns --------------------------------------------------------------------------------------------------------


def test_record_columns_are_the_declared_columns_and_the_parquet_schema():
    rec = record({"messages": CHAT, "tools": [WEATHER]})
    assert list(rec) == [name for name, _ in COLUMNS] == SCHEMA.names


def test_tools_id_is_the_sha1_of_hand_written_canonical_json_in_any_key_order():
    expected = hashlib.sha1(WEATHER_CANONICAL.encode()).hexdigest()
    assert record({"messages": CHAT, "tools": [WEATHER]})["source_tools_id"] == expected
    assert record({"messages": CHAT, "tools": [WEATHER_REORDERED]})["source_tools_id"] == expected
    assert record({"messages": CHAT})["source_tools_id"] is None


#: JSON values a tool may hold: floats of any size (NaN and the infinities included), integers past 64 bits, text
#: with lone surrogates (the stored JSON escapes them), keys in any order.
JSON_VALUES = json_values(max_leaves=8)
TOOLS = st.lists(st.builds(lambda name, rest: {"type": "function", "function": {"name": name, **rest}},
                           st.sampled_from(["a", "b"]),
                           st.dictionaries(st.sampled_from(["parameters", "description", "x"]), JSON_VALUES)),
                 min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.lists(TOOLS, min_size=1, max_size=4))
def test_tools_id_is_the_sha1_of_the_canonical_json_whatever_rows_came_before(tool_sets):
    """Tools' canonical texts are kept between rows (record.py ``_canonical_tool``): each set's id is still the sha1
    of its own canonical JSON, in a process that has seen any sets before it."""
    for tools in tool_sets:
        expected = hashlib.sha1(canonical_json(tools).encode("utf-8", "surrogatepass")).hexdigest()
        assert _tools_id(tools) == expected


def test_a_null_default_gets_its_own_tools_id_after_a_nan_default():
    """The stored JSON writes NaN as null: a tool with a null default after one with a NaN default must not get the
    first one's id."""
    def tools(default: str) -> list:
        schema = '{"type": "object", "properties": {"x": {"type": "number", "default": ' + default + "}}}"
        return [{"type": "function", "function": {"name": "f", "parameters": schema}}]

    with_nan = record({"messages": CHAT, "tools": tools("NaN")})["source_tools_id"]
    with_null = record({"messages": CHAT, "tools": tools("null")})["source_tools_id"]
    assert with_nan != with_null
    assert with_null == hashlib.sha1(
        b'[{"function":{"name":"f","parameters":{"properties":{"x":{"default":null,"type":"number"}},'
        b'"type":"object"}},"type":"function"}]').hexdigest()


def test_tools_column_keeps_the_source_schema_and_its_key_order():
    rec = record({"messages": CHAT, "tools": [WEATHER_REORDERED]})
    assert rec["tools"] == json.dumps([{"type": "function", "function": WEATHER_REORDERED["function"]}],
                                      separators=(",", ":"))


def test_messages_column_is_the_canonical_conversation_with_argument_order_kept():
    raw = {"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "k", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"unit": "c", "city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "k", "content": "-3"},
        {"role": "assistant", "content": "-3 °C"},
    ], "tools": [WEATHER]}
    assert record(raw)["messages"] == (
        '[{"role":"user","content":"Weather?"},'
        '{"role":"assistant","content":"","tool_calls":[{"id":"k","type":"function","function":'
        '{"name":"get_weather","arguments":{"unit":"c","city":"Oslo"}}}]},'
        '{"role":"tool","content":"-3","tool_call_id":"k","name":"get_weather"},'
        '{"role":"assistant","content":"-3 °C"}]'
    )


def test_id_and_stats_follow_the_text_and_records_are_deterministic():
    first, second = record({"messages": CHAT}), record({"messages": CHAT})
    assert first == second
    assert first["id"] == hashlib.sha1(first["text"].encode()).hexdigest()
    assert (first["stats_char_len"], first["stats_approx_tokens"]) == (len(first["text"]), len(first["text"]) // 4)
    assert (first["loss_mode"], first["quality_is_duplicate"], first["source_file"], first["source_row"]) == (
        "assistant_all", False, "f.jsonl", 7)


# --- quality --------------------------------------------------------------------------------------------------------


def test_default_reasoning_effort_is_medium():
    rec = record({"messages": CHAT})
    assert rec["meta_reasoning_effort"] == "medium"
    assert "\n\nReasoning: medium\n\n" in rec["text"]


@pytest.mark.parametrize("answer", ["", "   ", "\n\t "])
def test_empty_or_whitespace_answer_is_an_empty_completion(answer):
    rec = record({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": answer}]})
    assert rec["quality_completion_nonempty"] is False and rec["quality_valid_harmony"] is True


def test_a_tool_call_alone_is_a_completion():
    raw = {"messages": [{"role": "user", "content": "x"},
                        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "get_weather"}}]}],
           "tools": [WEATHER]}
    assert record(raw)["quality_completion_nonempty"] is True


@pytest.mark.parametrize(("prompt", "placeholder"), [
    ("", True), ("   ", True), ("-", True), (" -\n", True), ("--", False), ("?", False), ("- a", False)])
def test_placeholder_prompts_are_flagged_and_kept(prompt, placeholder):
    rec = record({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": "a"}]})
    assert rec["quality_placeholder_prompt"] is placeholder
    assert ("placeholder_prompt" in rec["quality_flags"]) is placeholder
    assert rec["quality_valid_harmony"] is True


def test_a_placeholder_in_a_later_user_turn_counts_and_documents_have_none():
    later = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "-"},
             {"role": "assistant", "content": "b"}]
    assert has_placeholder_prompt(later) is True
    assert has_placeholder_prompt([assistant("a document")]) is False


@pytest.mark.parametrize("token", ["<|end|>", "<|endofprompt|>", "<|reserved_200013|>", "<|startoftext|>"])
def test_a_special_token_literal_makes_the_row_invalid_with_empty_text(token):
    rec = record({"messages": [{"role": "user", "content": f"what is {token}?"}, CHAT[1]]})
    assert rec["quality_valid_harmony"] is False and rec["quality_flags"] == ["special_token"]
    assert rec["text"] == "" and token in rec["quality_reason"]


@pytest.mark.parametrize("flag", sorted(INVALID_FLAGS))
def test_every_invalid_flag_makes_the_row_invalid(flag):
    row = NormalizedRow(messages=list(CHAT), flags=[flag])
    assert to_record(row, "d", None, None, 0)["quality_valid_harmony"] is False


def test_informational_flags_keep_the_row_valid():
    row = NormalizedRow(messages=list(CHAT), flags=["content_object_as_json", "metadata_not_json"])
    rec = to_record(row, "d", None, None, 0)
    assert rec["quality_valid_harmony"] is True and rec["quality_flags"] == row.flags


def test_tool_schema_that_is_not_an_object_is_flagged():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}
    rec = record({"tools": [bad], "messages": CHAT})
    assert rec["quality_valid_tool_schema"] is False and "invalid_tool_schema" in rec["quality_flags"]


def test_lone_surrogate_is_flagged_unrenderable_and_the_messages_column_still_stores():
    rec = record({"messages": [{"role": "user", "content": "bad \ud800"}, {"role": "assistant", "content": "c"}]})
    assert rec["quality_valid_harmony"] is False and rec["quality_flags"] == ["unrenderable"]
    rec["messages"].encode("utf-8")  # escaped, so the Parquet column can hold it
    assert json.loads(rec["messages"])[0]["content"] == "bad \ud800"


# --- the text is what openai-harmony renders ------------------------------------------------------------------------


def library(role: str, text: str, channel=None, recipient=None, content_type=None, name=None) -> LibraryMessage:
    message = LibraryMessage.from_author_and_content(Author(role=Role(role), name=name), TextContent(text=text))
    message.channel, message.recipient, message.content_type = channel, recipient, content_type
    return message


def library_text(encoding, messages) -> str:
    tokens = encoding.render_conversation_for_training(Conversation.from_messages(messages),
                                                       RenderConversationConfig(auto_drop_analysis=False))
    return encoding.decode_utf8(tokens)


def test_tir_row_renders_as_openai_harmony_renders_the_same_conversation(harmony_encoding):
    rec = normalize_row("open_math_reasoning", fixture("open_math_reasoning", 2), dataset="d", split="tir",
                        file=None, row_index=2)
    expected = library_text(harmony_encoding, [
        library_system("medium", python_tool=True),
        library("user", "How many divisors does 360 have?"),
        library("assistant", "Factor first.", "analysis"),
        library("assistant", "from sympy import factorint\nprint(factorint(360))", "analysis", "python", "code"),
        library("tool", "{2: 3, 3: 2, 5: 1}", "analysis", "assistant", name="python"),
        library("assistant", "So (3+1)(2+1)(1+1).", "analysis"),
        library("assistant", "print(4*3*2)", "analysis", "python", "code"),
        library("tool", "24", "analysis", "assistant", name="python"),
        library("assistant", "**Final Answer**\n\\boxed{24}", "final"),
    ])
    assert rec["text"] == expected


def test_agentic_row_renders_as_openai_harmony_renders_the_same_conversation(harmony_encoding):
    from nemotron_assets.formats.harmony import ToolSpec

    rec = normalize_row("nemotron_agentic", fixture("nemotron_agentic", 1), dataset="d", split="interactive_agent",
                        file=None, row_index=1)
    flight = fixture("nemotron_agentic", 1)["tools"][0]["function"]
    expected = library_text(harmony_encoding, [
        library_system("medium"),
        library_developer("You are a travel agent.", (ToolSpec(flight["name"], flight["description"],
                                                               flight["parameters"]),)),
        library("user", "Book me a flight from SFO to JFK on 2025-03-01."),
        library("assistant", "All three fields are given.", "analysis"),
        library("assistant", "Let me book that for you.", "commentary"),
        library("assistant", '{"origin":"SFO","destination":"JFK","date":"2025-03-01"}', "commentary",
                "functions.book_flight", "<|constrain|>json"),
        library("tool", '{"status": "confirmed", "ref": "XK42"}', "commentary", "assistant",
                name="functions.book_flight"),
        library("assistant", "Booked: confirmation XK42.", "final"),
    ])
    assert rec["text"] == expected
