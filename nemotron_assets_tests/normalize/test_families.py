"""Family mappers: raw rows of each dataset family -> Harmony messages + metadata -> shard records.

1. Table tests per family: a hand-written row in, hand-written messages and metadata out.
2. Bad input: a missing field or unknown role is a `RowError` naming the field; non-JSON tool arguments, a tool
   result without a call and special-token literals are kept but flagged.
3. Every fixture row (fixtures/<family>.jsonl) maps as its ``_expect`` says, and every valid record's text passes
   `validate_harmony`.
"""

import hashlib
import json
from pathlib import Path

import pytest

from nemotron_assets.formats.harmony import JSON_CONTENT_TYPE, Message, ToolSpec, validate_harmony
from nemotron_assets.normalize import nemotron_math_v2, open_math_reasoning
from nemotron_assets.normalize.base import RowError, difficulty_from_correctness, to_record
from nemotron_assets.normalize.chat import split_think
from nemotron_assets.normalize.families import FAMILIES, map_row, normalize_row

FIXTURES = Path(__file__).parent / "fixtures"

DESIGN_COLUMNS = {
    "id",
    "dataset",
    "split",
    "text",
    "loss_mode",
    "meta_domain",
    "meta_correctness",
    "meta_pass_k",
    "meta_correct_count",
    "meta_eval_best_setting",
    "meta_difficulty_bin",
    "meta_reasoning_effort",
    "meta_tool_call_count",
    "meta_tool_result_count",
    "meta_tool_names",
    "quality_valid_harmony",
    "quality_completion_nonempty",
    "quality_valid_tool_schema",
    "quality_has_tool",
    "quality_is_duplicate",
    "stats_char_len",
    "stats_approx_tokens",
    "source_uuid",
    "source_license",
    "source_used_in",
    "source_reasoning",
    "source_capability_target",
    "source_tools_id",
    "source_file",
    "source_row",
}


def call(name: str, arguments: str) -> Message:
    return Message("assistant", arguments, "commentary", f"functions.{name}", JSON_CONTENT_TYPE)


def result(name: str, output: str) -> Message:
    return Message("tool", output, "commentary", "assistant", name=f"functions.{name}")


def record(family: str, raw: dict, split: str | None = None) -> dict:
    return normalize_row(family, raw, dataset="d", split=split, file="f.jsonl", row_index=7)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


# --- Nemotron-Math-v2 -----------------------------------------------------------------------------------------------


def math_v2_row(**overrides) -> dict:
    row = {
        "problem": "2+2?",
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "reasoning_content": "Add.", "content": "\\boxed{4}"},
        ],
        "metadata": {
            "reason_low_no_tool": {"count": 8, "pass": 5, "accuracy": 0.625},
            "reason_high_with_tool": {"count": 16, "pass": 14, "accuracy": 0.875},
            "reason_medium_no_tool": {"count": 8, "pass": 6, "accuracy": 0.75},
        },
        "license": "cc-by-4.0",
        "used_in": ["nano_v3"],
    }
    return row | overrides


def test_math_v2_correctness_is_the_best_setting_and_its_counts():
    row = map_row("nemotron_math_v2", math_v2_row(), split="low")
    assert row.messages == [Message.user("2+2?"), Message.analysis("Add."), Message.final("\\boxed{4}")]
    assert (row.meta_correctness, row.meta_eval_best_setting) == (0.875, "reason_high_with_tool")
    assert (row.meta_pass_k, row.meta_correct_count) == (16, 14)
    assert row.reasoning_effort == "low"
    assert row.source_used_in == ["nano_v3"]


@pytest.mark.parametrize(
    ("split", "effort"), [("high_part00", "high"), ("high_part02", "high"), ("medium", "medium"), ("low", "low")]
)
def test_math_v2_split_is_the_reasoning_effort(split, effort):
    rec = record("nemotron_math_v2", math_v2_row(), split=split)
    assert rec["meta_reasoning_effort"] == effort
    assert f"Reasoning: {effort}" in rec["text"]


