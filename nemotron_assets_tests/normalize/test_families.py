"""Family mappers on rows shaped like the real datasets: fixtures/<family>.jsonl follows the layouts of each
dataset (columns, nulls, missing optional columns, split differences).

1. Every fixture row maps as its ``_expect`` says: ``ok`` (valid, with exactly the flags in ``_flags``),
   ``invalid:<flag>``, ``skip:<reason>`` or ``row_error:<field>``; every valid record's text passes
   `validate_harmony`.
2. A table test per family: its rows' canonical messages and kept columns, written out by hand.
3. Shared rules: the blend's ``messages_field`` / ``tools_field`` / ``text_field``, mapper versions, purity.
"""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nemotron_assets.formats.harmony import Message, validate_harmony
from nemotron_assets.normalize import nemotron_math_v2, open_math_reasoning
from nemotron_assets.normalize.base import RowError, Skipped, SourceFields, difficulty_from_correctness
from nemotron_assets.normalize.families import FAMILIES, check_fields, map_row, mapper_version, normalize_row
from nemotron_assets.normalize.nemotron_competitive_programming import difficulty_bin
from nemotron_assets.normalize.to_harmony import harmony_conversation

FIXTURES = Path(__file__).parent / "fixtures"


def rows(family: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()]


def record(family: str, index: int, **overrides) -> dict:
    raw = rows(family)[index] | overrides
    return normalize_row(family, raw, dataset=family, split=raw.get("_split"), file=f"{family}.jsonl",
                         row_index=index)


def mapped(family: str, index: int):
    raw = rows(family)[index]
    return map_row(family, raw, raw.get("_split"))


def harmony(family: str, index: int) -> list[Message]:
    row = mapped(family, index)
    return harmony_conversation(row.messages, row.tools).messages


def user(text: str) -> dict:
    return {"role": "user", "content": text}


# --- 1. every fixture row -------------------------------------------------------------------------------------------


def all_fixture_rows() -> list[tuple[str, int]]:
    return [(family, i) for family in sorted(FAMILIES) for i in range(len(rows(family)))]


def test_every_family_has_fixture_rows():
    assert {path.stem for path in FIXTURES.glob("*.jsonl")} == set(FAMILIES)


@pytest.mark.parametrize(("family", "index"), all_fixture_rows())
def test_fixture_row_maps_as_expected(family, index):
    raw = rows(family)[index]
    kind, _, detail = raw.get("_expect", "ok").partition(":")
    if kind == "row_error":
        with pytest.raises(RowError) as error:
            record(family, index)
        assert error.value.field == detail
        return
    rec = record(family, index)
    if kind == "skip":
        assert rec == Skipped(detail)
    elif kind == "invalid":
        assert rec["quality_valid_harmony"] is False and detail in rec["quality_flags"]
    else:
        assert rec["quality_valid_harmony"] is True, rec["quality_reason"]
        assert rec["quality_flags"] == raw.get("_flags", [])
        assert validate_harmony(rec["text"]) == []
        assert rec["quality_completion_nonempty"]


# --- 2. per family --------------------------------------------------------------------------------------------------


def test_math_v2_best_setting_of_any_effort_and_the_kept_columns():
    rec = record("nemotron_math_v2", 0)  # split low; its metadata also has medium and high settings
    assert (rec["meta_correctness"], rec["meta_eval_best_setting"]) == (1.0, "reason_high_with_tool")
    assert (rec["meta_pass_k"], rec["meta_correct_count"], rec["meta_difficulty_bin"]) == (8, 8, "low")
    assert (rec["meta_reasoning_effort"], rec["meta_expected_answer"]) == ("low", "2")
    assert (rec["meta_answer_changed_to_majority"], rec["source_origin"]) == (False, "aops")
    assert rec["source_uuid"] == "9f1c2a7e-1b7d-4c1e-9a43-0c1f5e7d2a10" and rec["source_used_in"] == ["nano_v3"]
    assert "\n\nReasoning: low\n\n" in rec["text"]


