"""Packed chat SFT through a real Dagster instance, on the post-training sample blend (its ``sft:`` section:
Harmony, pack_size 1024, Parquet and .npy), read back with independent readers: pyarrow for the Parquet files,
numpy and a restricted unpickler (Megatron-Bridge's rules) for the .npy.

The blend is built once per module (source split, Harmony shards, dedup, then the four SFT assets), and its
``rows_3`` sample twin (the first 3 rows of each dataset) up to its plan beside it; tests that change a setting or
damage a file work on a copy, in an instance of their own. Templates other than Harmony keep the o200k_harmony
tokenizer, already loaded."""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.core.records import read_receipt, receipt_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft.inputs import PackedSft
from nemotron_assets.defs.sft.layout import SftShardKey, sft_plan_prefix
from nemotron_assets.defs.sft.pack_step import packed_build
from nemotron_assets.defs.sft.status import sft_problems, sft_states
from nemotron_assets_tests.bridge_reader import load_like_bridge
from nemotron_assets_tests.conftest import REPO, quick_instance
from nemotron_assets_tests.defs.sft.sft_pipeline import SftPipeline

FIXTURES = REPO / "nemotron_assets_tests" / "chat" / "fixtures"
SPLITS = ("train", "valid", "test")
PACK_SIZE = 1024


@dataclass
class AssetStatus:
    """One SFT asset's outputs: done, stale (key -> why) and missing."""

    asset: str
    done: int = 0
    stale: dict = field(default_factory=dict)
    missing: list = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.done + len(self.stale) + len(self.missing)


def sft_status(store: Storage, blend, base: str) -> list[AssetStatus]:
    """The state of every packed-SFT output, per asset in pipeline order (defs/sft/status.py)."""
    report = {name: AssetStatus(name) for name in ("sft_samples", "sft_plan", "sft_packed", "sft_manifest")}
    for output in sft_states(store, PackedSft.of(blend), base):
        status = report[output.asset]
        if output.freshness.done:
            status.done += 1
        elif output.freshness.state.value == "stale":
            status.stale[output.key] = output.freshness.reason
        else:
            status.missing.append(output.key)
    return list(report.values())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft") / "data"
    with quick_instance() as instance:
        full = SftPipeline(root, instance)
        full.upstream()
        full.results = full.packed_sft()
        twin = SftPipeline(root, instance, sample="rows_3")
        twin.upstream()
        twin.packed_sft(steps=2)
        yield full, twin


def copy_of(built, tmp_path: Path, instance: dg.DagsterInstance, **sft_changes) -> SftPipeline:
    """The full build's files in a private folder, with the blend's sft: settings changed, in ``instance`` (its
    Harmony shard partitions registered, as source_split would)."""
    full, _ = built
    twins = full.out / "samples"
    shutil.copytree(full.root, tmp_path / "data",
                    ignore=lambda folder, names: ["samples"] if Path(folder) == full.out and twins.exists() else [])
    blend = full.blend.model_copy(update={"sft": full.blend.sft.model_copy(update=sft_changes)})
    pipeline = SftPipeline(tmp_path / "data", instance, blend)
    shards = pipeline.assets.harmony_shard.partitions_def
    instance.add_dynamic_partitions(shards.name, full.keys(shards))
    return pipeline


def materialized(result) -> dict[str, dict]:
    return {m.partition or "": {k: v.value for k, v in m.metadata.items()}
            for m in result.asset_materializations_for_node(result.all_node_events[0].node_name)} \
        if result.asset_materializations_for_node(result.all_node_events[0].node_name) else {}


def statuses(result) -> dict[str, str]:
    return {m.partition or "": m.metadata["status"].value
            for event in result.all_events if event.event_type_value == "ASSET_MATERIALIZATION"
            for m in [event.event_specific_data.materialization]}


# --- independent readers --------------------------------------------------------------------------------------
def samples_files(out: Path) -> dict[tuple[str, str, int], list[dict]]:
    """(dataset, id, sample) -> the samples-file rows of that sample (pyarrow); a repeated row gives two."""
    rows: dict[tuple[str, str, int], list[dict]] = {}
    for path in sorted((out / "sft" / "samples").glob("*/shard_*.arrow")):
        for row in pa.ipc.open_file(path).read_all().to_pylist():
            rows.setdefault((row["dataset"], row["id"], row["sample"]), []).append(row)
    return rows


