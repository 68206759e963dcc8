"""Harmony text (docs/architecture.md §4.3).

1. Parity: for conversations covering every construct, our text equals openai-harmony's training render, and the
   library's parser reads our text (encoded with special tokens) into the same messages as our parser.
2. Round trips: parse(render(x)) == x for any message the renderer accepts.
3. Content holding a special-token literal is refused.
4. validate_harmony names what is wrong.
"""

import json
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from openai_harmony import (
    Conversation,
    RenderConversationConfig,
)
from openai_harmony import Message as LibraryMessage

from nemotron_assets.formats.harmony import (
    CHANNELS,
    HARMONY_SPECIAL_TOKENS,
    JSON_CONTENT_TYPE,
    LITERALS,
    ROLES,
    HarmonyError,
    HarmonyParseError,
    HarmonyRenderError,
    Message,
    SpecialTokenError,
    ToolSpec,
    conversation_prelude,
    developer_content,
    find_special_token,
    parse_harmony,
    render_harmony,
    system_content,
    validate_harmony,
    validate_messages,
)
from nemotron_assets_tests.harmony_reference import from_library, library_developer, library_system, to_library
from nemotron_assets_tests.json_strategies import json_values

# --- the reference: openai-harmony ----------------------------------------------------------------------------------


def library_text(encoding, messages: list[LibraryMessage]) -> str:
    """What openai-harmony renders for training, analysis kept, decoded as UTF-8."""
    config = RenderConversationConfig(auto_drop_analysis=False)
    return encoding.decode_utf8(encoding.render_conversation_for_training(Conversation.from_messages(messages), config))


def library_parse(encoding, text: str) -> list[Message]:
    """The library's reading of `text`, tokenized with special tokens as tokens, as our messages."""
    parsed = encoding.parse_messages_from_completion_tokens(encoding.encode(text, allowed_special="all"))
    return [from_library(message) for message in parsed]


# --- tools of every JSON-schema shape -------------------------------------------------------------------------------

GET_LOCATION = ToolSpec("get_location", "Gets the location of the user.")  # no arguments at all
GET_WEATHER = ToolSpec(
    "get_current_weather",
    "Gets the current weather in the provided location.",
    {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["location"],
    },
)
GET_WEATHERS = ToolSpec(
    "get_multiple_weathers",
    "Gets the current weather in the provided list of locations.",
    {
        "type": "object",
        "properties": {
            "locations": {"type": "array", "items": {"type": "string"}, "description": "List of city and state"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["locations"],
    },
)
KITCHENSINK = ToolSpec(
    "kitchensink",
    "A function with various complex schemas.",
    {
        "type": "object",
        "description": "params object",
        "properties": {
            "string": {"type": "string", "title": "STRING", "description": "A string", "examples": ["hello", "world"]},
            "string_nullable": {
                "type": "string",
                "nullable": True,
                "description": "A nullable string",
                "default": "the default",
            },
            "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
            "oneof_string_or_number": {
                "oneOf": [
                    {"type": "string", "default": "default_string_in_oneof"},
                    {"type": "number", "description": "numbers can happen too"},
                ],
                "description": "a oneof",
                "default": 20,
            },
            "oneof_repeating_its_description": {
                "oneOf": [{"type": "integer", "description": "same"}, {"type": "boolean", "description": "other"}],
                "description": "same",
            },
        },
    },
)
BOOK_TRIP = ToolSpec(
    "book_trip",
    "Books a trip.\nAsks before paying.",
    {
        "type": "object",
        "description": "Trip request",
        "properties": {
            "traveler": {
                "type": "object",
                "description": "Who travels",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
                "required": ["name"],
            },
            "legs": {
                "type": "array",
                "items": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}},
            },
            "class": {"type": "string", "enum": ["economy", "business"], "default": "economy"},
            "budget": {"type": ["number", "null"], "default": 1e20},
            "ratio": {"type": "number", "default": 1e-7},
            "seats": {"type": "integer", "enum": [1, 2, 3], "default": 2},
            "flexible": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "options": {"type": "object", "default": {"seat": "aisle", "meals": [1, 2.5, None]}},
            "notes": {"description": "free-form, any type"},
            "raw": True,
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "anything": {"type": "array"},
            "größe": {"type": "string", "description": "Größe 大小 🚀", "default": "mittel"},
        },
        "required": ["traveler", "legs"],
    },
)
PING = ToolSpec("ping", "", {})  # an empty schema is "any"
NOOP = ToolSpec("noop", "Takes an empty object.", {"type": "object", "properties": {}})
LOOKUP = ToolSpec(
    "lookup",
    "Looks up by id or by name.\r\nWindows line ends.\r",
    {
        "oneOf": [
            {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "description": "by id"},
            {"type": "string", "enum": ["me"], "default": "me"},
        ]
    },
)
ALL_TOOLS = (GET_LOCATION, GET_WEATHER, GET_WEATHERS, KITCHENSINK, BOOK_TRIP, PING, NOOP, LOOKUP)