def test_math_v2_row_without_uuid_gets_a_stable_content_id():
    raw = rows("nemotron_math_v2")[1]
    assert "uuid" not in raw
    rec = record("nemotron_math_v2", 1)
    namespace = uuid.uuid5(uuid.NAMESPACE_OID, "nemotron_assets.content_uuid")
    content = json.dumps({"messages": raw["messages"], "problem": raw["problem"]}, sort_keys=True,
                         separators=(",", ":"), ensure_ascii=False)
    assert rec["source_uuid"] == str(uuid.uuid5(namespace, content))
    assert "uuid_from_content" in rec["quality_flags"]
    reordered = {key: raw[key] for key in reversed(list(raw))}
    assert map_row("nemotron_math_v2", reordered, "high_part00").source_uuid == rec["source_uuid"]
    changed = raw | {"problem": raw["problem"] + " "}
    assert map_row("nemotron_math_v2", changed, "high_part00").source_uuid != rec["source_uuid"]


def test_math_v2_python_calls_count_7_and_changed_answer():
    rec = record("nemotron_math_v2", 1)
    assert (rec["meta_eval_best_setting"], rec["meta_pass_k"], rec["meta_correct_count"]) == (
        "reason_high_with_tool", 7, 2)
    assert rec["meta_difficulty_bin"] == "medium" and rec["meta_reasoning_effort"] == "high"
    assert (rec["meta_answer_changed_to_majority"], rec["meta_expected_answer"], rec["source_origin"]) == (
        True, "168", "stackflow")
    assert rec["meta_tool_names"] == ["python"] and "## python" in rec["text"]
    assert harmony("nemotron_math_v2", 1)[1:] == [
        Message.analysis("Count them with a sieve."),
        Message.python_call("from sympy import primepi\nprint(primepi(999))"),
        Message.python_result("168"),
        Message.analysis("The sieve says 168."),
        Message.final("\\boxed{168}"),
    ]


def test_math_v2_metadata_as_a_json_string_and_unreadable_metadata():
    assert (record("nemotron_math_v2", 2)["meta_correctness"], record("nemotron_math_v2", 2)["meta_pass_k"]) == (
        0.5, 8)
    broken = record("nemotron_math_v2", 4)
    assert broken["meta_correctness"] is None and broken["quality_flags"] == ["metadata_not_json"]


@pytest.mark.parametrize(("split", "effort"), [("high_part01", "high"), ("medium", "medium"), ("low", "low"),
                                               (None, "medium")])
def test_math_v2_split_is_the_reasoning_effort(split, effort):
    raw = rows("nemotron_math_v2")[0]
    rec = normalize_row("nemotron_math_v2", raw, dataset="d", split=split, file=None, row_index=0)
    assert rec["meta_reasoning_effort"] == effort


def test_math_v2_tie_picks_the_first_setting_in_sorted_order():
    metadata = {"reason_low_no_tool": {"accuracy": 0.5}, "reason_high_no_tool": {"accuracy": 0.5}}
    assert nemotron_math_v2.best_setting(metadata)[0] == "reason_high_no_tool"


def test_math_proofs_prove_and_formalize():
    prove = record("nemotron_math_proofs", 0)
    assert (prove["meta_task"], prove["source_origin"], prove["meta_domain"]) == ("prove", "aops", "math_proof")
    formalize = mapped("nemotron_math_proofs", 1)
    assert formalize.meta_task == "formalize" and formalize.source_origin == "mathstack"
    assert formalize.messages == [
        user("Formalize the following problem as a Lean 4 theorem statement. Give the imports and the statement, "
             "with `sorry` in place of the proof.\n\nDefine the even natural numbers inductively."),
        {"role": "assistant", "content": "import Mathlib\n\ninductive IsEven : ℕ → Prop\n  | zero : IsEven 0\n"
                                         "  | succ_succ {n : ℕ} : IsEven n → IsEven (n + 2)"},
    ]


def test_science_task_and_the_repaired_boxed():
    assert record("nemotron_science", 0)["meta_task"] == "mcq"
    row = mapped("nemotron_science", 1)
    assert row.meta_task == "rqa" and row.flags == ["boxed_backspace_repaired"]
    assert row.messages[1]["content"].endswith("Put the final answer in \\boxed{}.")
    assert all("\x08" not in m["content"] for m in row.messages)