def test_math_v2_reasoning_effort_hint_in_the_row_wins_over_the_split():
    assert map_row("nemotron_math_v2", math_v2_row(reasoning_effort="high"), split="low").reasoning_effort == "high"


def test_math_v2_tie_picks_the_first_setting_in_sorted_order():
    metadata = {"reason_low_no_tool": {"accuracy": 0.5}, "reason_high_no_tool": {"accuracy": 0.5}}
    assert nemotron_math_v2.best_setting(metadata)[0] == "reason_high_no_tool"


def test_math_v2_metadata_as_json_string_and_missing_metadata():
    as_string = map_row("nemotron_math_v2", math_v2_row(metadata=json.dumps(math_v2_row()["metadata"])))
    assert as_string.meta_correctness == 0.875
    missing = map_row("nemotron_math_v2", math_v2_row(metadata=None))
    assert (missing.meta_correctness, missing.meta_pass_k, missing.meta_eval_best_setting) == (None, None, None)


def test_math_v2_python_tool_calls_become_the_builtin_python_tool():
    messages = [
        {"role": "user", "content": "primes < 10?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "function": {"name": "stateful_python_code_exec", "arguments": {"code": "print(4)"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "4"},
        {"role": "assistant", "content": "\\boxed{4}"},
    ]
    tools = [{"type": "function", "function": {"name": "stateful_python_code_exec", "parameters": {}}}]
    row = map_row("nemotron_math_v2", math_v2_row(messages=messages, tools=tools))
    assert row.messages[1:] == [
        Message.python_call("print(4)"),
        Message.python_result("4"),
        Message.final("\\boxed{4}"),
    ]
    assert row.python_tool and row.tools == []
    rec = to_record(row, "d", "high", "f", 0)
    assert rec["quality_valid_harmony"] and rec["meta_tool_names"] == ["python"]
    assert "## python" in rec["text"]


# --- Math-Proofs ----------------------------------------------------------------------------------------------------


def test_math_proofs_with_messages_is_a_proof():
    raw = {
        "problem": "p",
        "messages": [{"role": "user", "content": "Prove it."}, {"role": "assistant", "content": "<think>t</think>qed"}],
    }
    row = map_row("nemotron_math_proofs", raw)
    assert row.meta_task == "prove"
    assert row.messages == [Message.user("Prove it."), Message.analysis("t"), Message.final("qed")]


def test_math_proofs_without_messages_is_an_autoformalization_of_header_and_statement():
    raw = {
        "uuid": "u",
        "problem": "√2 is irrational.",
        "lean_header": "import Mathlib\n",
        "messages": [],
        "formal_statement": "theorem t : Irrational (Real.sqrt 2) := by sorry",
        "source": "aops",
    }
    row = map_row("nemotron_math_proofs", raw)
    assert row.meta_task == "formalize"
    assert row.messages[0].role == "user" and "√2 is irrational." in row.messages[0].content
    assert row.messages[1] == Message.final("import Mathlib\n\ntheorem t : Irrational (Real.sqrt 2) := by sorry")
    assert row.source_category == "aops"


def test_math_proofs_without_messages_or_statement_names_formal_statement():
    with pytest.raises(RowError) as error:
        map_row("nemotron_math_proofs", {"problem": "p", "messages": [], "formal_statement": None})
    assert error.value.field == "formal_statement"


# --- Science, Competitive Programming, IF-Chat ----------------------------------------------------------------------


@pytest.mark.parametrize(("split", "task"), [("MCQ", "mcq"), ("RQA", "rqa"), (None, None)])
def test_science_task_comes_from_the_split(split, task):
    raw = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    row = map_row("nemotron_science", raw, split=split)
    assert (row.meta_domain, row.meta_task) == ("science", task)


def test_competitive_programming_keeps_reasoning_and_code():
    raw = {
        "uuid": "c",
        "messages": [
            {"role": "user", "content": "sum"},
            {"role": "assistant", "reasoning_content": "formula", "content": "```python\nprint(1)\n```"},
        ],
    }
    row = map_row("nemotron_competitive_programming", raw, split="competitive_coding_python")
    assert row.messages[1:] == [Message.analysis("formula"), Message.final("```python\nprint(1)\n```")]
    assert (row.meta_domain, row.meta_task, row.source_uuid) == ("code", "competitive_coding_python", "c")


@pytest.mark.parametrize(("reasoning", "effort"), [("on", None), ("off", "low"), (None, None)])
def test_if_chat_reasoning_switch_and_capability_target(reasoning, effort):
    raw = {
        "reasoning": reasoning,
        "capability_target": "structured_outputs",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ],
    }
    row = map_row("nemotron_if_chat", raw)
    assert row.reasoning_effort == effort and row.source_reasoning == reasoning
    assert row.source_capability_target == "structured_outputs"
    assert row.instructions == "Be brief."
    assert row.messages == [Message.user("hi"), Message.final("hello")]