# --- conversations covering every construct -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A conversation both as our messages and as openai-harmony's."""

    effort: str | None = "medium"
    instructions: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    python_tool: bool = False
    body: tuple[Message, ...] = ()

    def ours(self) -> list[Message]:
        prelude = conversation_prelude(self.effort, self.instructions, self.tools, python_tool=self.python_tool)
        return prelude + list(self.body)

    def library(self) -> list[LibraryMessage]:
        messages = [library_system(self.effort, python_tool=self.python_tool)]
        if self.instructions is not None or self.tools:
            messages.append(library_developer(self.instructions, self.tools))
        return messages + [to_library(message) for message in self.body]


QA = (Message.user("What is 2 + 2?"), Message.analysis("Simple arithmetic."), Message.final("4"))
WEATHER_CALL = Message.function_call("get_current_weather", '{"location":"Paris, FR"}')
WEATHER_RESULT = Message.function_result("get_current_weather", '{"temp_c": 21, "sky": "clear"}')

CASES = {
    **{f"effort_{effort}": Case(effort=effort, body=QA) for effort in ("low", "medium", "high", None)},
    "developer_instructions_only": Case(instructions="Answer in riddles.\nNever lie.", body=QA),
    "developer_empty_instructions": Case(instructions="", body=QA),
    "developer_tools_only": Case(tools=ALL_TOOLS, body=QA),
    "developer_instructions_and_every_tool_shape": Case(effort="high", instructions="Be brief.", tools=ALL_TOOLS),
    "multi_turn": Case(
        body=QA + (Message.user("And 3 + 3?"), Message.analysis("Again simple."), Message.final("6"))
    ),
    "tool_call_result_final": Case(
        instructions="Use tools.",
        tools=(GET_WEATHER,),
        body=(
            Message.user("Weather in Paris?"),
            Message.analysis("Need the weather tool."),
            Message.commentary("Checking the weather now."),
            WEATHER_CALL,
            WEATHER_RESULT,
            Message.final("21 °C and clear."),
        ),
    ),
    "multiple_tool_calls": Case(
        tools=(GET_LOCATION, GET_WEATHER),
        body=(
            Message.user("Weather here and in Paris?"),
            Message.analysis("Two calls."),
            Message.function_call("get_location", "{}"),
            WEATHER_CALL,
            Message.function_result("get_location", '"Lyon, FR"'),
            WEATHER_RESULT,
            Message.function_call("get_current_weather", '{"location":"Lyon, FR","format":"celsius"}'),
            Message.function_result("get_current_weather", '{"temp_c": 18}'),
            Message.final("Lyon 18 °C, Paris 21 °C."),
        ),
    ),
    "python_tool": Case(
        python_tool=True,
        body=(
            Message.user("What is 2**100?"),
            Message.analysis("Compute it."),
            Message.python_call("print(2**100)"),
            Message.python_result("1267650600228229401496703205376\n"),
            Message.final("1267650600228229401496703205376"),
        ),
    ),
    "python_and_function_tools": Case(
        effort="low",
        python_tool=True,
        tools=(GET_WEATHER,),
        body=(Message.user("x"), Message.python_call("x = 1"), Message.python_result(""), WEATHER_CALL),
    ),
    "unicode": Case(
        instructions="Réponds en français. 日本語も可。",
        body=(
            Message.user("Ünïcödé: 你好, مرحبا, שלום, 🚀🧪, e\u0301, \u200bzero width, tab\t, crlf\r\n"),
            Message.analysis("Думаю… ∑ x² ≤ ∞"),
            Message.final("👍🏽 Ça marche."),
        ),
    ),
    "empty_content": Case(body=(Message.user(""), Message.analysis(""), Message.final(""))),
    "ends_with_a_tool_call": Case(tools=(GET_WEATHER,), body=(Message.user("Paris?"), WEATHER_CALL)),
    "ends_with_analysis": Case(body=(Message.user("Think."), Message.analysis("Thinking..."))),
    "final_before_another_turn": Case(body=(Message.user("a"), Message.final("b"), Message.user("c"))),
    "lookalike_tokens_are_text": Case(
        body=(
            Message.user("<|im_start|> <|reserved_5|> <|reserved_200002|> <|refusal|> <| start |> |><|"),
            Message.final("to=functions.x <|constrain json <|channel"),
        )
    ),
}
CASE_IDS = list(CASES)


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_render_matches_openai_harmony(harmony_encoding, case_id):
    case = CASES[case_id]
    assert render_harmony(case.ours()) == library_text(harmony_encoding, case.library())


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_library_parses_our_text_into_our_messages(harmony_encoding, case_id):
    messages = CASES[case_id].ours()
    text = render_harmony(messages)
    assert parse_harmony(text) == messages
    assert library_parse(harmony_encoding, text) == messages


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_rendered_cases_validate(case_id):
    assert validate_harmony(render_harmony(CASES[case_id].ours())) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"conversation_start_date": "2025-06-28"},
        {"model_identity": None},
        {"knowledge_cutoff": None},
        {"model_identity": None, "knowledge_cutoff": None},
        {"model_identity": "You are a careful assistant.", "knowledge_cutoff": "2025-01"},
    ],
)
def test_system_content_options_match_openai_harmony(harmony_encoding, fields):
    ours = render_harmony([Message("system", system_content("high", **fields))])
    assert ours == library_text(harmony_encoding, [library_system("high", **fields)])


