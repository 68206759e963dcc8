"""One Harmony shard -> its samples file (defs/sft/samples_step.py), and the packed step reading it back
(defs/sft/pack_step.py ``read_samples``).

The Harmony shard here is written by the test with the columns the step reads, shaped as normalize/record.py writes
them (JSON text for messages and tools, nullable provenance); worker processes must write the same bytes as one
process, an unreadable row must be named by shard and row from inside a worker, and a samples file holding a value
its columns cannot hold must be named by file and row when the packer reads it. Workers forked from a process
that parsed the tokenizer first (defs/sft/render_pool.py) must write the same bytes too.
"""

import hashlib
import json
import subprocess
import sys

import numpy as np
import polars
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.chat.chat_format import ChatFormatSpec
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft.layout import sft_samples_prefix
from nemotron_assets.defs.sft.pack_step import read_samples
from nemotron_assets.defs.sft.samples_step import BATCH_ROWS, build_samples_file
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.tokenize.builders import small_tokenizer


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
    one = build_samples_file(shard, "shard.parquet", spec, tmp_path / "one.arrow", workers=1)
    two = build_samples_file(shard, "shard.parquet", spec, tmp_path / "two.arrow", workers=2)
    assert (tmp_path / "one.arrow").read_bytes() == (tmp_path / "two.arrow").read_bytes()
    assert one.as_dict() == two.as_dict()
    kept = [n for n in range(2 * BATCH_ROWS + 17) if n % 7 != 3]
    assert one.rows == 2 * BATCH_ROWS + 17 and one.filtered == {"empty_completion": 2 * BATCH_ROWS + 17 - len(kept)}
    table = polars.read_ipc(tmp_path / "one.arrow")  # another reader than the steps' own
    assert table.height == one.samples == one.conversations == len(kept)
    assert table["row"].to_list() == kept
    assert [len(ids) for ids in table["input_ids"].to_list()] == table["length"].to_list()
    assert table.schema["input_ids"] == polars.List(polars.Int32)
    assert one.sha256 == hashlib.sha256((tmp_path / "one.arrow").read_bytes()).hexdigest()
    plain = pa.BufferOutputStream()  # the same table in an IPC file without compression: ours is compressed
    stored = pa.ipc.open_file(tmp_path / "one.arrow").read_all()
    with pa.ipc.new_file(plain, stored.schema) as writer:
        writer.write_table(stored)
    assert (tmp_path / "one.arrow").stat().st_size < plain.getvalue().size / 2
    assert one.eos_id is None and one.tokenizer_backend  # the small tokenizer names no EOS token


def test_an_unreadable_row_is_named_by_shard_and_row_from_inside_a_worker(spec, tmp_path):
    rows = harmony_rows(BATCH_ROWS + 5)
    rows[BATCH_ROWS + 1]["messages"] = '[{"role": "user", "content": "cut'
    write_shard(tmp_path / "shard.parquet", rows)
    with pytest.raises(InputError, match=rf"shard.parquet.*row {BATCH_ROWS + 1}.*messages.*not valid JSON"):
        build_samples_file(tmp_path / "shard.parquet", "shard.parquet", spec, tmp_path / "out.arrow", workers=2)


def test_an_empty_shard_still_records_the_tokenizer_facts(spec, tmp_path):
    pq.write_table(pa.Table.from_pylist(harmony_rows(1)).slice(0, 0), tmp_path / "shard.parquet")
    stats = build_samples_file(tmp_path / "shard.parquet", "shard.parquet", spec, tmp_path / "out.arrow")
    assert stats.samples == 0 and stats.tokenizer_backend