# --- Agentic ------------------------------------------------------------------------------------------------------


def test_agentic_dict_arguments_keep_every_call_and_the_preamble():
    raw = {
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Paris and Oslo?"},
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    },
                    {"id": "2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Ø"}}},
                ],
            },
            {"role": "tool", "tool_call_id": "2", "content": "-3"},
            {"role": "tool", "tool_call_id": "1", "content": "21"},
            {"role": "assistant", "content": "Paris 21, Oslo -3."},
        ],
    }
    row = map_row("nemotron_agentic", raw, split="tool_calling")
    assert row.messages == [
        Message.user("Paris and Oslo?"),
        Message.commentary("Checking both."),
        call("get_weather", '{"city":"Paris"}'),
        call("get_weather", '{"city":"Ø"}'),
        result("get_weather", "-3"),
        result("get_weather", "21"),
        Message.final("Paris 21, Oslo -3."),
    ]
    assert row.tools == [ToolSpec("get_weather", "Current weather.", WEATHER_TOOL["function"]["parameters"])]
    rec = to_record(row, "d", "tool_calling", "f", 0)
    assert rec["quality_valid_harmony"] and rec["quality_has_tool"]
    assert (rec["meta_tool_call_count"], rec["meta_tool_result_count"]) == (2, 2)
    assert rec["meta_tool_names"] == ["get_weather"]
    assert "Calls to these tools must go to the commentary channel: 'functions'." in rec["text"]


def test_agentic_string_arguments_are_kept_verbatim():
    raw = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "1", "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}],
            },
        ]
    }
    assert map_row("nemotron_agentic", raw).messages[1] == call("get_weather", '{"city": "Lima"}')


def test_agentic_tool_result_without_id_answers_the_oldest_open_call():
    raw = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"function": {"name": "a", "arguments": {}}},
                    {"function": {"name": "b", "arguments": {}}},
                ],
            },
            {"role": "tool", "content": "ra"},
            {"role": "tool", "name": "b", "content": "rb"},
        ]
    }
    messages = map_row("nemotron_agentic", raw).messages
    assert messages[-2:] == [result("a", "ra"), result("b", "rb")]


def test_tool_arguments_that_are_not_json_are_flagged_not_dropped():
    raw = {
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "1", "function": {"name": "get_weather", "arguments": "{city: Rome"}}],
            },
        ],
    }
    rec = record("nemotron_agentic", raw)
    assert rec["quality_valid_harmony"] is False
    assert rec["quality_flags"] == ["tool_arguments_not_json"]
    assert "not valid JSON" in rec["quality_reason"]
    assert rec["text"]  # best effort: the text is still there for inspection


def test_tool_result_with_no_matching_call_is_flagged():
    raw = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "z", "name": "get_weather", "content": "1"},
            {"role": "assistant", "content": "done"},
        ]
    }
    rec = record("nemotron_agentic", raw)
    assert rec["quality_valid_harmony"] is False
    assert rec["quality_flags"] == ["tool_result_without_call"]