def packed_samples(out: Path, split: str) -> list[tuple[tuple[str, str, int], list[int], list[int]]]:
    """Every stored sample of a split: (key, ids, shifted loss mask), unpacked with pyarrow and seq_start_id."""
    found = []
    for shard in sorted((out / "sft" / split).glob("shard_?????.parquet")):
        bins = pq.read_table(shard).to_pylist()
        for entry in pq.read_table(shard.parent / ".meta" / f"{shard.stem}.samples.parquet").to_pylist():
            bin_ = bins[entry["bin"]]
            a, b = entry["offset"], entry["offset"] + entry["length"]
            found.append(((entry["dataset"], entry["id"], entry["sample"]), bin_["input_ids"][a:b],
                          bin_["loss_mask"][a:b]))
    return found


def test_bins_are_bridge_shaped_and_unpack_to_the_samples_files(built):
    full, _ = built
    rendered = samples_files(full.out)
    packed_keys = []
    for split in SPLITS:
        (shard,) = sorted((full.out / "sft" / split).glob("shard_?????.parquet"))
        parquet = pq.ParquetFile(shard)
        assert parquet.schema_arrow == pa.schema([("input_ids", pa.list_(pa.int32())),
                                                  ("loss_mask", pa.list_(pa.uint8())),
                                                  ("seq_start_id", pa.list_(pa.int32()))])
        assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"
        for bin_ in parquet.read().to_pylist():
            bounds = [*bin_["seq_start_id"], len(bin_["input_ids"])]
            assert bounds[0] == 0 and len(bin_["input_ids"]) - len(bin_["seq_start_id"]) <= PACK_SIZE
            assert all(bin_["loss_mask"][end - 1] == 0 for end in bounds[1:])
        for key, ids, loss_mask in packed_samples(full.out, split):
            expected = rendered[key][0]
            assert ids == expected["input_ids"]
            assert loss_mask == expected["assistant_mask"][1:] + [0]  # shifted left by one, last position 0
            packed_keys.append(key)
    # weight 1: every sample once, and the math row that repeats an earlier one (same id) not again
    assert sorted(packed_keys) == sorted(rendered)
    assert sum(len(rows) for rows in rendered.values()) == len(packed_keys) + 1


def test_every_split_gets_samples_and_the_npy_loads_with_numpy_and_bridges_unpickler(built):
    full, _ = built
    manifest = json.loads((full.out / "sft" / "manifest.json").read_text())
    for split in SPLITS:
        bins = [row for shard in sorted((full.out / "sft" / split).glob("shard_?????.parquet"))
                for row in pq.read_table(shard).to_pylist()]
        assert bins, split
        data = (full.out / "sft" / f"{split}.npy").read_bytes()
        for loaded in (np.load(full.out / "sft" / f"{split}.npy", allow_pickle=True), load_like_bridge(data)):
            assert loaded.dtype == object and loaded.shape == (len(bins),)
            assert [dict(item) for item in loaded] == bins
        counts = manifest["splits"][split]
        assert counts["bins"] == len(bins) and counts["files"] == [f"{split}/shard_00000.parquet"]
        assert sorted(counts["sha256"]) == [f"{split}/.meta/shard_00000.samples.parquet",  # the listing, hidden
                                            f"{split}/shard_00000.parquet"]
        assert counts["tokens"] == sum(len(b["input_ids"]) for b in bins)
        assert counts["trained_tokens"] == sum(sum(b["loss_mask"]) for b in bins)
        assert counts["samples"] == sum(len(b["seq_start_id"]) for b in bins)
    assert manifest["eos_id"] == 200002 and manifest["template"] == {"builtin": "harmony"}
    metadata = json.loads((full.out / "sft" / "packing_metadata.json").read_text())
    assert [entry["pack_size"] for entry in metadata] == [PACK_SIZE] * 3
    assert manifest["before_split"]["excluded_by_plan"] == {"duplicate": 1}


