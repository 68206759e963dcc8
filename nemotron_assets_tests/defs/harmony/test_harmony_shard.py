"""One normalized Harmony shard (defs/harmony/build.py), built from real-shaped rows and read back with
pyarrow.

1. Every fixture family: rows read = rows written + counted drops, drops counted by reason, the ``messages``
   column reads back as the canonical conversation, placeholders counted.
2. ``on_error: raise`` fails an unreadable row naming dataset, file, line (JSONL) or row (Parquet) and field;
   readable rows a family does not normalize are counted, never an error.
3. The blend's ``messages_field`` / ``tools_field`` reach the mapper; a family that reads no conversation refuses
   them; the same input gives byte-identical shards.
"""

import hashlib
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.defs.harmony.build import SCHEMA, build_harmony_shard
from nemotron_assets.defs.sources.manifest import build_manifest, read_options
from nemotron_assets.normalize.families import FAMILIES
from nemotron_assets.sources.errors import InputError

FIXTURES = Path(__file__).parents[2] / "normalize" / "fixtures"


def fixture_rows(family: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()]


def build(tmp_path: Path, family: str, rows: list[dict] | None = None, *, on_error: str = "skip",
          split: str | None = None, name: str = "data.jsonl", **fields):
    """Write `rows` (default: the family's fixture rows), build shard 0, return (stats, table, input path)."""
    source = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), source)
    else:
        source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows or fixture_rows(family)),
                          encoding="utf-8")
    entry = DatasetEntry(name="ds", path=str(source), family=family, split=split, num_shards=1)
    blend = Blend(name="b", on_error=on_error, datasets=[entry])
    out = tmp_path / "shard.parquet"
    stats = build_harmony_shard(build_manifest(blend, entry, tmp_path), 0, family, split, read_options(blend, entry),
                                out, **fields)
    return stats, pq.read_table(out), source


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_row_is_written_or_counted_by_reason(tmp_path, family):
    rows = fixture_rows(family)
    stats, table, _ = build(tmp_path, family)
    expected_drops = Counter()
    for row in rows:
        kind, _, detail = row.get("_expect", "ok").partition(":")
        if kind == "row_error":
            expected_drops[f"unreadable:{detail}"] += 1
        elif kind == "skip":
            expected_drops[f"skipped:{detail}"] += 1
    assert stats.rows == len(rows) and dict(stats.dropped) == dict(expected_drops)
    assert table.num_rows == stats.records == len(rows) - sum(expected_drops.values())
    assert table.schema == SCHEMA
    written = table.to_pylist()
    assert stats.placeholder_prompts == sum(r["quality_placeholder_prompt"] for r in written)
    assert stats.valid == sum(r["quality_valid_harmony"] for r in written)
    for record in written:
        messages = json.loads(record["messages"])
        assert all(isinstance(m["content"], str) for m in messages)
        assert [m["role"] for m in messages] and all(m["role"] in ("system", "user", "assistant", "tool")
                                                     for m in messages)


def test_tool_result_object_content_no_longer_fails_the_shard(tmp_path):
    stats, table, _ = build(tmp_path, "nemotron_agentic", fixture_rows("nemotron_agentic")[:1], on_error="raise")
    record = table.to_pylist()[0]
    assert stats.records == 1 and record["quality_valid_harmony"]
    assert json.loads(record["messages"])[3]["content"] == '{"sky":"clear","temp_c":21}'


def test_placeholder_prompts_are_kept_flagged_and_counted(tmp_path):
    stats, table, _ = build(tmp_path, "nemotron_post_training")
    assert stats.placeholder_prompts == 2 and stats.flags["placeholder_prompt"] == 2
    assert stats.as_dict()["placeholder_prompts"] == 2
    flagged = [r["source_uuid"] for r in table.to_pylist() if r["quality_placeholder_prompt"]]
    assert flagged == ["2b1a0f9e-6d4c-4a3b-95e8-7c6b5a4f3e82", "2b1a0f9e-6d4c-4a3b-95e8-7c6b5a4f3e83"]


def test_unreadable_jsonl_row_fails_naming_dataset_file_line_and_field(tmp_path):
    with pytest.raises(InputError) as error:
        build(tmp_path, "nemotron_math_v2", on_error="raise", split="low")
    assert str(error.value) == f"dataset 'ds': {tmp_path / 'data.jsonl'}:4 field 'messages': missing"


def test_unreadable_parquet_row_fails_naming_the_row(tmp_path):
    rows = [{"problem": "p", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
            {"problem": "p", "messages": None}]
    with pytest.raises(InputError) as error:
        build(tmp_path, "nemotron_math_v2", rows, on_error="raise", name="data.parquet")
    assert (error.value.row, error.value.field, error.value.reason) == (1, "messages", "is null")


def test_skipped_rows_are_counted_even_when_errors_raise(tmp_path):
    rows = [r for r in fixture_rows("open_math_reasoning") if not r.get("_expect", "").startswith("row_error")]
    stats, table, source = build(tmp_path, "open_math_reasoning", rows, on_error="raise")
    assert dict(stats.dropped) == {"skipped:no_solution": 1}
    assert stats.examples == [f"dataset 'ds': {source}:4: skipped: no_solution"]
    assert table.num_rows == len(rows) - 1


def test_messages_and_tools_fields_reach_the_mapper(tmp_path):
    rows = fixture_rows("nemotron_agentic")[:2]
    renamed = [{("conversation" if k == "messages" else "functions" if k == "tools" else k): v for k, v in r.items()}
               for r in rows]
    (tmp_path / "plain").mkdir(), (tmp_path / "moved").mkdir()
    _, plain, _ = build(tmp_path / "plain", "nemotron_agentic", rows)
    _, moved, _ = build(tmp_path / "moved", "nemotron_agentic", renamed, messages_field="conversation",
                        tools_field="functions")
    drop = ["source_file"]
    assert moved.drop_columns(drop).to_pylist() == plain.drop_columns(drop).to_pylist()


def test_conversation_fields_are_refused_for_a_family_that_reads_none(tmp_path):
    with pytest.raises(InputError) as error:
        build(tmp_path, "text", messages_field="conversation")
    assert error.value.field == "messages_field" and error.value.dataset == "ds"


def test_text_field_of_the_entry_is_read_by_the_text_family(tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text('{"body": "a document", "text": "not this"}\n', encoding="utf-8")
    entry = DatasetEntry(name="ds", path=str(source), family="text", text_field="body", num_shards=1)
    blend = Blend(name="b", datasets=[entry])
    out = tmp_path / "shard.parquet"
    build_harmony_shard(build_manifest(blend, entry, tmp_path), 0, "text", None, read_options(blend, entry), out)
    assert json.loads(pq.read_table(out).to_pylist()[0]["messages"]) == [{"role": "assistant",
                                                                          "content": "a document"}]


def test_same_input_gives_byte_identical_shards(tmp_path):
    first, _, _ = build(tmp_path, "nemotron_competitive_programming")
    digest = hashlib.sha256((tmp_path / "shard.parquet").read_bytes()).hexdigest()
    second, _, _ = build(tmp_path, "nemotron_competitive_programming")
    assert first.sha256 == second.sha256 == digest