def test_function_call_and_result_read_as_documented():
    text = render_harmony([WEATHER_CALL, WEATHER_RESULT])
    assert text == (
        '<|start|>assistant to=functions.get_current_weather<|channel|>commentary <|constrain|>json<|message|>'
        '{"location":"Paris, FR"}<|call|>'
        '<|start|>functions.get_current_weather to=assistant<|channel|>commentary<|message|>'
        '{"temp_c": 21, "sky": "clear"}<|end|>'
    )


def test_only_a_last_final_answer_ends_with_return():
    assert render_harmony([Message.final("a")]).endswith("<|return|>")
    assert render_harmony([Message.final("a"), Message.user("b")]).count("<|return|>") == 0
    assert render_harmony([Message.user("a")]).endswith("<|end|>")


@pytest.mark.parametrize(
    "text",
    [
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>",
        "<|start|>functions.get_current_weather<|channel|>commentary to=assistant<|message|>{}<|end|>",
        "<|start|>assistant<|channel|>analysis to=python code<|message|>print(1)<|call|>",
    ],
    ids=["call", "result", "python"],
)
def test_recipient_after_the_channel_parses_like_the_library(harmony_encoding, text):
    ours = parse_harmony(text)
    assert ours == library_parse(harmony_encoding, text)
    assert ours[0].recipient is not None and ours[0].channel is not None


def test_reserved_literals_are_openai_harmonys_special_tokens_and_tiktokens(harmony_encoding, monkeypatch):
    """openai-harmony 0.0.8 reserves up to 201088 and knows no ``<|endofprompt|>``; tiktoken's own o200k_harmony
    definition (read here with its vocabulary download replaced by nothing: only its special tokens are wanted) maps
    ``<|endofprompt|>`` to 200018 and stops at 201087. Content may hold neither library's tokens."""
    import tiktoken_ext.openai_public as public

    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    tiktokens = public.o200k_harmony()["special_tokens"]
    assert set(HARMONY_SPECIAL_TOKENS) == harmony_encoding.special_tokens_set
    assert set(LITERALS) == harmony_encoding.special_tokens_set | set(tiktokens)
    assert set(LITERALS) - harmony_encoding.special_tokens_set == {"<|endofprompt|>"}
    assert tiktokens["<|endofprompt|>"] == 200018
    assert len(LITERALS) == len(set(LITERALS)) == 1092