def test_checks_pass_and_a_second_materialize_rebuilds_nothing(built):
    full, _ = built
    evaluations = full.results[2].get_asset_check_evaluations()
    assert len(evaluations) == 3 * 3 and all(e.passed for e in evaluations)
    before = {p: p.stat().st_mtime_ns for p in (full.out / "sft").rglob("*") if p.is_file()}
    again = full.packed_sft()
    assert {status for result in again for status in statuses(result).values()} == {"up to date"}
    assert {p: p.stat().st_mtime_ns for p in (full.out / "sft").rglob("*") if p.is_file()} == before


def planned_splits(out: Path) -> dict[tuple[str, str, int], str]:
    """(dataset, id, sample) -> split, from plan.parquet and the samples files it names (pyarrow)."""
    samples = {}
    for path in (out / "sft" / "samples").glob("*/shard_*.arrow"):
        table = pa.ipc.open_file(path).read_all().select(["dataset", "id", "sample"]).to_pylist()
        samples[f"{path.parent.name}/{path.stem}"] = [(r["dataset"], r["id"], r["sample"]) for r in table]
    return {samples[row["file"]][row["row"]]: row["split"]
            for row in pq.read_table(out / "sft" / "plan.parquet", columns=["split", "file", "row"]).to_pylist()}


def test_a_process_building_shard_after_shard_keeps_only_the_last_ones_samples(built, tmp_path):
    """A forked build process (core/step.py ``ShardRun``) takes shard after shard; the samples a build read are kept
    for the shard's checks in the step, so each build drops those an earlier one left."""
    full, _ = built
    store, base = Storage(str(full.root)), full.blend.name
    plan = read_receipt(store, sft_plan_prefix(base))
    keys = sorted(plan.stats["shards"])
    read_by_build: dict = {}
    for key in keys:
        (tmp_path / key).mkdir(parents=True)
        packed_build(store, base, base, SftShardKey.parse(key), plan, read_by_build).build(tmp_path / key, print, 1)
    assert len(keys) > 1 and list(read_by_build) == [keys[-1]]


def test_holdout_adding_rows_never_moves_one(built):
    """rows_3 (the first 3 rows of every dataset, a sample twin) plus the other rows is the full build: every sample
    rows_3 plans is in the same split in the full build's plan."""
    full, twin = built
    split_of, twin_splits = planned_splits(full.out), planned_splits(twin.out)
    assert twin_splits and len(twin_splits) < len(split_of)
    assert {key: split_of[key] for key in twin_splits} == twin_splits
    assert set(split_of.values()) == set(SPLITS)


def test_changing_pack_size_replans_and_repacks_without_rerendering(built, tmp_path):
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance, pack_size=512)
        store = Storage(str(pipeline.root))
        report = {s.asset: s for s in sft_status(store, pipeline.blend, pipeline.blend.name)}
        assert report["sft_samples"].done == 11 and not report["sft_samples"].stale
        assert "packing.pack_size=1024, now 512" in report["sft_plan"].stale[""]
        assert len(report["sft_packed"].stale) == 3 and report["sft_manifest"].stale
        samples = sorted((pipeline.out / "sft" / "samples").rglob("*.*"))
        before = {p: p.stat().st_mtime_ns for p in samples}
        results = pipeline.packed_sft()
        assert set(statuses(results[0]).values()) == {"up to date"}
        assert {p: p.stat().st_mtime_ns for p in samples} == before  # nothing re-rendered
        assert set(statuses(results[1]).values()) == set(statuses(results[2]).values()) == {"built"}
        for split in SPLITS:
            for shard in (pipeline.out / "sft" / split).glob("shard_?????.parquet"):
                assert all(len(b["input_ids"]) - len(b["seq_start_id"]) <= 512
                           for b in pq.read_table(shard).to_pylist())
        assert {s.asset: s.done == s.total for s in sft_status(store, pipeline.blend, pipeline.blend.name)} \
            == dict.fromkeys(("sft_samples", "sft_plan", "sft_packed", "sft_manifest"), True)