def test_the_packer_names_a_samples_file_row_holding_an_impossible_mask_value(spec, tmp_path):
    shard = tmp_path / "shard.parquet"
    rows = [{**row, "quality_completion_nonempty": True} for row in harmony_rows(BATCH_ROWS + 20)]
    write_shard(shard, rows)  # one sample per row: samples-file row n is shard row n
    store = Storage(str(tmp_path / "root"))
    target = tmp_path / "root" / (sft_samples_prefix("blend", ShardKey.parse("chat/shard_00000")) + ".arrow")
    target.parent.mkdir(parents=True)
    build_samples_file(shard, "shard.parquet", spec, target)
    plan_rows = pa.table({"file": ["chat/shard_00000"] * 2, "row": [1, BATCH_ROWS + 3]})
    found = read_samples(store, "blend", plan_rows)
    original = pa.ipc.open_file(target).read_all()
    assert np.array_equal(found.by_position(plan_rows)[("chat/shard_00000", BATCH_ROWS + 3)].input_ids,
                          original.column("input_ids")[BATCH_ROWS + 3].values.to_numpy())

    masks = original.column("assistant_mask").to_pylist()
    masks[BATCH_ROWS + 3][1] = 2
    broken = original.set_column(original.schema.get_field_index("assistant_mask"), "assistant_mask",
                                 pa.array(masks, type=pa.list_(pa.uint8())))
    with pa.ipc.new_file(target, broken.schema) as writer:
        writer.write_table(broken, max_chunksize=BATCH_ROWS)
    with pytest.raises(RuntimeError, match=rf"shard_00000.arrow row {BATCH_ROWS + 3}: assistant_mask holds 2"):
        read_samples(store, "blend", plan_rows)


FORKING_RUN = """
import json, sys
from pathlib import Path
import nemotron_assets.defs.sft.render_pool as pool
from nemotron_assets.chat import tokenizers
from nemotron_assets.chat.chat_format import ChatFormatSpec
from nemotron_assets.defs.sft.samples_step import build_samples_file

decided = []
choose = pool._fork_after_preload
pool._fork_after_preload = lambda spec: decided.append(choose(spec)) or decided[-1]
imported_before = "fastokens" in sys.modules
spec = ChatFormatSpec("chatml", sys.argv[1])
stats = [build_samples_file(sys.argv[2], "shard.parquet", spec, Path(out), workers=2).as_dict() for out in sys.argv[3:]]
print(json.dumps({"imported_before": imported_before, "forked": decided, "left": len(tokenizers._PRELOADED),
                  "stats": stats}))
"""


def test_workers_forked_after_a_preload_write_the_bytes_one_process_writes(spec, tmp_path):
    """A fresh process (fastokens never imported) forks its workers after parsing the tokenizer once; a second
    build in the same process spawns them (fastokens is imported now). Both write what one process writes."""
    shard = tmp_path / "shard.parquet"
    write_shard(shard, harmony_rows(BATCH_ROWS + 40))
    one = build_samples_file(shard, "shard.parquet", spec, tmp_path / "one.arrow", workers=1)
    run = subprocess.run([sys.executable, "-c", FORKING_RUN, spec.tokenizer_model, str(shard),
                          str(tmp_path / "forked.arrow"), str(tmp_path / "spawned.arrow")],
                         capture_output=True, text=True, check=True)
    report = json.loads(run.stdout)
    assert report["imported_before"] is False and report["forked"] == [True, False] and report["left"] == 0
    for name in ("forked", "spawned"):
        assert (tmp_path / f"{name}.arrow").read_bytes() == (tmp_path / "one.arrow").read_bytes()
    # the forked workers use the tokenizer parsed ahead, fastokens included; alone or spawned, ``auto`` renders this
    # little text with hf-tokenizers
    alone = one.as_dict()
    backends = [stats.pop("tokenizer_backend") for stats in report["stats"]]
    assert (alone.pop("tokenizer_backend"), backends) == ("hf-tokenizers", ["fastokens", "hf-tokenizers"])
    assert report["stats"] == [alone] * 2


def test_a_shard_renders_on_every_core_from_4_mb_when_the_workers_fork_and_from_32_mb_when_they_spawn(monkeypatch):
    """Forked workers start at once (the tokenizer parsed here first), spawned ones take seconds: a medium shard is
    worth both cores only in the first case."""
    from nemotron_assets.defs.sft import samples_step

    monkeypatch.setattr(samples_step, "usable_cores", lambda: 2)
    llama, harmony = ChatFormatSpec("chatml", "llama3"), ChatFormatSpec("harmony", "o200k_harmony")
    monkeypatch.delitem(sys.modules, "fastokens", raising=False)  # a process that never loaded fastokens
    assert [samples_step.render_workers(size, llama) for size in ((4 << 20) - 1, 4 << 20)] == [1, 2]
    sizes = (4 << 20, (32 << 20) - 1, 32 << 20)
    assert [samples_step.render_workers(size, harmony) for size in sizes] == [1, 1, 2]
    monkeypatch.setitem(sys.modules, "fastokens", object())  # now loaded: workers would be spawned
    assert [samples_step.render_workers(size, llama) for size in (4 << 20, 32 << 20)] == [1, 2]