def test_unknown_role_is_an_error_naming_the_message():
    raw = {"messages": [{"role": "user", "content": "x"}, {"role": "narrator", "content": "y"}]}
    with pytest.raises(RowError) as error:
        map_row("nemotron_agentic", raw)
    assert error.value.field == "messages[1].role" and "narrator" in error.value.reason


def test_tool_call_without_a_name_is_an_error_naming_the_call():
    raw = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {}}]}]}
    with pytest.raises(RowError) as error:
        map_row("nemotron_agentic", raw)
    assert error.value.field == "messages[1].tool_calls[0].function.name"


# --- Post-Training v1/v2 ----------------------------------------------------------------------------------------------


def test_post_training_inline_think_category_and_json_string_metadata():
    raw = {
        "uuid": "p",
        "category": "math",
        "reasoning": "on",
        "generator": "R1",
        "metadata": '{"a": 1}',
        "messages": [
            {"role": "user", "content": "12×12?"},
            {"role": "assistant", "content": "<think>\n144\n</think>\n\n144"},
        ],
    }
    row = map_row("nemotron_post_training", raw)
    assert row.messages == [Message.user("12×12?"), Message.analysis("144"), Message.final("144")]
    assert (row.meta_domain, row.source_category, row.source_generator, row.flags) == ("math", "math", "R1", [])


def test_post_training_tools_from_metadata_and_unreadable_metadata_is_flagged():
    with_tools = {
        "category": "tool_calling",
        "metadata": json.dumps({"tools": [WEATHER_TOOL]}),
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
    }
    assert [tool.name for tool in map_row("nemotron_post_training", with_tools).tools] == ["get_weather"]
    broken = with_tools | {"metadata": "not json {", "category": "multilingual_de"}
    row = map_row("nemotron_post_training", broken)
    assert row.flags == ["metadata_not_json"] and row.meta_domain == "multilingual"
    assert record("nemotron_post_training", broken)["quality_flags"] == ["metadata_not_json"]


# --- Llama-Nemotron -------------------------------------------------------------------------------------------------


def test_llama_nemotron_input_list_and_output_think_split():
    raw = {
        "input": [{"role": "user", "content": "haiku"}],
        "output": "<think>\n5-7-5\n</think>\n\nsilicon",
        "system_prompt": "detailed thinking on",
        "reasoning": "on",
        "category": "chat",
        "used_in_training": "Ultra, Super",
        "license": "cc by 4.0",
    }
    row = map_row("llama_nemotron", raw)
    assert row.messages == [Message.user("haiku"), Message.analysis("5-7-5"), Message.final("silicon")]
    assert row.instructions is None  # the thinking switch is not an instruction
    assert (row.source_reasoning, row.source_used_in, row.meta_domain) == ("on", ["Ultra", "Super"], "chat")


def test_llama_nemotron_string_input_system_prompt_and_switch_without_reasoning_field():
    raw = {"input": "x + 2 = 5", "output": "x = 3", "system_prompt": "detailed thinking off"}
    row = map_row("llama_nemotron", raw)
    assert row.messages == [Message.user("x + 2 = 5"), Message.final("x = 3")]
    assert (row.source_reasoning, row.reasoning_effort) == ("off", "low")
    tutor = map_row("llama_nemotron", raw | {"system_prompt": "You are a tutor."})
    assert tutor.instructions == "You are a tutor."


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"input": [{"role": "user", "content": "x"}]}, "output"),
        ({"output": "y"}, "input"),
        ({"input": [], "output": "y"}, "input"),
    ],
)
def test_llama_nemotron_missing_fields_are_named(raw, field):
    with pytest.raises(RowError) as error:
        map_row("llama_nemotron", raw)
    assert error.value.field == field


# --- OpenMathReasoning ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"), [("0.3125", 0.3125), ("1", 1.0), ("0.0", 0.0), ("n/a", None), (None, None), ("", None)]
)
def test_open_math_reasoning_pass_rate_is_a_string_number_or_na(value, expected):
    assert open_math_reasoning.pass_rate(value) == expected


