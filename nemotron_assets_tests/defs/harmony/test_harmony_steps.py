"""The post-training path through a real Dagster instance: raw family rows -> Harmony shards -> dedup -> pools."""

import json
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from nemotron_assets.core.blend import load_blend
from nemotron_assets.formats.harmony import parse_harmony, validate_harmony
from nemotron_assets_tests.conftest import REPO, quick_instance
from nemotron_assets_tests.defs.harmony.harmony_pipeline import SAMPLE, Pipeline


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sample post-training blend materialized once (every asset), for the tests that only read it."""
    with quick_instance() as instance:
        pipeline = Pipeline(SAMPLE, tmp_path_factory.mktemp("built"), instance)
        pipeline.all()
        yield pipeline


def _lines(path: Path) -> int:
    return sum(1 for _ in path.open("rb"))


def test_every_family_becomes_harmony_rows_and_unreadable_rows_are_counted(built):
    pipeline, tmp_path = built, built.root
    for entry in pipeline.blend.entries():
        folder = tmp_path / "posttrain_sample" / "harmony" / entry.name
        table = pq.read_table(folder / "shard_00000.parquet")
        receipt = json.loads((folder / ".receipts" / "shard_00000.json").read_text())["stats"]
        source_rows = _lines(SAMPLE.parent / entry.path)
        assert receipt["rows"] == source_rows
        assert table.num_rows == source_rows - sum(receipt["dropped"].values())  # nothing lost silently
        for row in table.to_pylist():
            assert row["dataset"] == entry.name
            if row["quality_valid_harmony"]:
                assert validate_harmony(row["text"]) == [], row["text"][:200]


def test_every_valid_shard_row_parses_the_same_with_openai_harmony(built):
    """The reference parser (openai-harmony ``parse_messages_from_completion_tokens`` on the o200k_harmony
    tokens) reads every row our validator calls valid, into the same messages our parser reads."""
    from nemotron_assets_tests.harmony_reference import from_library, harmony_encoding

    encoding = harmony_encoding()
    checked = 0
    for shard in sorted((built.root / "posttrain_sample" / "harmony").glob("*/shard_*.parquet")):
        for row in pq.read_table(shard, columns=["id", "text", "quality_valid_harmony"]).to_pylist():
            if not row["quality_valid_harmony"]:
                continue
            tokens = encoding.encode(row["text"], allowed_special="all")
            parsed = [from_library(m) for m in encoding.parse_messages_from_completion_tokens(tokens)]
            assert parsed == parse_harmony(row["text"]), f"{shard.name} row {row['id']}"
            checked += 1
    assert checked >= 30, checked  # 33 valid rows in the sample


def test_dedup_removes_the_repeated_row_and_pools_hold_each_id_once(built):
    out = built.root / "posttrain_sample"
    duplicates = pq.read_table(out / "harmony" / "nemotron_math_v2" / ".meta" / "duplicates.parquet").to_pylist()
    shard = pq.read_table(out / "harmony" / "nemotron_math_v2" / "shard_00000.parquet").to_pylist()
    assert len(duplicates) == 1
    first = next(i for i, row in enumerate(shard) if row["id"] == duplicates[0]["id"])
    assert first < duplicates[0]["row"]  # the first occurrence wins
    with_meta = pq.read_table(out / "pools" / "has_correctness_meta" / "part-00000.parquet").to_pylist()
    without = pq.read_table(out / "pools" / "missing_correctness_meta" / "part-00000.parquet").to_pylist()
    ids = [row["id"] for row in with_meta + without]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("pool", "holds"), [
    ("high_correctness", lambda r: r["meta_correctness"] is not None and r["meta_correctness"] >= 0.875),
    ("low_correctness", lambda r: r["meta_correctness"] is not None and r["meta_correctness"] <= 0.25),
    ("tool_use", lambda r: r["meta_tool_call_count"] > 0),
    ("proof", lambda r: r["meta_domain"] == "math_proof"),
    ("reasoning_off", lambda r: r["source_reasoning"] == "off"),
])
def test_pool_rows_satisfy_the_pool_and_the_base_filter(built, pool, holds):
    folder = built.root / "posttrain_sample" / "pools" / pool
    rows = pq.read_table(folder / "part-00000.parquet").to_pylist()
    assert rows, f"the sample should put something in {pool}"
    for row in rows:
        assert holds(row)
        assert row["quality_valid_harmony"] and row["quality_completion_nonempty"] and not row["quality_is_duplicate"]
    manifest = json.loads((folder / ".meta" / "manifest.json").read_text())
    assert manifest["rows"] == len(rows) == sum(manifest["rows_by_dataset"].values())


def test_shards_built_one_by_one_in_reverse_order_give_the_same_dedup_and_pools(built, tmp_path):
    with quick_instance() as fresh:
        Pipeline(SAMPLE, tmp_path, fresh).all(shard_order=lambda keys: list(reversed(keys)))
    results = [sorted((p.relative_to(root).as_posix(), p.read_bytes()) for p in root.rglob("*.parquet"))
               for root in (built.root, tmp_path)]
    assert results[0] == results[1] and len(results[0]) > 20


def test_checks_pass_on_the_sample(built):
    pipeline = built
    checks = dg.AssetSelection.checks_for_assets(pipeline.assets.candidate_pool)
    result = pipeline.run(checks, ["tool_use"])
    evaluations = result.get_asset_check_evaluations()
    assert [e.check_name for e in evaluations] == ["rows_satisfy_predicate"] and evaluations[0].passed


def test_unreadable_row_fails_naming_dataset_file_line_and_field(tmp_path, instance):
    blends = tmp_path / "blends"
    shutil.copytree(REPO / "blends", blends)
    pipeline = Pipeline(blends / "posttrain_sample.yaml", tmp_path / "out", instance, on_error="raise")
    pipeline.run(pipeline.source_split, ["nemotron_math_v2"])
    result = pipeline.run(pipeline.assets.harmony_shard, ["nemotron_math_v2/shard_00000"], raise_on_error=False)
    assert not result.success
    error = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    message = str(error.cause or error)
    assert "dataset 'nemotron_math_v2'" in message and "nemotron_math_v2.jsonl:4" in message
    assert "field 'messages'" in message
    assert not (tmp_path / "out" / "posttrain_sample" / "harmony" / "nemotron_math_v2").exists()


def test_unknown_family_is_refused_when_the_blend_is_loaded(tmp_path):
    from nemotron_assets.sources.errors import InputError

    (tmp_path / "b.yaml").write_text("datasets:\n  - {name: x, path: x.jsonl, family: nemotron_mystery}\n")
    with pytest.raises(InputError, match="unknown family 'nemotron_mystery'"):
        load_blend(tmp_path / "b.yaml")


def test_embedding_views_have_one_row_per_pool_row_and_the_report_counts_tool_use(built):
    out = built.root / "posttrain_sample"
    pool = pq.read_table(out / "pools" / "tool_use" / "part-00000.parquet").to_pylist()
    for view in ("prompt", "reasoning_excerpt", "behavior"):
        rows = pq.read_table(out / "embedding" / view / "tool_use" / "part-00000.parquet").to_pylist()
        assert [r["id"] for r in rows] == [r["id"] for r in pool]
        assert all(r["word_count"] == len(r["embed_text"].split()) for r in rows)
    behaviors = pq.read_table(out / "embedding" / "behavior" / "tool_use" / "part-00000.parquet").to_pylist()
    assert all("calls: 0" not in r["embed_text"] for r in behaviors)
    report = (out / "embedding" / "behavior_report.md").read_text()
    assert f"| tool_use | {len(pool)} | {len(pool)} |" in report


def test_a_second_build_of_an_unchanged_blend_rebuilds_no_harmony_shard(tmp_path, instance, monkeypatch, capsys):
    from nemotron_assets.cli import main

    pipeline = Pipeline(SAMPLE, tmp_path, instance)
    pipeline.run(pipeline.source_split, [e.name for e in pipeline.blend.entries()])
    keys = pipeline.shard_keys()
    pipeline.run(pipeline.assets.harmony_shard, keys)
    shards = sorted((tmp_path / "posttrain_sample" / "harmony").rglob("shard_*"))
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in shards}
    again = pipeline.run(pipeline.assets.harmony_shard, keys)
    statuses = {e.step_materialization_data.materialization.partition:
                e.step_materialization_data.materialization.metadata["status"].value
                for e in again.get_asset_materialization_events()}
    assert statuses == dict.fromkeys(keys, "up to date")
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in shards} == before

    monkeypatch.setenv("DAGSTER_HOME", instance.root_directory)
    monkeypatch.setenv("NEMOTRON_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("NEMOTRON_BLENDS_DIR", str(SAMPLE.parent))
    assert main(["status", "posttrain_sample", "--json"]) == 0
    datasets = json.loads(capsys.readouterr().out)["blends"][0]["datasets"]
    assert datasets and all(d["path"] == "harmony" and d["done"] == d["planned"] > 0 for d in datasets)
    assert sum(d["written"] for d in datasets) == sum(pq.read_metadata(p).num_rows for p in shards
                                                      if p.suffix == ".parquet")


@pytest.mark.parametrize("mode", ["per_dataset", "across_datasets"])
def test_dedup_across_datasets_drops_a_later_datasets_copy_of_an_earlier_row(tmp_path, instance, mode):
    """Dataset ``later`` holds one row of ``first`` and one row of its own. Per dataset both stay; across
    datasets the copy goes, because ``first`` comes before ``later`` in the blend."""
    source = (REPO / "blends" / "sample_data" / "posttrain" / "nemotron_math_v2.jsonl").read_text().splitlines()
    (tmp_path / "first.jsonl").write_text("\n".join(source[:3]) + "\n")
    (tmp_path / "later.jsonl").write_text(source[1] + "\n" + source[4] + "\n")
    (tmp_path / "b.yaml").write_text(f"on_error: skip\ndedup: {mode}\n"
                                     "curation: {pools: [has_correctness_meta, missing_correctness_meta]}\ndatasets:\n"
                                     "  - {name: first, path: first.jsonl, family: nemotron_math_v2}\n"
                                     "  - {name: later, path: later.jsonl, family: nemotron_math_v2}\n")
    pipeline = Pipeline(tmp_path / "b.yaml", tmp_path / "out", instance)
    pipeline.all()
    harmony = tmp_path / "out" / "b" / "harmony"
    copied_id = pq.read_table(harmony / "first" / "shard_00000.parquet").column("id").to_pylist()[1]
    later = pq.read_table(harmony / "later" / ".meta" / "duplicates.parquet").to_pylist()
    assert pq.read_table(harmony / "first" / ".meta" / "duplicates.parquet").num_rows == 0
    assert later == ([{"shard": 0, "row": 0, "id": copied_id}] if mode == "across_datasets" else [])
    pooled = [row["id"] for pool in ("has_correctness_meta", "missing_correctness_meta")
              for row in pq.read_table(tmp_path / "out" / "b" / "pools" / pool / "part-00000.parquet").to_pylist()]
    assert pooled.count(copied_id) == (1 if mode == "across_datasets" else 2)
