"""Embedding views read from the canonical ``messages`` column (defs/harmony/views.py `view_texts`) are the views
defined on the Harmony text (`embed_text`, which parses the text), for every row whose text could be rendered.

1. Every row of the sample blend's data and of the normalize fixtures, through the real family mappers.
2. Generated OpenAI-style conversations (hypothesis): reasoning fields, ``<think>`` blocks, function and python
   calls with object, string or missing arguments, results with and without a call, system turns.
3. `write_view_files` streams a pool in record batches into the three view files: read back with pyarrow, one
   row per pool row in pool order, each text equal to `embed_text` of the pool's own ``text`` column.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.harmony.build import SCHEMA
from nemotron_assets.defs.harmony.views import (
    PASS_THROUGH,
    VIEWS,
    answer_type,
    embed_text,
    view_texts,
    write_view_files,
)
from nemotron_assets.normalize.base import NormalizedRow, RowError, Skipped
from nemotron_assets.normalize.canonical import canonical_messages
from nemotron_assets.normalize.families import FAMILIES, normalize_row
from nemotron_assets.normalize.record import to_record
from nemotron_assets_tests.conftest import REPO

SOURCES = [REPO / "blends" / "sample_data" / "posttrain", REPO / "nemotron_assets_tests" / "normalize" / "fixtures"]


def normalized_records() -> list[dict]:
    """Every readable row of the sample data and the fixtures, normalized by its family's mapper."""
    records = []
    for folder in SOURCES:
        for path in sorted(folder.glob("*.jsonl")):
            assert path.stem in FAMILIES
            for row, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
                raw = json.loads(line)
                try:
                    record = normalize_row(path.stem, raw, dataset=path.stem, split=raw.get("_split"), file=str(path),
                                           row_index=row)
                except RowError:
                    continue
                if not isinstance(record, Skipped):
                    records.append(record)
    return records


def views_of_text(text: str) -> tuple[str, ...]:
    return tuple(embed_text(view, text) for view in VIEWS)


def test_every_sample_and_fixture_row_has_the_same_views_from_messages_and_from_text():
    records = [r for r in normalized_records() if r["text"]]
    assert len(records) > 40 and {r["dataset"] for r in records} == set(FAMILIES)
    assert any(r["meta_tool_call_count"] for r in records) and any("python" in r["meta_tool_names"] for r in records)
    for record in records:
        assert view_texts(record["messages"]) == views_of_text(record["text"]), record["source_file"]


# --- generated conversations ----------------------------------------------------------------------------------
TEXT = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(
    [" ", "\n", "<think>", "</think>", "42", " 3.5 ", "\\boxed{7}", "```py\nx\n```", '{"a": 1}', "-", "é"])),
    max_size=4).map("".join)
REASONING = TEXT | st.integers(70, 110).map(lambda n: "a long line " * n)  # around the excerpt's 1,000 characters
TOOLS = st.sampled_from(["get_weather", "search", "a.b", "stateful_python_code_exec"])
ARGUMENT_VALUES = st.none() | st.integers(-5, 5) | st.text(max_size=5)
ARGUMENTS = st.one_of(
    st.dictionaries(st.text(max_size=5), ARGUMENT_VALUES, max_size=3),
    st.dictionaries(st.text(max_size=5), ARGUMENT_VALUES, max_size=3).map(json.dumps),
    st.builds(lambda code: {"code": code}, TEXT),
    st.sampled_from([None, "{not json", "[1, 2]", '{"code": "print(1)"}']),
)