def test_open_math_reasoning_garbage_pass_rate_names_the_field():
    with pytest.raises(RowError) as error:
        map_row("open_math_reasoning", {"problem": "p", "generated_solution": "s", "pass_rate_72b_tir": "high"})
    assert error.value.field == "pass_rate_72b_tir"


def test_open_math_reasoning_cot_solution():
    raw = {
        "problem": "x^2=4",
        "generated_solution": "<think>\n±2\n</think>\n\\boxed{\\pm 2}",
        "inference_mode": "cot",
        "pass_rate_72b_tir": "0.875",
        "generation_model": "DeepSeek-R1",
    }
    rec = record("open_math_reasoning", raw)
    row = map_row("open_math_reasoning", raw)
    assert row.messages == [Message.user("x^2=4"), Message.analysis("±2"), Message.final("\\boxed{\\pm 2}")]
    assert (rec["meta_correctness"], rec["meta_difficulty_bin"], rec["meta_task"]) == (0.875, "low", "cot")


def test_open_math_reasoning_tir_code_blocks_become_python_calls():
    solution = "<think>\nCompute.\n```python\nprint(2)\n```\n```output\n2\n```\nSo 2.\n</think>\n\\boxed{2}"
    row = map_row("open_math_reasoning", {"problem": "p", "generated_solution": solution, "inference_mode": "tir"})
    assert row.messages == [
        Message.user("p"),
        Message.analysis("Compute."),
        Message.python_call("print(2)"),
        Message.python_result("2"),
        Message.analysis("So 2."),
        Message.final("\\boxed{2}"),
    ]
    assert row.python_tool


# --- text -----------------------------------------------------------------------------------------------------------


def test_text_is_one_assistant_final_message():
    row = map_row("text", {"text": "Naïve café 🚀"})
    assert row.messages == [Message.final("Naïve café 🚀")]
    rec = to_record(row, "d", None, "f", 0)
    assert rec["text"].endswith("<|start|>assistant<|channel|>final<|message|>Naïve café 🚀<|return|>")
    assert rec["quality_completion_nonempty"]


# --- shared rules ---------------------------------------------------------------------------------------------------


def test_unknown_family_is_an_error_naming_the_family_field():
    with pytest.raises(RowError) as error:
        map_row("nemotron_cooking", {"text": "x"})
    assert error.value.field == "family" and "nemotron_math_v2" in error.value.reason


def test_row_error_located_names_dataset_file_row_and_field():
    error = RowError("messages[3].tool_calls", "arguments is not JSON").located("agentic", "agentic.jsonl", 1042)
    expected = "dataset 'agentic': agentic.jsonl row 1042 field 'messages[3].tool_calls': arguments is not JSON"
    assert str(error) == expected


def test_special_token_literal_keeps_the_row_invalid_with_empty_text():
    raw = {"messages": [{"role": "user", "content": "what is <|end|>?"}, {"role": "assistant", "content": "a"}]}
    rec = record("nemotron_science", raw)
    assert rec["quality_valid_harmony"] is False and rec["quality_flags"] == ["special_token"]
    assert rec["text"] == "" and "<|end|>" in rec["quality_reason"]