def test_every_reserved_literal_is_found_in_content_and_refused():
    """`find_special_token` searches for ``<|[a-z0-9_]+|>`` first: a literal of another shape would slip through."""
    for literal in LITERALS:
        assert find_special_token(f"a {literal} b") == literal
    assert find_special_token("a <|endofprompt|> b") == "<|endofprompt|>"
    with pytest.raises(SpecialTokenError):
        render_harmony([Message.user("<|endofprompt|>")])
    with pytest.raises(SpecialTokenError):
        render_harmony([Message.user("<|reserved_201088|>")])


# --- randomized parity ----------------------------------------------------------------------------------------------

CONTENT_PIECES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\n", " ", "<|", "|>", "<|im_end|>", "<|reserved_7|>", "to=x", "{\"a\": 1}", "é", "🚀"]),
)
CONTENT = st.lists(CONTENT_PIECES, max_size=5).map("".join).filter(lambda text: find_special_token(text) is None)
ARGUMENTS = (
    st.dictionaries(st.text(max_size=5), st.none() | st.integers() | st.text(max_size=8), max_size=3)
    .map(lambda arguments: json.dumps(arguments, ensure_ascii=False))
    .filter(lambda text: find_special_token(text) is None)
)
TOOL_NAME = st.sampled_from([tool.name for tool in ALL_TOOLS])


SIMPLE_TURNS = {
    "user": Message.user,
    "analysis": Message.analysis,
    "commentary": Message.commentary,
    "final": Message.final,
}


@st.composite
def turns(draw) -> list[Message]:
    """A realistic conversation body: user turns, reasoning, preambles, calls with their results, answers."""
    body = []
    for step in draw(st.lists(st.sampled_from([*SIMPLE_TURNS, "call", "python"]))):
        content = draw(CONTENT)
        if step == "call":
            tool = draw(TOOL_NAME)
            body += [Message.function_call(tool, draw(ARGUMENTS)), Message.function_result(tool, content)]
        elif step == "python":
            body += [Message.python_call(content), Message.python_result(draw(CONTENT))]
        else:
            body.append(SIMPLE_TURNS[step](content))
    return body


@settings(max_examples=80, deadline=None)
@given(
    body=turns(),
    effort=st.sampled_from(["low", "medium", "high", None]),
    instructions=st.none() | CONTENT,
    tools=st.lists(st.sampled_from(ALL_TOOLS), unique_by=lambda tool: tool.name, max_size=3).map(tuple),
    python_tool=st.booleans(),
)
def test_random_conversations_match_openai_harmony(harmony_encoding, body, effort, instructions, tools, python_tool):
    case = Case(effort, instructions, tools, python_tool, tuple(body))
    text = render_harmony(case.ours())
    assert text == library_text(harmony_encoding, case.library())
    assert parse_harmony(text) == library_parse(harmony_encoding, text) == case.ours()


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=5,
)
SCHEMA_KEYWORDS = {
    "type": st.sampled_from(["string", "number", "integer", "boolean", "null", "array", "object", "date"])
    | st.lists(st.sampled_from(["string", "integer", "null", 3]), max_size=3),
    "description": st.text(max_size=12) | st.integers(),
    "title": st.text(max_size=8),
    "default": JSON_VALUES,
    "enum": st.lists(st.text(max_size=4) | st.integers(), max_size=3),
    "nullable": st.booleans() | st.just(1),
    "examples": st.lists(st.text(max_size=5) | st.integers(), max_size=2),
}


def _compound_schema(inner):
    return st.fixed_dictionaries(
        {},
        optional={
            **SCHEMA_KEYWORDS,
            "properties": st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=4),
            "required": st.lists(st.sampled_from(["a", "b", "x", "1"]) | st.integers(), max_size=3),
            "items": inner,
            "oneOf": st.lists(inner, max_size=3),
        },
    )


SUBSCHEMAS = st.recursive(
    st.fixed_dictionaries({}, optional=SCHEMA_KEYWORDS) | st.booleans(), _compound_schema, max_leaves=8
)
SCHEMAS = _compound_schema(SUBSCHEMAS)  # the library's ToolDescription takes only an object as parameters