def test_agentic_object_and_list_content_become_text_and_the_row_is_kept():
    row = mapped("nemotron_agentic", 0)
    assert row.messages == [
        {"role": "system", "content": ""},
        user("What's the weather in Paris and in Tokyo?"),
        {"role": "assistant", "content": "", "reasoning_content": "Two cities, two calls.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"unit": "c", "city": "東京"}}}]},
        {"role": "tool", "content": '{"sky":"clear","temp_c":21}', "tool_call_id": "c1", "name": "get_weather"},
        {"role": "tool", "content": '{"temp_c": 18}', "tool_call_id": "c2", "name": "get_weather"},
        {"role": "assistant", "content": "Paris is 21 °C and Tokyo 18 °C."},
    ]
    assert row.flags == ["content_parts_as_text", "content_object_as_json"]
    rec = record("nemotron_agentic", 0)
    assert (rec["meta_tool_call_count"], rec["meta_tool_result_count"], rec["meta_tool_names"]) == (
        2, 2, ["get_weather"])
    assert '<|message|>{"unit":"c","city":"東京"}<|call|>' in rec["text"]


def test_agentic_interactive_turn_keeps_preamble_and_reasoning():
    assert harmony("nemotron_agentic", 1)[1:4] == [
        Message.analysis("All three fields are given."),
        Message.commentary("Let me book that for you."),
        Message("assistant", '{"origin":"SFO","destination":"JFK","date":"2025-03-01"}', "commentary",
                "functions.book_flight", "<|constrain|>json"),
    ]
    rec = record("nemotron_agentic", 1)
    assert (rec["meta_task"], rec["source_reasoning"]) == ("interactive_agent", "on")


def test_if_chat_splits_differ_in_columns():
    chat = record("nemotron_if_chat", 0)
    assert (chat["source_capability_target"], chat["source_reasoning"], chat["source_license"]) == (
        "chat", "on", "odc-by-1.0")
    structured = record("nemotron_if_chat", 1)
    assert (structured["source_capability_target"], structured["source_reasoning"], structured["source_used_in"]) == (
        None, None, [])
    assert structured["meta_reasoning_effort"] == "medium" and structured["meta_task"] == "structured_outputs"


def test_competitive_programming_keeps_provenance_and_flags_the_placeholder():
    rec = record("nemotron_competitive_programming", 0)
    assert rec["quality_placeholder_prompt"] is True
    assert (rec["source_ref_dataset"], rec["source_ref_split"], rec["source_ref_index"]) == (
        "code_contests", "train", "10493")
    assert (rec["source_origin"], rec["source_difficulty"], rec["meta_difficulty_bin"]) == ("codeforces", "7", "low")
    assert rec["source_question_id"] == "b2c7f4a0e1d94c3f8a6b5e4d3c2b1a09"
    taco = record("nemotron_competitive_programming", 1)
    assert (taco["source_difficulty"], taco["meta_difficulty_bin"]) == ("MEDIUM_HARD", "medium")


def test_competitive_programming_infinibyte_has_only_five_columns():
    rec = record("nemotron_competitive_programming", 2)
    provenance = [rec[c] for c in ("source_ref_dataset", "source_ref_split", "source_ref_index", "source_origin",
                                   "source_difficulty", "source_question_id", "meta_difficulty_bin")]
    assert provenance == [None] * 7 and rec["meta_task"] == "infinibyte"


@pytest.mark.parametrize(("label", "expected"), [
    ("EASY", ("low", True)), ("introductory", ("low", True)), ("MEDIUM", ("medium", True)),
    ("MEDIUM_HARD", ("medium", True)), ("interview", ("medium", True)), ("HARD", ("high", True)),
    ("VERY_HARD", ("high", True)), ("competition", ("high", True)), ("HARDEST", ("high", True)),
    ("1", ("low", True)), ("2", ("medium", True)), ("3", ("high", True)), ("5", ("high", True)),
    ("7", ("low", True)), ("8", ("low", True)), ("9", ("medium", True)), ("10", ("medium", True)),
    ("11", ("high", True)), ("29", ("high", True)),
    ("800", ("low", True)), ("1399", ("low", True)), ("1400", ("medium", True)), ("1999", ("medium", True)),
    ("2000", ("high", True)), ("3500", ("high", True)),
    ("0", (None, True)), ("6", (None, True)), ("-", (None, True)), ("", (None, True)), (None, (None, True)),
    ("UNKNOWN_DIFFICULTY", (None, True)), ("EXTERNAL", (None, True)),
    ("30", (None, False)), ("799", (None, False)), ("impossible", (None, False)), ("٣", (None, False)),
])
def test_competitive_programming_difficulty_bins(label, expected):
    assert difficulty_bin(label) == expected


def test_post_training_v1_inline_think_and_generators():
    row = mapped("nemotron_post_training", 0)
    assert row.messages == [user("What is 12 × 12?"),
                            {"role": "assistant", "content": "144", "reasoning_content": "12 × 12 = 144."}]
    assert (row.meta_domain, row.source_category, row.source_generators) == ("math", "math", ["DeepSeek-R1-0528"])


def test_post_training_code_and_chat_placeholders_keep_their_references():
    code = record("nemotron_post_training", 1)
    assert code["quality_placeholder_prompt"] is True
    assert (code["source_origin"], code["source_ref_dataset"], code["source_ref_split"], code["source_ref_index"]) == (
        "codeforces", "code_contests", "train", "7")
    chat = record("nemotron_post_training", 2)
    assert chat["quality_placeholder_prompt"] is True and chat["source_ref_dataset"] is None
    assert mapped("nemotron_post_training", 2).messages[-1] == {"role": "assistant",
                                                                "content": "Hello! How can I help?"}


def test_post_training_v1_results_without_ids_match_calls_by_order():
    row = mapped("nemotron_post_training", 3)
    assert [(m["tool_call_id"], m["name"], m["content"]) for m in row.messages if m["role"] == "tool"] == [
        ("t0", "get_weather", '{"temp_c": 19}'), ("t1", "get_weather", '{"temp_c": 14}')]
    assert [tool["function"]["name"] for tool in row.tools] == ["get_weather"]  # from metadata.tools


def test_post_training_v2_comma_separated_generator():
    rec = record("nemotron_post_training", 4)
    assert rec["source_generators"] == ["Qwen3-235B-A22B", "Qwen3-30B-A3B"]
    assert (rec["meta_domain"], rec["meta_task"]) == ("multilingual", "multilingual_ja")


def test_llama_nemotron_input_list_output_and_used_in_training():
    row = mapped("llama_nemotron", 0)
    assert row.messages == [user("Write a haiku about GPUs."), {
        "role": "assistant", "content": "Silicon rivers\nthousands of cores hum in time\nmatrices bloom bright",
        "reasoning_content": "5-7-5 syllables."}]
    assert (row.source_used_in, row.source_reasoning) == (["Ultra", "Super", "Nano"], "on")
    typo = mapped("llama_nemotron", 1)
    assert typo.source_used_in == ["Ultra", "Super"]
    assert (typo.reasoning_effort, typo.meta_domain, len(typo.messages)) == ("low", "math", 4)


def test_llama_nemotron_rl_rows_are_counted_and_when2call_rows_are_conversations():
    assert mapped("llama_nemotron", 2) == Skipped("rl_prompt_without_output")
    when2call = record("llama_nemotron", 3)
    assert when2call["quality_valid_harmony"] and when2call["meta_tool_names"] == ["get_weather"]
    assert (when2call["meta_task"], when2call["source_used_in"]) == ("when2call_train_sft", ["Nano"])
    calls = json.loads(when2call["messages"])
    assert calls[1]["tool_calls"][0]["id"] == "call_0" and calls[2]["tool_call_id"] == "call_0"


def test_llama_nemotron_system_prompt_is_a_switch_or_an_instruction():
    raw = {"input": [user("x + 2 = 5")], "output": "x = 3", "system_prompt": "detailed thinking off"}
    row = map_row("llama_nemotron", raw)
    assert row.messages == [user("x + 2 = 5"), {"role": "assistant", "content": "x = 3"}]
    assert (row.source_reasoning, row.reasoning_effort) == ("off", "low")
    tutor = map_row("llama_nemotron", raw | {"system_prompt": "You are a tutor."})
    assert tutor.messages[0] == {"role": "system", "content": "You are a tutor."}


@pytest.mark.parametrize(
    ("value", "expected"), [("0.3125", 0.3125), ("1", 1.0), ("0.0", 0.0), ("n/a", None), (None, None), ("", None)]
)
def test_open_math_reasoning_pass_rate_is_a_string_number_or_na(value, expected):
    assert open_math_reasoning.pass_rate(value) == expected


def test_open_math_reasoning_cot_keeps_its_columns():
    rec = record("open_math_reasoning", 0)
    assert (rec["meta_correctness"], rec["meta_difficulty_bin"], rec["meta_task"]) == (0.875, "low", "cot")
    assert (rec["meta_problem_type"], rec["meta_expected_answer"], rec["source_origin"]) == (
        "has_answer_extracted", "\\pm 2", "aops_c4_high_school_math")
    assert (rec["source_generators"], rec["source_license"]) == (["DeepSeek-R1"], "cc-by-4.0")


def test_open_math_reasoning_tir_python_blocks_become_python_calls():
    assert harmony("open_math_reasoning", 1) == [
        Message.user("Compute 17^5 mod 23."),
        Message.analysis("Let me compute."),
        Message.python_call("print(pow(17, 5, 23))"),
        Message.python_result("21"),
        Message.analysis("So it is 21."),
        Message.final("\\boxed{21}"),
    ]


def test_open_math_reasoning_tir_tool_call_tags_become_python_calls_and_results():
    code = "stateful_python_code_exec"
    assert mapped("open_math_reasoning", 2).messages == [
        user("How many divisors does 360 have?"),
        {"role": "assistant", "content": "", "reasoning_content": "Factor first.", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {
                "name": code, "arguments": {"code": "from sympy import factorint\nprint(factorint(360))"}}}]},
        {"role": "tool", "content": "{2: 3, 3: 2, 5: 1}", "tool_call_id": "call_0", "name": code},
        {"role": "assistant", "content": "", "reasoning_content": "So (3+1)(2+1)(1+1).", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": code, "arguments": {"code": "print(4*3*2)"}}}]},
        {"role": "tool", "content": "24", "tool_call_id": "call_1", "name": code},
        {"role": "assistant", "content": "**Final Answer**\n\\boxed{24}"},
    ]
    rec = record("open_math_reasoning", 2)
    assert (rec["meta_tool_call_count"], rec["meta_tool_result_count"], rec["meta_difficulty_bin"]) == (2, 2, "high")
    assert "<tool_call>" not in rec["text"]