def test_changing_the_template_rerenders(built, tmp_path):
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance, chat_template="chatml", tokenizer_model="o200k_harmony")
        store = Storage(str(pipeline.root))
        stale = sft_status(store, pipeline.blend, pipeline.blend.name)[0].stale
        assert len(stale) == 11 and all("template.builtin=\"harmony\", now \"chatml\"" in why
                                        for why in stale.values()), stale
        (samples,) = pipeline.packed_sft(steps=1)
        assert set(statuses(samples).values()) == {"built"}
        shard = pa.ipc.open_file(pipeline.out / "sft" / "samples" / "openai_chat" / "shard_00000.arrow").read_all()
        text = __import__("nemotron_assets.chat.o200k", fromlist=["x"]).o200k_harmony_encoding().decode(
            shard.column("input_ids")[0].as_py())
        assert text.startswith("<|im_start|>")


def test_a_template_failing_on_some_rows_counts_them_as_template_error(built, tmp_path):
    """The template refuses tool turns: the 4 agentic rows the sample reads all have one; the 4 science rows none."""
    template = tmp_path / "no_tools.jinja"
    template.write_text((FIXTURES / "llama3_tagged.jinja").read_text().replace(
        "{%- elif message.role == 'tool' %}", "{%- elif message.role == 'tool' %}{{ raise_exception('no tools') }}"))
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance, chat_template=str(template), tokenizer_model="o200k_harmony")
        keys = ["nemotron_agentic/shard_00000", "nemotron_science/shard_00000"]
        result = pipeline.run(pipeline.assets.sft_samples, keys)
        metadata = {m.partition: {k: v.value for k, v in m.metadata.items()}
                    for m in result.asset_materializations_for_node(result.all_node_events[0].node_name)}
        agentic, science = metadata[keys[0]], metadata[keys[1]]
        assert agentic["dropped_by_reason"] == {"template_error": 4} and agentic["samples"] == 0
        assert "no tools" in agentic["dropped_examples"] and "row 0" in agentic["dropped_examples"]
        # the science row Harmony cannot store (a special-token literal) is no longer filtered out, but dropped
        assert science["dropped_by_reason"] == {"special_token_literal": 1} and science["samples"] == 2


def test_a_template_that_is_not_prefix_stable_fails_naming_it_and_leaves_nothing(built, tmp_path):
    template = tmp_path / "counts_first.jinja"
    template.write_text("{{ messages | length }}{% for m in messages %}<|start_header_id|>{{ m.role }}"
                        "<|end_header_id|>{{ m.content }}<|eot_id|>{% endfor %}")
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance, chat_template=str(template), tokenizer_model="o200k_harmony")
        shard = pipeline.out / "sft" / "samples" / "nemotron_science" / "shard_00000"
        for path in (Path(f"{shard}.arrow"), Path(receipt_path(str(shard)))):
            path.unlink()
        result = pipeline.run(pipeline.assets.sft_samples, ["nemotron_science/shard_00000"], raise_on_error=False)
        assert not result.success
        failure = result.get_step_failure_events()[0].step_failure_data.error.message
        assert str(template) in failure and "not prefix-stable" in failure and "sft.chat_template" in failure
        assert not Path(f"{shard}.arrow").exists() and not Path(receipt_path(str(shard))).exists()
        assert not any((pipeline.root / ".staging").iterdir()) if (pipeline.root / ".staging").exists() else True