@settings(max_examples=150, deadline=None)
@given(schema=SCHEMAS, description=st.text(max_size=20))
def test_random_json_schemas_render_like_openai_harmony(harmony_encoding, schema, description):
    tool = ToolSpec("f", description, schema)
    library = library_text(harmony_encoding, [library_developer(None, (tool,))])
    assert f"<|start|>developer<|message|>{developer_content(None, [tool])}<|end|>" == library


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, 0.1, 100.0, 1e15, 1e16, 1e17, 1e20, 123456789012345680.0, 1e-4, 1e-5, 1.5e-7, 5e-324,
     1.7976931348623157e308, -2.5, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**30,
     # serde_json (no float_roundtrip) reads these one ulp off; the library prints what it read
     2.189384173830005e73, 1.2345678901234567e100],
)
def test_number_defaults_print_like_serde_json(harmony_encoding, value):
    tool = ToolSpec("f", "", {"type": "object", "properties": {"x": {"type": "number", "default": value}}})
    assert library_text(harmony_encoding, [library_developer(None, (tool,))]).endswith(
        developer_content(None, [tool]) + "<|end|>"
    )


def test_a_tools_type_is_reused_only_for_the_same_schema(harmony_encoding):
    """Tools' declarations are kept between rows (formats/harmony.py ``_tool_declaration``). Schemas Python calls
    equal but the library prints differently (1, 1.0 and True as a default; properties in another order) must each
    print as the library prints them, whichever came first; so must tools of one schema with other names and
    descriptions."""
    schemas = [{"type": "object", "properties": {"x": {"type": "number", "default": value}}}
               for value in (1, 1.0, True, 1, True)]
    schemas += [{"type": "object", "properties": dict(pairs)}
                for pairs in ([("a", {"type": "string"}), ("b", {"type": "number"})],
                              [("b", {"type": "number"}), ("a", {"type": "string"})])]
    assert schemas[0] == schemas[1] == schemas[2] and schemas[5] == schemas[6]
    for schema in schemas:
        for name, description in (("f", ""), ("g", ""), ("g", "Two\nlines."), ("f", "Two\nlines.")):
            tool = ToolSpec(name, description, schema)
            assert library_text(harmony_encoding, [library_developer(None, (tool,))]).endswith(
                developer_content(None, [tool]) + "<|end|>")


# --- round trips ----------------------------------------------------------------------------------------------------

HEADER_WORD = st.text(
    alphabet=st.characters(exclude_categories=["Cs", "Cc", "Zs", "Zl", "Zp"], exclude_characters="<"),
    min_size=1,
    max_size=10,
).filter(lambda word: not any(char.isspace() for char in word))
RECIPIENT = HEADER_WORD.filter(lambda word: word != "all")
TOOL_AUTHOR = HEADER_WORD.filter(lambda word: word not in ROLES and not word.startswith("to="))
CONTENT_TYPE = st.just(JSON_CONTENT_TYPE) | HEADER_WORD.filter(lambda word: not word.startswith("to="))


@st.composite
def any_message(draw) -> Message:
    """Any message the renderer accepts, header fields drawn from all of Unicode."""
    role = draw(st.sampled_from(ROLES))
    recipient = draw(RECIPIENT if role == "tool" else st.none() | RECIPIENT)
    return Message(
        role,
        draw(CONTENT),
        draw(st.none() | st.sampled_from(CHANNELS) | HEADER_WORD),
        recipient,
        draw(st.none() | CONTENT_TYPE) if recipient is not None else None,
        draw(TOOL_AUTHOR) if role == "tool" else None,
    )


@settings(max_examples=100, deadline=None)
@given(messages=st.lists(any_message(), min_size=1, max_size=4))
def test_any_writable_message_matches_openai_harmony(harmony_encoding, messages):
    text = render_harmony(messages)
    assert text == library_text(harmony_encoding, [to_library(message) for message in messages])
    assert library_parse(harmony_encoding, text) == messages


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(any_message(), max_size=6))
def test_parse_inverts_render(messages):
    text = render_harmony(messages)
    assert parse_harmony(text) == messages
    assert render_harmony(parse_harmony(text)) == text


@settings(max_examples=100, deadline=None)
@given(body=turns())
def test_well_formed_conversations_validate(body):
    assume(body)
    assert validate_harmony(render_harmony(conversation_prelude("low", tools=(GET_WEATHER,)) + body)) == []


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(any_message(), max_size=5))
def test_validating_messages_gives_the_reasons_validating_their_text_gives(messages):
    assert validate_messages(messages) == validate_harmony(render_harmony(messages))


# --- special tokens in content are refused --------------------------------------------------------------------------