@st.composite
def raw_conversations(draw) -> list[dict]:
    messages = []
    for step in draw(st.lists(st.sampled_from(["system", "user", "assistant", "calls", "result"]), min_size=1,
                              max_size=7)):
        if step in ("system", "user"):
            messages.append({"role": step, "content": draw(TEXT)})
        elif step == "result":
            messages.append({"role": "tool", "content": draw(TEXT),
                             "tool_call_id": draw(st.none() | st.sampled_from(["c0", "c1", "zz"]))})
        else:
            message = {"role": "assistant", "content": draw(TEXT)}
            if draw(st.booleans()):
                message["reasoning_content"] = draw(REASONING)
            if step == "calls":
                message["tool_calls"] = [
                    {"id": f"c{n}", "type": "function", "function": {"name": draw(TOOLS), "arguments": draw(ARGUMENTS)}}
                    for n in range(draw(st.integers(1, 3)))]
            messages.append(message)
    return messages


@settings(max_examples=400, deadline=None)
@given(raw=raw_conversations())
def test_generated_conversations_have_the_same_views_from_messages_and_from_text(raw):
    record = to_record(NormalizedRow(messages=canonical_messages(raw).messages), "ds", None, None, 0)
    if record["text"]:  # "" only when the conversation cannot be written as Harmony at all
        assert view_texts(record["messages"]) == views_of_text(record["text"])


# --- the view files -------------------------------------------------------------------------------------------
def write_pool(path: Path, records: list[dict]) -> None:
    pq.write_table(pa.Table.from_pylist(records, schema=SCHEMA), path)


def test_view_files_hold_every_pool_row_in_order_with_the_views_of_its_text(tmp_path):
    records = [r for r in normalized_records() if r["quality_valid_harmony"]]
    write_pool(tmp_path / "pool.parquet", records)
    out = {view: tmp_path / f"{view}.parquet" for view in VIEWS}
    with (tmp_path / "pool.parquet").open("rb") as pool:
        rows = write_view_files(pool, out, batch_rows=7)  # several record batches
    assert rows == len(records)
    for view in VIEWS:
        table = pq.read_table(out[view])
        assert table.column_names == ["id", "embed_text", "word_count", *PASS_THROUGH]
        written = table.to_pylist()
        assert [r["id"] for r in written] == [r["id"] for r in records]
        for row, record in zip(written, records):
            assert row["embed_text"] == embed_text(view, record["text"])
            assert row["word_count"] == len(row["embed_text"].split())
            assert {name: row[name] for name in PASS_THROUGH} == {name: record[name] for name in PASS_THROUGH}


@pytest.mark.parametrize("batch_rows", [1, 4096])
def test_view_files_do_not_depend_on_the_batch_size(tmp_path, batch_rows):
    records = [r for r in normalized_records() if r["quality_valid_harmony"]]
    write_pool(tmp_path / "pool.parquet", records)
    tables = []
    for rows_per_batch in (batch_rows, 3):
        out = {view: tmp_path / f"{view}-{rows_per_batch}.parquet" for view in VIEWS}
        with (tmp_path / "pool.parquet").open("rb") as pool:
            write_view_files(pool, out, batch_rows=rows_per_batch)
        tables.append([pq.read_table(out[view]).to_pylist() for view in VIEWS])
    assert tables[0] == tables[1]


def test_an_empty_pool_gives_empty_view_files_with_the_columns(tmp_path):
    write_pool(tmp_path / "pool.parquet", [])
    out = {view: tmp_path / f"{view}.parquet" for view in VIEWS}
    with (tmp_path / "pool.parquet").open("rb") as pool:
        assert write_view_files(pool, out) == 0
    for view in VIEWS:
        table = pq.read_table(out[view])
        assert table.num_rows == 0 and table.column_names == ["id", "embed_text", "word_count", *PASS_THROUGH]


def parses_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=8), st.sampled_from(
    ["NaN", "-Infinity", "Infinity", "true", "nul", '"x"', "[1]", "{}", "é", " 7", "-", "1e5", "\u00a0{}"])))
def test_an_answer_is_json_exactly_when_json_loads_reads_it(text):
    kind = answer_type(text)
    if kind in ("json", "text"):
        assert (kind == "json") == parses_as_json(text.strip())
