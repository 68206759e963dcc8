"""The JSONL path through a real Dagster instance: source rows -> transform -> holdout split -> JSONL shards ->
manifest. Outputs are read back with an independent reader (``zstandard`` + ``json``) and compared with what the
transform must give, derived here by hand from the transform's definition."""

import hashlib
import io
import json
import math
import os
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from nemotron_assets.cli.reports import collect_problems, collect_status
from nemotron_assets.core.records import NotReady
from nemotron_assets_tests.conftest import REPO, quick_instance
from nemotron_assets_tests.defs.jsonl.jsonl_pipeline import SAMPLE, Pipeline

SPLITS = ("train", "valid", "test")


def statuses(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    return {e.step_materialization_data.materialization.partition:
            e.step_materialization_data.materialization.metadata["status"].value
            for e in result.get_asset_materialization_events()}


# --- an independent reader and the transforms' definitions --------------------------------------------------
def read_jsonl(path: Path) -> list[dict]:
    data = path.read_bytes()
    if path.name.endswith(".zst"):
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return [json.loads(line) for line in data.decode().splitlines()]


def source_rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines()]


def transformed(transform: str | dict, row: dict) -> dict | None:
    """What the README says each transform of the sample gives, or None for a row it cannot take."""
    if transform == "nemotron_rl":
        params = row.get("responses_create_params")
        if not isinstance(params, dict) or not params.get("input") or "messages" in row or "tools" in row:
            return None
        out = {"messages": params["input"]} | ({"tools": params["tools"]} if params.get("tools") else {})
        return out | {k: v for k, v in row.items() if k != "responses_create_params"}
    if transform == "sharegpt":
        if not row.get("conversations"):
            return None
        return ({"system": row["system"]} if row.get("system") is not None else {}) | {
            "conversations": row["conversations"]}
    assert transform["name"] == "sft"
    names = [transform["input"], transform["output"]]
    if not all(isinstance(row.get(name), str) for name in names):
        return None
    out = {"input": row[names[0]], "output": row[names[1]]}
    return out | ({"system": row[transform["system"]]} if row.get(transform["system"]) is not None else {})


def first_user_text(out: dict) -> str:
    if "input" in out:
        return out["input"]
    if "conversations" in out:
        return next(t["value"] for t in out["conversations"] if t["from"] == "human")
    return next(m["content"] for m in out["messages"] if m.get("role") == "user")


def holdout_split(key: str, valid: float, test: float, seed: int) -> str:
    """The holdout rule, written out: the first 8 bytes of sha256(seed NUL key) as a fraction of 2**64."""
    x = int.from_bytes(hashlib.sha256(f"{seed}\x00{key}".encode()).digest()[:8], "big")
    valid_end = math.floor(valid * 2**64)
    return "valid" if x < valid_end else "test" if x < valid_end + math.floor(test * 2**64) else "train"


def written_rows(out: Path, dataset: str) -> dict[str, list[dict]]:
    """Every row written for ``dataset``, per split, in shard order."""
    return {split: [row for path in sorted((out / dataset / split).glob("shard_*.jsonl*")) for row in read_jsonl(path)]
            for split in SPLITS}


# --- the sample, built once -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    with quick_instance() as instance:
        pipeline = Pipeline(SAMPLE, tmp_path_factory.mktemp("rl"), instance)
        pipeline.results = pipeline.all()
        yield pipeline


def test_outputs_are_the_transform_of_every_source_row_in_its_split_and_the_rest_is_counted(built):
    raw = yaml.safe_load(SAMPLE.read_text())
    holdout = raw["holdout"]
    entries = [(entry, split) for split in SPLITS for entry in raw.get(split) or []]
    assert {e["name"] for e, _ in entries} == {"math_rl", "tool_rl", "sharegpt_chat", "qa_sft", "math_rl_valid"}
    for entry, listed_under in entries:
        rows = source_rows(SAMPLE.parent / entry["path"])
        expected = {split: [] for split in SPLITS}
        refused = 0
        for row in rows:
            out = transformed(entry["transform"], row)
            if out is None:
                refused += 1
                continue
            split = listed_under if listed_under != "train" else holdout_split(first_user_text(out), **holdout)
            expected[split].append(out)
        written = written_rows(built.out, entry["name"])
        for split in SPLITS:
            assert written[split] == expected[split], (entry["name"], split)
            assert [list(r) for r in written[split]] == [list(r) for r in expected[split]]  # key order too
        stats = json.loads((built.out / entry["name"] / ".receipts" / "shard_00000.json").read_text())["stats"]
        assert stats["rows_in"] == len(rows) == sum(map(len, written.values())) + sum(stats["dropped"].values())
        assert sum(stats["dropped"].values()) == refused
    tool = written_rows(built.out, "tool_rl")
    assert all("parallel_tool_calls" not in row for rows in tool.values() for row in rows)  # not a task field
    assert all((built.out / "tool_rl" / split / "shard_00000.jsonl.zst").exists() for split in SPLITS if tool[split])