def test_open_math_reasoning_unparsed_tool_call_tag_is_not_a_silent_loss():
    rec = record("open_math_reasoning", 4)
    assert rec["quality_valid_harmony"] is False and rec["quality_flags"] == ["tir_unparsed_tool_call"]
    assert "<tool_call>" in rec["quality_reason"]


def test_openai_chat_takes_the_conversation_as_it_is():
    raw = rows("openai_chat")[0]
    row = mapped("openai_chat", 0)
    assert row.messages == raw["messages"]  # the inline <think> stays in the stored conversation
    assert harmony("openai_chat", 0) == [Message.user("What is 7 × 8?"), Message.analysis("7 × 8 = 56."),
                                         Message.final("56")]
    assert (row.source_generators, row.meta_domain, row.meta_task) == (
        ["DeepSeek-R1-0528", "Qwen3-235B-A22B"], "math", "math")


def test_openai_chat_converts_only_what_the_canonical_form_cannot_hold():
    raw = rows("openai_chat")[1]
    row = mapped("openai_chat", 1)
    assert row.messages[0] == {"role": "system", "content": "Use tools when needed."}
    assert row.messages[1] == user("Weather in Paris?")
    assert row.messages[2] == raw["messages"][2]
    assert row.messages[3] == {"role": "tool", "content": '{"temp_c":21}', "tool_call_id": "call_x",
                               "name": "get_weather"}
    assert row.tools == raw["tools"] and row.source_used_in == ["nano_v3"]