def test_status_and_verify_name_a_changed_or_corrupted_packed_shard(built, tmp_path):
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance)
        store = Storage(str(pipeline.root))
        assert sft_problems(None, store, pipeline.blend) == []
        shard = pipeline.out / "sft" / "valid" / "shard_00000.parquet"
        shard.write_bytes(shard.read_bytes() + b"x")
        problems = [str(p) for p in sft_problems(None, store, pipeline.blend)]
        assert any(p.startswith(f"{shard}: stale: its .parquet file changed") for p in problems), problems
        assert "valid/shard_00000" in sft_status(store, pipeline.blend, pipeline.blend.name)[2].stale

        # a buggy writer: the first user token of the first train sample trained, receipt rewritten to match
        train = pipeline.out / "sft" / "train" / "shard_00000"
        bins = pq.read_table(f"{train}.parquet").to_pylist()
        bins[0]["loss_mask"][3] = 1
        pq.write_table(pa.Table.from_pylist(bins, schema=pq.read_schema(f"{train}.parquet")), f"{train}.parquet",
                       compression="zstd")
        receipt = json.loads(Path(receipt_path(str(train))).read_text())
        data = Path(f"{train}.parquet").read_bytes()
        receipt["files"][".parquet"] = {"bytes": len(data), "sha256": __import__("hashlib").sha256(data).hexdigest()}
        receipt["committed"][".parquet"] = f"mtime_ns:{os.stat(f'{train}.parquet').st_mtime_ns}"
        Path(receipt_path(str(train))).write_text(json.dumps(receipt))
        problems = [str(p) for p in sft_problems(None, store, pipeline.blend) if "train/shard_00000" in str(p)]
        assert any("samples_match_plan" in p and "differs from the planned one" in p for p in problems), problems
        assert any("no_trained_token_on_masked_role" in p and "trained token(s) in masked span" in p
                   for p in problems), problems


def test_a_parquet_samples_file_of_the_format_before_is_rebuilt_as_arrow_and_removed(built, tmp_path):
    """Samples files were Parquet up to ``sft-samples/3``: such a file's receipt is stale, and its rebuild writes
    the Arrow file and deletes the Parquet one, which nothing reads any more."""
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance)
        store = Storage(str(pipeline.root))
        shard = pipeline.out / "sft" / "samples" / "nemotron_science" / "shard_00000"
        table = pa.ipc.open_file(f"{shard}.arrow").read_all()
        pq.write_table(table, f"{shard}.parquet")
        Path(f"{shard}.arrow").unlink()
        receipt = json.loads(Path(receipt_path(str(shard))).read_text())
        data = Path(f"{shard}.parquet").read_bytes()
        receipt["inputs"]["format"] = "sft-samples/3"
        receipt["files"] = {".parquet": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
        receipt["committed"] = {".parquet": f"mtime_ns:{os.stat(f'{shard}.parquet').st_mtime_ns}"}
        Path(receipt_path(str(shard))).write_text(json.dumps(receipt))
        stale = sft_status(store, pipeline.blend, pipeline.blend.name)[0].stale
        assert "format=\"sft-samples/3\", now \"sft-samples/4\"" in stale["nemotron_science/shard_00000"], stale

        pipeline.run(pipeline.assets.sft_samples, ["nemotron_science/shard_00000"])
        assert not Path(f"{shard}.parquet").exists()
        assert pa.ipc.open_file(f"{shard}.arrow").read_all().equals(table)
        assert sft_status(store, pipeline.blend, pipeline.blend.name)[0].stale == {}


def test_verify_names_a_samples_file_whose_rows_differ_from_its_receipt(built, tmp_path):
    """A samples file rewritten with a row fewer, its receipt's checksum updated to match (a writer bug, not
    damage): verify counts the rows itself."""
    with quick_instance() as instance:
        pipeline = copy_of(built, tmp_path, instance)
        store = Storage(str(pipeline.root))
        shard = pipeline.out / "sft" / "samples" / "nemotron_science" / "shard_00000"
        table = pa.ipc.open_file(f"{shard}.arrow").read_all()
        with pa.ipc.new_file(f"{shard}.arrow", table.schema) as writer:
            writer.write_table(table.slice(1))
        receipt = json.loads(Path(receipt_path(str(shard))).read_text())
        data = Path(f"{shard}.arrow").read_bytes()
        receipt["files"][".arrow"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        receipt["committed"][".arrow"] = f"mtime_ns:{os.stat(f'{shard}.arrow').st_mtime_ns}"
        Path(receipt_path(str(shard))).write_text(json.dumps(receipt))
        problems = [str(p) for p in sft_problems(None, store, pipeline.blend)]
        assert f"{shard}.arrow: holds {table.num_rows - 1:,} samples, its receipt says {table.num_rows:,}" \
            in problems, problems