def test_drops_are_counted_by_reason_with_their_location(built):
    dropped = {d: json.loads((built.out / d / ".receipts" / "shard_00000.json").read_text())["stats"]
               for d in ("math_rl", "tool_rl", "sharegpt_chat", "qa_sft", "math_rl_valid")}
    assert {d: s["dropped"] for d, s in dropped.items()} == {
        "math_rl": {"empty:responses_create_params.input": 1, "missing:responses_create_params": 1},
        "tool_rl": {"conflict:messages": 1}, "sharegpt_chat": {"missing:conversations": 1},
        "qa_sft": {"not_a_string:answer": 1}, "math_rl_valid": {}}
    math = SAMPLE.parent / "sample_data" / "rl" / "math_rl.jsonl"
    assert dropped["math_rl"]["dropped_examples"] == [f"{math}:9: missing:responses_create_params",
                                                      f"{math}:12: empty:responses_create_params.input"]
    assert dropped["qa_sft"]["dropped_examples"] == [f"{math.parent / 'qa_sft.parquet'} row 4: not_a_string:answer"]


def test_every_rollout_of_one_prompt_lands_in_the_same_split(built):
    written = written_rows(built.out, "math_rl")
    splits = {row["uuid"]: split for split, rows in written.items() for row in rows}
    assert splits["5a0c1e3e-rl-math-0000"] == splits["5a0c1e3e-rl-math-0000-b"]
    assert all(written[split] for split in SPLITS)  # the sample exercises all three splits


def test_the_manifest_lists_every_file_per_split_in_dataset_then_shard_order(built):
    manifest = json.loads((built.out / "manifest.json").read_text())
    assert manifest["root"] == str(built.out)
    on_disk = sorted(p.relative_to(built.out).as_posix() for p in built.out.glob("*/*/shard_*.jsonl*"))
    assert sorted(path for split in SPLITS for path in manifest[split]) == on_disk
    for split in SPLITS:
        assert manifest[split] == sorted(manifest[split])  # dataset, then shard
        assert all(f"/{split}/" in path for path in manifest[split])
        assert manifest["rows"][split] == sum(len(read_jsonl(built.out / path)) for path in manifest[split])
    assert manifest["valid"].count("math_rl_valid/valid/shard_00000.jsonl") == 1
    assert manifest["datasets"]["tool_rl"]["compression"] == "zstd"


def test_checks_passed_and_verify_finds_nothing(built):
    evaluations = built.results[0].get_asset_check_evaluations()
    assert len(evaluations) == 5 and all(e.passed for e in evaluations)
    assert collect_problems(built.instance, built.store, built.blend) == []


def test_a_second_materialize_rebuilds_nothing(built):
    files = sorted(p for p in built.out.rglob("*") if p.is_file())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    shards, manifest = built.shards(), built.run(built.assets.jsonl_manifest)
    assert statuses(shards) == dict.fromkeys(built.shard_keys(), "up to date")
    assert statuses(manifest) == {None: "up to date"}
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before


def test_verify_names_a_corrupted_zstd_file(built):
    """Last of the tests on the shared build: it damages one byte and puts it back."""
    path = built.out / "tool_rl" / "train" / "shard_00000.jsonl.zst"
    original, stat = path.read_bytes(), path.stat()
    try:
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0xFF
        path.write_bytes(bytes(damaged))
        problems = collect_problems(built.instance, built.store, built.blend)
        assert [p.path for p in problems] == [str(path)]
        assert "changed after it was built" in problems[0].reason and "tool_rl/shard_00000" in problems[0].reason
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert collect_problems(built.instance, built.store, built.blend) == []


# --- builds of their own ----------------------------------------------------------------------------------
def _rl_lines(first: int, count: int) -> str:
    return "".join(json.dumps({"responses_create_params": {"input": [{"role": "user", "content": f"problem {i}"}]},
                               "expected_answer": str(i)}) + "\n" for i in range(first, first + count))


def test_adding_rows_moves_no_row_and_the_megatron_blend_leaves_jsonl_out(tmp_path, instance):
    """A dataset grows and is re-planned: every row keeps its split. A text dataset in the same blend gets Megatron
    shards; the JSONL dataset appears neither in blend.json nor in the Megatron table of status."""
    shutil.copy(REPO / "blends" / "sample_data" / "test.jsonl", tmp_path / "text.jsonl")
    (tmp_path / "rl.jsonl").write_text(_rl_lines(0, 60))
    (tmp_path / "b.yaml").write_text("holdout: {valid: 0.25, test: 0.25, seed: 7}\nnum_shards: 2\ndatasets:\n"
                                     "  - {name: text, path: text.jsonl, num_shards: 1}\n"
                                     "  - {name: rl, path: rl.jsonl, transform: nemotron_rl}\n")
    pipeline = Pipeline(tmp_path / "b.yaml", tmp_path / "out", instance)
    pipeline.plan()
    pipeline.shards()

    def splits() -> dict[str, str]:
        return {row["expected_answer"]: split for split, rows in written_rows(pipeline.out, "rl").items()
                for row in rows}

    before = splits()
    assert len(before) == 60 and set(before.values()) == set(SPLITS)
    with (tmp_path / "rl.jsonl").open("a") as source:
        source.write(_rl_lines(60, 40))
    pipeline.plan()
    pipeline.shards()
    after = splits()
    assert len(after) == 100 and {k: after[k] for k in before} == before

    pipeline.run(pipeline.assets.pretrain_shard, pipeline.instance.get_dynamic_partitions(
        pipeline.assets.pretrain_shard.partitions_def.name))
    pipeline.run(pipeline.assets.megatron_blend)
    listed = json.loads((tmp_path / "out" / "b" / "pretrain" / "blend.json").read_text())
    assert listed["train"][1::2] == [str(tmp_path / "out" / "b" / "pretrain" / "text" / "shard_00000")]
    report = collect_status(instance, pipeline.store, pipeline.blend)
    assert [(d.dataset, d.path) for d in report.datasets] == [("text", "pretrain"), ("rl", "jsonl")]