def test_record_has_every_design_column_and_consistent_stats():
    rec = record(
        "nemotron_agentic",
        {
            "tools": [WEATHER_TOOL],
            "uuid": "u",
            "license": "cc-by-4.0",
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        },
    )
    assert DESIGN_COLUMNS <= rec.keys()
    assert rec["id"] == hashlib.sha1(rec["text"].encode()).hexdigest()
    assert (rec["stats_char_len"], rec["stats_approx_tokens"]) == (len(rec["text"]), len(rec["text"]) // 4)
    assert (rec["loss_mode"], rec["quality_is_duplicate"], rec["source_file"], rec["source_row"]) == (
        "assistant_all",
        False,
        "f.jsonl",
        7,
    )
    assert rec["source_uuid"] == "u" and rec["source_tools_id"] is not None


def test_tools_id_is_the_same_for_the_same_tools_in_any_key_order():
    reordered = {
        "function": {
            "parameters": WEATHER_TOOL["function"]["parameters"],
            "description": "Current weather.",
            "name": "get_weather",
        },
        "type": "function",
    }
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    first = record("nemotron_agentic", {"tools": [WEATHER_TOOL], "messages": chat})
    second = record("nemotron_agentic", {"tools": [reordered], "messages": chat})
    assert first["source_tools_id"] == second["source_tools_id"]


def test_tool_schema_that_is_not_an_object_is_flagged():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}
    rec = record("nemotron_agentic", {"tools": [bad], "messages": [{"role": "user", "content": "x"}]})
    assert rec["quality_valid_tool_schema"] is False and "invalid_tool_schema" in rec["quality_flags"]


def test_empty_final_answer_is_an_empty_completion():
    rec = record(
        "nemotron_if_chat", {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]}
    )
    assert rec["quality_completion_nonempty"] is False


@pytest.mark.parametrize(
    ("correctness", "bin_"),
    [(None, None), (1.0, "low"), (0.875, "low"), (0.5, "medium"), (0.25, "high"), (0.0, "high")],
)
def test_difficulty_bin_from_correctness(correctness, bin_):
    assert difficulty_from_correctness(correctness) == bin_


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


# --- fixtures -------------------------------------------------------------------------------------------------------


def fixture_rows() -> list[tuple[str, int, dict]]:
    rows = []
    for family in sorted(FAMILIES):
        lines = (FIXTURES / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()
        rows += [(family, i, json.loads(line)) for i, line in enumerate(lines)]
    return rows


def test_every_family_has_fixture_rows_of_every_kind():
    families = {family for family, _, _ in fixture_rows()}
    assert families == set(FAMILIES)
    for family in FAMILIES:
        kinds = [raw.get("_expect", "ok") for f, _, raw in fixture_rows() if f == family]
        assert "ok" in kinds and any(kind.startswith("row_error:") for kind in kinds), family


@pytest.mark.parametrize(("family", "index", "raw"), fixture_rows(), ids=lambda value: str(value)[:40])
def test_fixture_row_maps_as_expected_and_valid_text_passes_validate_harmony(family, index, raw):
    expect = raw.get("_expect", "ok")
    kind, _, detail = expect.partition(":")
    if kind == "row_error":
        with pytest.raises(RowError) as error:
            normalize_row(family, raw, dataset=family, split=raw.get("_split"), file=f"{family}.jsonl", row_index=index)
        assert error.value.field == detail
        return
    rec = normalize_row(family, raw, dataset=family, split=raw.get("_split"), file=f"{family}.jsonl", row_index=index)
    if kind == "flag":
        assert rec["quality_valid_harmony"] is False and detail in rec["quality_flags"]
    else:
        assert rec["quality_valid_harmony"] is True, rec["quality_reason"]
        assert validate_harmony(rec["text"]) == []
        assert rec["quality_completion_nonempty"]


def test_content_as_a_list_of_text_parts_is_joined():
    raw = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                        {"role": "assistant", "content": "c"}]}  # fmt: skip
    assert map_row("nemotron_if_chat", raw).messages[0] == Message.user("ab")


def test_lone_surrogate_is_flagged_unrenderable_not_a_crash():
    raw = {"messages": [{"role": "user", "content": "bad \ud800"}, {"role": "assistant", "content": "c"}]}
    rec = record("nemotron_if_chat", raw)
    assert rec["quality_valid_harmony"] is False and rec["quality_flags"] == ["unrenderable"]


def test_row_that_is_not_an_object_is_a_row_error():
    with pytest.raises(RowError) as error:
        map_row("text", ["not", "a", "row"])
    assert error.value.field == "<row>"