def test_text_is_one_assistant_answer():
    rec = record("text", 1)
    assert rec["text"].endswith("<|start|>assistant<|channel|>final<|message|>Unicode: naïve café — 日本語テキスト 🚀"
                                "<|return|>")
    assert rec["meta_reasoning_effort"] == "low" and rec["quality_completion_nonempty"]


# --- 3. shared rules ------------------------------------------------------------------------------------------------

#: The first readable row of every family that reads a conversation column, and the columns it reads.
CONVERSATION_COLUMNS = {
    "nemotron_math_v2": (0, "messages"), "nemotron_math_proofs": (0, "messages"),
    "nemotron_science": (0, "messages"), "nemotron_agentic": (0, "messages"), "nemotron_if_chat": (0, "messages"),
    "nemotron_competitive_programming": (0, "messages"), "nemotron_post_training": (3, "messages"),
    "llama_nemotron": (0, "input"), "openai_chat": (1, "messages"),
}


@pytest.mark.parametrize("family", sorted(CONVERSATION_COLUMNS))
def test_messages_field_and_tools_field_are_honored_by_every_chat_family(family):
    index, column = CONVERSATION_COLUMNS[family]
    raw = rows(family)[index]
    renamed = {key: value for key, value in raw.items() if key not in (column, "tools")}
    renamed |= {"conversation": raw[column], "functions": raw.get("tools")}
    fields = SourceFields(messages="conversation", tools="functions")
    original = normalize_row(family, raw, dataset="d", split=raw.get("_split"), file=None, row_index=0)
    moved = normalize_row(family, renamed, dataset="d", split=raw.get("_split"), file=None, row_index=0,
                          fields=fields)
    if family == "nemotron_math_v2":  # the content id reads the conversation from the named column too
        assert moved["source_uuid"] == original["source_uuid"]
    assert moved == original
    if family == "nemotron_math_proofs":  # without the named column it is a row without messages: formalized
        ignored = normalize_row(family, renamed, dataset="d", split=None, file=None, row_index=0)
        assert ignored["meta_task"] == "formalize"
        return
    with pytest.raises(RowError) as error:
        normalize_row(family, renamed, dataset="d", split=raw.get("_split"), file=None, row_index=0)
    assert error.value.field == column