SOME_SPECIAL_TOKENS = [
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>",
    "<|startoftext|>", "<|endoftext|>", "<|endofprompt|>", "<|reserved_200000|>", "<|reserved_200013|>",
    "<|reserved_201087|>",
]


@pytest.mark.parametrize("token", SOME_SPECIAL_TOKENS)
@pytest.mark.parametrize(
    ("where", "build", "index", "role"),
    [
        ("user", lambda text: [Message.user(text)], 0, "user"),
        ("analysis", lambda text: [Message.user("q"), Message.analysis(text)], 1, "assistant"),
        ("arguments", lambda text: [Message.function_call("f", text)], 0, "assistant"),
        ("result", lambda text: [Message.function_call("f", "{}"), Message.function_result("f", text)], 1, "tool"),
        ("instructions", lambda text: conversation_prelude(instructions=text), 1, "developer"),
        ("tool_description", lambda text: conversation_prelude(tools=[ToolSpec("f", text)]), 1, "developer"),
    ],
)
def test_special_token_literal_in_content_is_refused(token, where, build, index, role):
    with pytest.raises(SpecialTokenError) as refused:
        render_harmony(build(f"before {token} after"))
    assert (refused.value.token, refused.value.index, refused.value.role) == (token, index, role)
    assert token in str(refused.value) and f"message {index} ({role})" in str(refused.value)


def test_special_token_error_is_a_render_error_and_a_value_error():
    assert issubclass(SpecialTokenError, HarmonyRenderError)
    assert issubclass(HarmonyRenderError, HarmonyError) and issubclass(HarmonyError, ValueError)


@pytest.mark.parametrize("text", ["<|reserved_5|>", "<|reserved_200002|>", "<|reserved_201089|>", "<|im_start|>",
                                  "<|refusal|>", "<|END|>"])
def test_lookalikes_are_not_special_tokens(text):
    assert find_special_token(text) is None


# --- messages that cannot be written ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (Message("bot", "hi"), "unknown role 'bot'"),
        (Message("tool", "r", "commentary", "assistant"), "needs the tool's name"),
        (Message("tool", "r", "commentary", None, name="functions.f"), "needs a recipient"),
        (Message("tool", "r", "commentary", "assistant", name="user"), "would not parse back"),
        (Message("user", "hi", name="alice"), "only tool messages carry a name"),
        (Message("assistant", "x", "commentary", "functions.my tool"), "recipient 'functions.my tool'"),
        (Message("assistant", "x", "commentary", "all"), "recipient 'all'"),
        (Message("assistant", "x", "final<x"), "channel 'final<x'"),
        (Message("assistant", "x", ""), "channel ''"),
        (Message("assistant", "x", "final", content_type="json"), "content type without a recipient"),
        (Message("assistant", "x", "analysis", "python", "to=x"), "content type 'to=x'"),
        (Message("user", "lone \ud800 surrogate"), "lone surrogate"),
    ],
)
def test_unwritable_messages_are_refused(message, reason):
    with pytest.raises(HarmonyRenderError, match="message 1 ") as refused:
        render_harmony([Message.user("first"), message])
    assert reason in str(refused.value)


def test_tool_names_must_fit_a_recipient():
    with pytest.raises(HarmonyError, match="tool name 'get weather'"):
        conversation_prelude(tools=[ToolSpec("get weather")])


def test_reasoning_effort_is_checked():
    with pytest.raises(ValueError, match="reasoning effort"):
        system_content("extreme")


# --- validation reasons ---------------------------------------------------------------------------------------------

