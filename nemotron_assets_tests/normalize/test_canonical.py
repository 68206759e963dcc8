"""The canonical conversation (normalize/canonical.py) and its one conversion to Harmony (normalize/to_harmony.py).

1. Content of every JSON type becomes text, and says what was converted.
2. Tool calls: arguments become a JSON object in source key order; missing ids are generated without collisions;
   results are matched by id, name, then order, and carry the call's id and name.
3. Tools in every accepted form become ``{"type": "function", "function": {...}}``.
4. The Harmony messages of hand-written canonical conversations, written out by hand.
5. Properties: random argument objects keep their key order through the canonical form, its JSON text and the
   Harmony call; random JSON content reads back as the same value.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.formats.harmony import JSON_CONTENT_TYPE, Message, ToolSpec
from nemotron_assets.normalize.base import RowError
from nemotron_assets.normalize.canonical import (
    canonical_messages,
    canonical_tools,
    content_text,
    json_text,
    split_think,
)
from nemotron_assets.normalize.to_harmony import harmony_conversation


def call(name: str, arguments: str) -> Message:
    return Message("assistant", arguments, "commentary", f"functions.{name}", JSON_CONTENT_TYPE)


def result(name: str, output: str) -> Message:
    return Message("tool", output, "commentary", "assistant", name=f"functions.{name}")


def one_call(arguments) -> list[dict]:
    """A source conversation of one assistant turn calling ``f`` with `arguments`."""
    return [{"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": arguments}}]}]


# --- 1. content -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text", "converted"),
    [
        (None, "", None),
        ("as is ", "as is ", None),
        ({"b": 1, "a": [1, "é"]}, '{"a":[1,"é"],"b":1}', "object"),
        ([{"type": "text", "text": "a"}, {"text": "b"}, "c"], "abc", "text_parts"),
        ([], "", "text_parts"),
        ([{"type": "image_url", "image_url": {"url": "u"}}], '[{"image_url":{"url":"u"},"type":"image_url"}]', "list"),
        ([1, 2], "[1,2]", "list"),
        (3, "3", "scalar"),
        (True, "true", "scalar"),
    ],
)
def test_content_of_every_json_type_becomes_text(value, text, converted):
    assert content_text(value) == (text, converted)


def test_converted_content_is_flagged_and_the_row_kept():
    built = canonical_messages([
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "1", "content": {"ok": True}},
        {"role": "assistant", "content": 42},
    ])
    assert built.flags == ["content_parts_as_text", "content_object_as_json", "content_scalar_as_text"]
    assert [m["content"] for m in built.messages] == ["q", "", '{"ok":true}', "42"]


# --- 2. roles, calls and results ------------------------------------------------------------------------------------


def test_roles_developer_ipython_and_function_have_canonical_names():
    built = canonical_messages([
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}]},
        {"role": "ipython", "content": "r1"},
    ])
    assert [m["role"] for m in built.messages] == ["system", "user", "assistant", "tool"]
    assert built.messages[2]["tool_calls"][0]["function"]["arguments"] == {}  # no arguments: an empty object


@pytest.mark.parametrize(("raw", "field"), [
    ("not a list", "messages"), (None, "messages"), ([], "messages"), ([1], "messages[0]"),
    ([{"role": "narrator", "content": "x"}], "messages[0].role"),
    ([{"role": "assistant", "tool_calls": {"id": 1}}], "messages[0].tool_calls"),
    ([{"role": "assistant", "tool_calls": [{"function": {}}]}], "messages[0].tool_calls[0].function.name"),
])
def test_unreadable_conversations_name_the_field(raw, field):
    with pytest.raises(RowError) as error:
        canonical_messages(raw)
    assert error.value.field == field


def test_string_arguments_are_parsed_in_source_key_order():
    built = canonical_messages(one_call('{"zeta": 1, "alpha": {"y": 2, "x": 3}}'))
    arguments = built.messages[0]["tool_calls"][0]["function"]["arguments"]
    assert list(arguments) == ["zeta", "alpha"] and list(arguments["alpha"]) == ["y", "x"]
    assert json_text(arguments) == '{"zeta":1,"alpha":{"y":2,"x":3}}'


@pytest.mark.parametrize(("arguments", "flag"), [
    ("{city: Rome", "tool_arguments_not_json"), ("", "tool_arguments_not_json"),
    ("[1, 2]", "tool_arguments_not_object"), ([1, 2], "tool_arguments_not_object"),
    ('"x"', "tool_arguments_not_object"),
])
def test_arguments_that_are_not_an_object_are_kept_as_given_and_flagged(arguments, flag):
    built = canonical_messages(one_call(arguments))
    assert built.messages[0]["tool_calls"][0]["function"]["arguments"] == arguments
    assert built.flags == [flag] and "messages[0].tool_calls[0].function.arguments" in built.reasons[0]


def test_missing_call_ids_are_generated_and_never_collide_with_source_ids():
    calls = [{"function": {"name": "a"}}, {"id": "call_0", "function": {"name": "b"}}, {"function": {"name": "c"}}]
    built = canonical_messages([{"role": "assistant", "tool_calls": calls}])
    assert [c["id"] for c in built.messages[0]["tool_calls"]] == ["call_0_1", "call_0", "call_2"]
    assert all(c["type"] == "function" for c in built.messages[0]["tool_calls"])


def test_results_are_matched_by_id_then_name_then_order_and_carry_the_calls_id_and_name():
    calls = [{"id": "w", "function": {"name": "weather"}}, {"id": "t", "function": {"name": "time"}},
             {"id": "n", "function": {"name": "news"}}, {"id": "s", "function": {"name": "stocks"}}]
    built = canonical_messages([
        {"role": "assistant", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "n", "content": "by id"},
        {"role": "tool", "name": "stocks", "content": "by name"},
        {"role": "tool", "content": "by order"},
        {"role": "function", "content": "by order too"},
        {"role": "tool", "tool_call_id": "gone", "name": "weather", "content": "answers nothing"},
    ])
    results = [(m["content"], m["tool_call_id"], m["name"]) for m in built.messages[1:]]
    assert results == [("by id", "n", "news"), ("by name", "s", "stocks"), ("by order", "w", "weather"),
                       ("by order too", "t", "time"), ("answers nothing", "gone", "weather")]


def test_think_tags_are_split_only_when_asked_and_only_without_reasoning_content():
    raw = [{"role": "assistant", "content": "<think>\nr\n</think>\n\na"},
           {"role": "assistant", "content": "<think>x</think>y", "reasoning_content": "given"}]
    assert canonical_messages(raw).messages == [
        {"role": "assistant", "content": "a", "reasoning_content": "r"},
        {"role": "assistant", "content": "<think>x</think>y", "reasoning_content": "given"},
    ]
    assert canonical_messages(raw, split_think_tags=False).messages[0] == raw[0]


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("<think>a</think>b", ("a", "b")),
        ("<think>\na\n</think>\n\nb", ("a", "b")),
        ("a</think>b", ("a", "b")),
        ("no thought", ("", "no thought")),
        ("<think></think>b", ("", "b")),
    ],
)
def test_split_think(text, parts):
    assert split_think(text) == parts


# --- 3. tools -------------------------------------------------------------------------------------------------------

WEATHER_FUNCTION = {"name": "w", "description": "d", "parameters": {"type": "object", "properties": {}}, "strict": True}


@pytest.mark.parametrize("raw", [
    [{"type": "function", "function": WEATHER_FUNCTION}],
    [WEATHER_FUNCTION],
    [{"type": "function", **WEATHER_FUNCTION}],
    json.dumps([{"type": "function", "function": WEATHER_FUNCTION}]),
    [{"type": "function", "function": {**WEATHER_FUNCTION, "parameters": json.dumps(WEATHER_FUNCTION["parameters"])}}],
])
def test_every_tool_form_becomes_the_wrapped_function_with_its_keys_kept(raw):
    assert canonical_tools(raw) == [{"type": "function", "function": WEATHER_FUNCTION}]


@pytest.mark.parametrize(("raw", "field"), [
    ("[not json", "tools"), ({"name": "w"}, "tools"), ([1], "tools[0]"),
    ([{"description": "x"}], "tools[0].function.name"),
])
def test_unreadable_tools_name_the_field(raw, field):
    with pytest.raises(RowError) as error:
        canonical_tools(raw)
    assert error.value.field == field


# --- 4. canonical -> Harmony ----------------------------------------------------------------------------------------


def test_harmony_of_a_tool_conversation_written_by_hand():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "  "},
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": " Checking. ", "reasoning_content": " Need the tool. ", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "weather", "arguments": {"z": 1, "a": "é"}}}]},
        {"role": "tool", "content": "21", "tool_call_id": "1", "name": "weather"},
        {"role": "tool", "content": "stray", "tool_call_id": None, "name": None},
        {"role": "assistant", "content": "<think>sum up</think> 21 °C"},
    ]
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    conversation = harmony_conversation(messages, tools)
    assert conversation.instructions == "Be brief."
    assert conversation.tools == [ToolSpec("weather", "", {"type": "object"})]
    assert conversation.messages == [
        Message.user("Paris?"),
        Message.analysis("Need the tool."),
        Message.commentary("Checking."),
        call("weather", '{"z":1,"a":"é"}'),
        result("weather", "21"),
        result("unknown", "stray"),
        Message.analysis("sum up"),
        Message.final("21 °C"),
    ]
    assert not conversation.python_tool


def test_python_tool_calls_become_the_builtin_python_tool_and_leave_the_function_tools():
    messages = [
        {"role": "user", "content": "primes < 10?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "stateful_python_code_exec",
                                                         "arguments": {"code": "print(4)"}}}]},
        {"role": "tool", "content": "4", "tool_call_id": "a", "name": "stateful_python_code_exec"},
        {"role": "assistant", "content": "\\boxed{4}"},
    ]
    tools = [{"type": "function", "function": {"name": "stateful_python_code_exec", "parameters": {}}}]
    conversation = harmony_conversation(messages, tools)
    assert conversation.messages[1:] == [
        Message.python_call("print(4)"), Message.python_result("4"), Message.final("\\boxed{4}")]
    assert conversation.python_tool and conversation.tools == []


# --- 5. properties --------------------------------------------------------------------------------------------------

KEYS = st.text(min_size=1, max_size=8)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(arguments=st.dictionaries(KEYS, JSON_VALUES, max_size=6), as_string=st.booleans())
def test_argument_key_order_survives_the_canonical_form_its_json_and_harmony(arguments, as_string):
    source = json.dumps(arguments) if as_string else arguments
    built = canonical_messages(one_call(source))
    canonical = built.messages[0]["tool_calls"][0]["function"]["arguments"]
    assert list(canonical) == list(arguments) and canonical == arguments
    stored = json.loads(json_text(built.messages))[0]["tool_calls"][0]["function"]["arguments"]
    assert list(stored) == list(arguments)
    harmony_call = harmony_conversation(built.messages, []).messages[0]
    assert harmony_call.content == json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=150, deadline=None)
@given(value=st.dictionaries(KEYS, JSON_VALUES, max_size=5) | st.lists(JSON_VALUES, min_size=1, max_size=4)
       .filter(lambda items: not all(isinstance(i, str) for i in items)))
def test_json_content_reads_back_as_the_same_value(value):
    text, converted = content_text(value)
    assert json.loads(text) == value and converted in ("object", "list")