def test_text_field_is_honored():
    row = map_row("text", {"body": "hello", "text": "not this"}, fields=SourceFields(text="body"))
    assert row.messages == [{"role": "assistant", "content": "hello"}]


@pytest.mark.parametrize("family", ["open_math_reasoning", "text"])
@pytest.mark.parametrize("setting", ["messages", "tools"])
def test_conversation_fields_are_refused_where_nothing_reads_them(family, setting):
    with pytest.raises(RowError) as error:
        check_fields(family, SourceFields(**{setting: "conversation"}))
    assert error.value.field == f"{setting}_field" and family in error.value.reason
    check_fields("openai_chat", SourceFields(messages="conversation", tools="functions"))


def test_every_family_has_a_mapper_version_and_an_unknown_family_is_named():
    assert all(isinstance(mapper_version(name), int) and mapper_version(name) > 0 for name in FAMILIES)
    with pytest.raises(RowError) as error:
        mapper_version("nemotron_cooking")
    assert error.value.field == "family" and "nemotron_math_v2" in error.value.reason


def test_unknown_family_and_a_row_that_is_not_an_object_are_row_errors():
    with pytest.raises(RowError) as error:
        map_row("nemotron_cooking", {"text": "x"})
    assert error.value.field == "family"
    with pytest.raises(RowError) as error:
        map_row("text", ["not", "a", "row"])
    assert error.value.field == "<row>"


def test_row_error_located_names_dataset_file_row_and_field():
    error = RowError("messages[3].tool_calls", "arguments is not JSON").located("agentic", "agentic.jsonl", 1042)
    expected = "dataset 'agentic': agentic.jsonl row 1042 field 'messages[3].tool_calls': arguments is not JSON"
    assert str(error) == expected


@pytest.mark.parametrize(
    ("correctness", "bin_"),
    [(None, None), (1.0, "low"), (0.875, "low"), (0.8749, "medium"), (0.5, "medium"), (0.2501, "medium"),
     (0.25, "high"), (0.0, "high")],
)
def test_difficulty_bin_from_correctness(correctness, bin_):
    assert difficulty_from_correctness(correctness) == bin_


def test_pure_modules_never_import_dagster():
    code = ("import sys; import nemotron_assets.normalize.families, nemotron_assets.defs.harmony.pools, "
            "nemotron_assets.defs.harmony.build, nemotron_assets.defs.harmony.views; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dagster'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