GOOD = render_harmony(CASES["tool_call_result_final"].ours())


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no messages"),
        ("<|start|>bot<|message|>hi<|end|>", "message 0: unknown role 'bot'"),
        ("<|start|>bot to=assistant<|message|>hi<|end|>", "unknown role 'bot' (not a role, functions.NAME"),
        ("<|start|>assistant<|message|>hi<|end|>", "message 0 (assistant): an assistant message without a channel"),
        ("<|start|>assistant<|channel|>chat<|message|>hi<|end|>", "unknown channel 'chat'"),
        ("<|start|>user<|message|>hi", "message 0 is unterminated (the text ends inside its content)"),
        ("<|start|>user", "message 0 is unterminated (the text ends inside its header)"),
        ("<|start|>user<|message|>a<|start|>user<|message|>b<|end|>", "message 0 is unterminated (a new <|start|>"),
        ("<|start|>user<|message|>a<|channel|>b<|end|>", "message 0 has a stray <|channel|> in its content"),
        ("<|start|>user<|message|>a<|reserved_200100|><|end|>", "stray <|reserved_200100|>"),
        ("<|start|>user<|end|>", "message 0: <|end|> inside the header (missing <|message|>)"),
        ("hello<|start|>user<|message|>a<|end|>", "text 'hello' outside a message"),
        ("<|start|>user<|message|>a<|end|><|end|>", "<|end|> outside a message"),
        ("<|start|>user<|message|>hi<|call|>", "<|call|> ends a message that is not from the assistant"),
        ("<|start|>assistant<|channel|>commentary<|message|>{}<|call|>", "<|call|> ends a message without a recipient"),
        (
            "<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{}<|end|>",
            "a tool call to 'functions.f' ends with <|end|> instead of <|call|>",
        ),
        (
            "<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{oops<|call|>",
            "tool call arguments are not valid JSON",
        ),
        (
            "<|start|>assistant<|channel|>final<|message|>a<|return|><|start|>user<|message|>b<|end|>",
            "<|return|> before the last message",
        ),
        ("<|start|>user<|message|>a<|return|>", "<|return|> ends a message that is not an assistant final answer"),
        ("<|start|>assistant<|channel|>final<|message|>a<|end|>", "the last message is a final answer and must end"),
        (
            "<|start|>functions.f to=assistant<|channel|>commentary<|message|>{}<|end|>",
            "message 0 (functions.f): a tool result with no matching call to 'functions.f'",
        ),
        ("<|start|>assistant<|channel|><|message|>a<|end|>", "<|channel|> without a channel name"),
        ("<|start|>assistant<|channel|>a<|channel|>b<|message|>x<|end|>", "more than one <|channel|>"),
        ("<|start|>user a b c<|message|>x<|end|>", "unexpected words in the header: 'a'"),
        ("<|start|> <|message|>x<|end|>", "the header has no role"),
        (GOOD.replace("<|return|>", "<|end|>"), "message 7 (assistant): the last message is a final answer"),
    ],
)
def test_validation_names_the_problem(text, reason):
    reasons = validate_harmony(text)
    assert any(reason in found for found in reasons), reasons


#: Texts near JSON: JSON values written by ``json`` (NaN, infinities, integers past 64 bits and lone surrogates
#: included), then a character inserted or cut anywhere; or short runs of the characters JSON is made of.
ANY_JSON_VALUES = json_values(max_leaves=6)
NEAR_JSON = st.one_of(
    st.builds(lambda text, at, insert, cut: text[:at] + insert + text[at + cut:],
              ANY_JSON_VALUES.map(json.dumps), st.integers(0, 40),
              st.sampled_from(["", ",", "]", "}", '"', "\\", "\ufeff", "\x00", " ", "e", "-", "\ud800"]),
              st.integers(0, 1)),
    st.text(alphabet='{}[]":,.-+eE0123456789 tfnrual\\NIy\ud800', max_size=12),
)


@settings(max_examples=500, deadline=None)
@given(NEAR_JSON)
def test_call_arguments_are_valid_json_exactly_when_json_reads_them(arguments):
    """Validation says a call's arguments are not valid JSON exactly when ``json.loads`` refuses them (the check asks
    orjson first, and ``json`` only what orjson refuses)."""
    try:
        json.loads(arguments)
        readable = True
    except ValueError:
        readable = False
    call = Message.function_call("f", arguments)
    reasons = validate_messages([call, Message.function_result("f", "{}"), Message.final("ok")])
    assert ("tool call arguments are not valid JSON" in " ".join(reasons)) is not readable


def test_parse_raises_on_broken_structure_with_every_reason():
    with pytest.raises(HarmonyParseError) as broken:
        parse_harmony("junk<|start|>bot<|message|>a<|end|><|start|>user<|message|>b")
    assert len(broken.value.reasons) == 3
    assert "unknown role 'bot'" in str(broken.value)


def test_parse_leaves_questions_of_meaning_to_validation():
    text = "<|start|>assistant<|message|>no channel<|end|>"
    assert parse_harmony(text) == [Message("assistant", "no channel")]
    assert validate_harmony(text) != []