def test_changing_compression_or_transform_makes_exactly_that_dataset_stale(sample_blends, tmp_path, instance):
    pipeline = Pipeline(sample_blends / "rl_sample.yaml", tmp_path / "out", instance)
    pipeline.all()
    raw = yaml.safe_load((sample_blends / "rl_sample.yaml").read_text())
    raw["train"][0]["compression"] = "zstd"  # math_rl
    raw["train"][2]["transform"] = "passthrough"  # sharegpt_chat
    (sample_blends / "rl_sample.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    changed = Pipeline(sample_blends / "rl_sample.yaml", tmp_path / "out", instance)

    report = collect_status(instance, changed.store, changed.blend)
    stale = {d.dataset: reason for d in report.datasets for reason in d.stale.values()}
    assert sorted(stale) == ["math_rl", "sharegpt_chat"]
    assert "compression=null, now \"zstd\"" in stale["math_rl"]
    assert "transform.name=\"sharegpt\", now \"passthrough\"" in stale["sharegpt_chat"]
    with pytest.raises(NotReady, match=r"2 JSONL shard\(s\) of rl_sample are not up to date: math_rl/shard_00000 "
                                       r"\(stale: built with compression"):
        from nemotron_assets.defs.jsonl.shard import jsonl_datasets, materialize_jsonl_manifest

        materialize_jsonl_manifest(changed.store, "rl_sample", jsonl_datasets(changed.blend), "rl_sample")

    rebuilt = statuses(changed.shards())
    assert sorted(key for key, status in rebuilt.items() if status == "built") == [
        "math_rl/shard_00000", "sharegpt_chat/shard_00000"]
    math_files = sorted(p.relative_to(changed.out / "math_rl").as_posix()
                        for p in (changed.out / "math_rl").rglob("shard_00000.jsonl*"))
    assert math_files == [f"{split}/shard_00000.jsonl.zst" for split in ("test", "train", "valid")]  # no .jsonl left
    passthrough = written_rows(changed.out, "sharegpt_chat")
    assert {"id": "no-conversation", "text": "a stray pretraining row"} in passthrough["train"] + passthrough["valid"] \
        + passthrough["test"]


def _three_datasets(tmp_path: Path, on_error: str) -> Path:
    (tmp_path / "one.jsonl").write_text(_rl_lines(0, 5))
    (tmp_path / "bad.jsonl").write_text(_rl_lines(0, 3) + '{"responses_create_params": {"input": [\n' + _rl_lines(3, 2))
    (tmp_path / "three.jsonl").write_text(_rl_lines(10, 4))
    blend = tmp_path / "three.yaml"
    blend.write_text(f"on_error: {on_error}\ndatasets:\n" + "".join(
        f"  - {{name: {name}, path: {name}.jsonl, transform: nemotron_rl}}\n" for name in ("one", "bad", "three")))
    return blend


def test_one_unreadable_dataset_fails_alone_naming_file_and_line_and_skip_counts_it(tmp_path, instance):
    pipeline = Pipeline(_three_datasets(tmp_path, "raise"), tmp_path / "out", instance)
    pipeline.plan()
    result = pipeline.shards(raise_on_error=False)
    assert not result.success
    assert sorted(statuses(result)) == ["one/shard_00000", "three/shard_00000"]
    error = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    message = str(error.cause or error) if error.cause else error.message
    assert "bad/shard_00000" in message and f"{tmp_path / 'bad.jsonl'}:4" in message and "malformed JSON" in message
    assert not (pipeline.out / "bad").exists()  # nothing half-written
    assert len(read_jsonl(pipeline.out / "one" / "train" / "shard_00000.jsonl")) == 5

    skipping = Pipeline(tmp_path / "three.yaml", tmp_path / "out", instance, on_error="skip")
    assert statuses(skipping.shards()) == {"one/shard_00000": "up to date", "bad/shard_00000": "built",
                                           "three/shard_00000": "up to date"}
    stats = json.loads((pipeline.out / "bad" / ".receipts" / "shard_00000.json").read_text())["stats"]
    assert stats["rows_in"] == 6 and stats["rows"] == {"train": 5} and stats["dropped"] == {"malformed_json": 1}
    assert stats["dropped_examples"][0].startswith(f"dataset 'bad': {tmp_path / 'bad.jsonl'}:4: malformed JSON")
