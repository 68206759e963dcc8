"""One Harmony shard -> its samples file (sft/steps/samples_step.py), and the packed step reading it back
(sft/steps/pack_step.py ``read_samples``).

The Harmony shard here is written by the test with the columns the step reads, shaped as normalize/record.py writes
them (JSON text for messages and tools, nullable provenance); worker processes must write the same bytes as one
process, an unreadable row must be named by shard and row from inside a worker, and a samples file holding a value
its columns cannot hold must be named by file and row when the packer reads it.
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.errors import InputError
from nemotron_assets.layout import ShardKey, sft_samples_prefix
from nemotron_assets.sft.chat_format import ChatFormatSpec
from nemotron_assets.sft.steps.pack_step import read_samples
from nemotron_assets.sft.steps.samples_step import BATCH_ROWS, build_samples_file
from nemotron_assets.storage import Storage
from nemotron_assets_tests.sft.test_samples import small_tokenizer


def harmony_rows(count: int) -> list[dict]:
    rows = []
    for n in range(count):
        messages = [{"role": "user", "content": f"  question {n}\n"},
                    {"role": "assistant", "content": f"answer {n} " * (1 + n % 5)}]
        rows.append({"id": f"row-{n}", "dataset": "chat", "messages": json.dumps(messages), "tools": None,
                     "quality_valid_harmony": True, "quality_completion_nonempty": n % 7 != 3,
                     "quality_valid_tool_schema": True, "quality_placeholder_prompt": False,
                     "meta_reasoning_effort": None, "source_used_in": ["sft"] if n % 2 else None,
                     "source_license": "cc-by-4.0", "source_row": n})
    return rows


def write_shard(path, rows: list[dict]) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=BATCH_ROWS)


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> ChatFormatSpec:
    return ChatFormatSpec("chatml", small_tokenizer(tmp_path_factory.mktemp("tok")))


def test_workers_write_the_bytes_one_process_writes(spec, tmp_path):
    shard = tmp_path / "shard.parquet"
    write_shard(shard, harmony_rows(2 * BATCH_ROWS + 17))  # three batches, the last one short
    one = build_samples_file(shard, "shard.parquet", spec, tmp_path / "one.parquet", workers=1)
    two = build_samples_file(shard, "shard.parquet", spec, tmp_path / "two.parquet", workers=2)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    assert one.as_dict() == two.as_dict()
    kept = [n for n in range(2 * BATCH_ROWS + 17) if n % 7 != 3]
    assert one.rows == 2 * BATCH_ROWS + 17 and one.filtered == {"empty_completion": 2 * BATCH_ROWS + 17 - len(kept)}
    table = pq.read_table(tmp_path / "one.parquet")
    assert table.num_rows == one.samples == one.conversations == len(kept)
    assert table.column("row").to_pylist() == kept
    assert one.eos_id is None and one.tokenizer_backend  # the small tokenizer names no EOS token


def test_an_unreadable_row_is_named_by_shard_and_row_from_inside_a_worker(spec, tmp_path):
    rows = harmony_rows(BATCH_ROWS + 5)
    rows[BATCH_ROWS + 1]["messages"] = '[{"role": "user", "content": "cut'
    write_shard(tmp_path / "shard.parquet", rows)
    with pytest.raises(InputError, match=rf"shard.parquet.*row {BATCH_ROWS + 1}.*messages.*not valid JSON"):
        build_samples_file(tmp_path / "shard.parquet", "shard.parquet", spec, tmp_path / "out.parquet", workers=2)


def test_an_empty_shard_still_records_the_tokenizer_facts(spec, tmp_path):
    pq.write_table(pa.Table.from_pylist(harmony_rows(1)).slice(0, 0), tmp_path / "shard.parquet")
    stats = build_samples_file(tmp_path / "shard.parquet", "shard.parquet", spec, tmp_path / "out.parquet")
    assert stats.samples == 0 and stats.tokenizer_backend


def test_the_packer_names_a_samples_file_row_holding_an_impossible_mask_value(spec, tmp_path):
    shard = tmp_path / "shard.parquet"
    rows = [{**row, "quality_completion_nonempty": True} for row in harmony_rows(BATCH_ROWS + 20)]
    write_shard(shard, rows)  # one sample per row: samples-file row n is shard row n
    store = Storage(str(tmp_path / "root"))
    target = tmp_path / "root" / (sft_samples_prefix("blend", ShardKey.parse("chat/shard_00000")) + ".parquet")
    target.parent.mkdir(parents=True)
    build_samples_file(shard, "shard.parquet", spec, target)
    plan_rows = pa.table({"file": ["chat/shard_00000"] * 2, "row": [1, BATCH_ROWS + 3]})
    found = read_samples(store, "blend", plan_rows)
    original = pq.read_table(target)
    assert np.array_equal(found[("chat/shard_00000", BATCH_ROWS + 3)].input_ids,
                          original.column("input_ids")[BATCH_ROWS + 3].values.to_numpy())

    masks = original.column("assistant_mask").to_pylist()
    masks[BATCH_ROWS + 3][1] = 2
    broken = original.set_column(original.schema.get_field_index("assistant_mask"), "assistant_mask",
                                 pa.array(masks, type=pa.list_(pa.uint8())))
    pq.write_table(broken, target, row_group_size=BATCH_ROWS)
    with pytest.raises(RuntimeError, match=rf"shard_00000.parquet row {BATCH_ROWS + 3}: assistant_mask holds 2"):
        read_samples(store, "blend", plan_rows)
