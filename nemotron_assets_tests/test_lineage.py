"""W&B lineage, offline: materialize the sample blend with the resource on, then read the offline run folders
(the ``.wandb`` record logs) back and check the artifacts, their metadata, references and input links."""

import json
import struct
import sys

import dagster as dg
import pytest

from nemotron_assets.resources.wandb_lineage import WandbLineage
from nemotron_assets_tests.materialize_helpers import materialize_all, pipeline_for

try:
    import wandb
except ImportError:  # fail, never skip: `make setup` installs the extra, so a missing one is a broken install
    pytest.fail("wandb is missing: the 'lineage' extra is not installed (pip install -e '.[lineage]')",
                pytrace=False)

BLOCK = 32768  # .wandb = ":W&B" header (7 bytes), then LevelDB-log records in 32 KiB blocks
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path) -> list:
    """The protobuf records of an offline run's ``.wandb`` file."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a .wandb file"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
        elif kind == 0:
            break  # zero padding at the end of the last block
    return records


def offline_runs(wandb_dir) -> dict[str, list]:
    """job_type -> the artifact records of each offline run, in run order."""
    runs: dict[str, list] = {}
    for run_file in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        records = read_records(run_file)
        [job_type] = [r.run.job_type for r in records if r.WhichOneof("record_type") == "run"]
        runs.setdefault(job_type, []).append([r.artifact for r in records
                                              if r.WhichOneof("record_type") == "artifact"])
    return runs


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    folder = tmp_path / "wandb"
    folder.mkdir()
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(folder),
                        "WANDB_CACHE_DIR": str(folder / "cache"), "WANDB_CONFIG_DIR": str(folder / "config"),
                        "WANDB_DATA_DIR": str(folder / "data"), "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return folder


WANDB_OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}


def _build_with_lineage(tmp, build) -> tuple:
    """``build(root, lineage)`` with W&B offline into ``tmp/wandb``; (data root, wandb dir)."""
    folder = tmp / "wandb"
    folder.mkdir()
    env = {**WANDB_OFFLINE, "WANDB_DIR": str(folder), "WANDB_CACHE_DIR": str(folder / "cache"),
           "WANDB_CONFIG_DIR": str(folder / "config"), "WANDB_DATA_DIR": str(folder / "data")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("WANDB_API_KEY", raising=False)
        build(tmp / "data", WandbLineage(enabled=True, project="lineage-test", mode="offline"))
    wandb.teardown()  # wandb keeps its settings (WANDB_DIR) process-wide until torn down
    return tmp / "data", folder


@pytest.fixture(scope="module")
def sample_lineage(tmp_path_factory):
    """The sample blend materialized once with lineage on (offline); (data root, wandb dir)."""
    from nemotron_assets_tests.conftest import REPO

    def build(root, lineage):
        _, pipeline = pipeline_for(REPO / "blends" / "sample.yaml")
        materialize_all(pipeline, str(root), dg.DagsterInstance.ephemeral(), lineage=lineage)

    return _build_with_lineage(tmp_path_factory.mktemp("lineage"), build)


@pytest.fixture(scope="module")
def posttrain_lineage(tmp_path_factory):
    """The post-training sample materialized once with lineage on (offline)."""
    from nemotron_assets_tests.assets.test_harmony_assets import SAMPLE, Pipeline

    def build(root, lineage):
        with dg.instance_for_test() as instance:
            Pipeline(SAMPLE, root, instance, lineage=lineage).all()

    return _build_with_lineage(tmp_path_factory.mktemp("posttrain_lineage"), build)


def entries(artifact) -> dict[str, str]:
    return {c.path: c.ref for c in artifact.manifest.contents}


def test_each_materialization_is_one_offline_run(sample_lineage):
    _, folder = sample_lineage
    runs = offline_runs(folder)
    assert sorted(runs) == ["megatron_blend", "pretrain_shard"]
    assert len(runs["pretrain_shard"]) == 1 and len(runs["megatron_blend"]) == 1


def test_shard_run_uses_source_manifests_and_logs_shard_artifacts(sample_lineage):
    root, folder = sample_lineage
    [artifacts] = offline_runs(folder)["pretrain_shard"]
    used = {a.name: a for a in artifacts if a.use_after_commit}
    logged = {a.name: a for a in artifacts if not a.use_after_commit}
    datasets = ["wiki", "reference", "code", "wiki_valid", "reference_test"]
    assert sorted(used) == sorted(f"sample-{d}-source" for d in datasets)
    assert {a.type for a in used.values()} == {"source-manifest"}
    assert entries(used["sample-wiki-source"]) == {
        "sample/sources/wiki/manifest.json": f"file://{root}/sample/sources/wiki/manifest.json"}
    assert sorted(logged) == sorted(f"sample-{d}-shards" for d in datasets)
    wiki = logged["sample-wiki-shards"]
    assert wiki.type == "pretrain-shards"
    metadata = json.loads(wiki.metadata)
    receipts = sorted((root / "sample" / "pretrain" / "wiki").glob("shard_*.json"))
    assert metadata["shards_done"] == metadata["shards_planned"] == len(receipts) > 1
    assert metadata["tokens"] == sum(json.loads(r.read_bytes())["stats"]["tokens"] for r in receipts)
    first = json.loads(receipts[0].read_bytes())["stats"]
    assert metadata["shards"]["wiki/shard_00000"]["bin_sha256"] == first["bin_sha256"]
    assert metadata["shards_in_run"]["wiki/shard_00000"]["status"] == "built"
    assert metadata["dagster_run_id"]
    refs = entries(wiki)
    for ext in (".bin", ".idx", ".json"):
        path = f"sample/pretrain/wiki/shard_00000{ext}"
        assert refs[path] == f"file://{root}/{path}"
    assert len(refs) == 3 * len(receipts)


def test_blend_run_uses_the_shard_artifacts_and_logs_the_blend(sample_lineage):
    root, folder = sample_lineage
    [shard_run] = offline_runs(folder)["pretrain_shard"]
    [artifacts] = offline_runs(folder)["megatron_blend"]
    used = [a for a in artifacts if a.use_after_commit]
    [blend] = [a for a in artifacts if not a.use_after_commit]
    produced = {a.name: a.digest for a in shard_run if a.type == "pretrain-shards"}
    # same entries as the shard run logged, so the same digest: W&B links the very versions the shards made
    assert {a.name: a.digest for a in used} == produced
    assert blend.name == "sample-megatron-blend" and blend.type == "megatron-blend"
    assert entries(blend) == {f"sample/pretrain/{f}": f"file://{root}/sample/pretrain/{f}"
                              for f in ("blend.json", "data_path.txt")}
    metadata = json.loads(blend.metadata)
    assert metadata["shards"] > 0 and metadata["blend"] == json.loads((root / "sample/pretrain/blend.json").read_text())
    assert set(metadata["tokens_by_split"]) == {"train", "valid", "test"}


def test_disabled_lineage_never_imports_wandb(tmp_path, offline_wandb, monkeypatch):
    from nemotron_assets_tests.conftest import REPO

    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    monkeypatch.setitem(sys.modules, "wandb", None)  # any import now raises
    _, pipeline = pipeline_for(REPO / "blends" / "sample.yaml")
    materialize_all(pipeline, str(tmp_path / "data"), dg.DagsterInstance.ephemeral(), lineage=WandbLineage())
    assert not list(offline_wandb.glob("wandb/offline-run-*"))


def test_lineage_is_enabled_by_environment(monkeypatch):
    monkeypatch.setenv("NEMOTRON_WANDB", "1")
    assert WandbLineage.from_environment().enabled
    monkeypatch.delenv("NEMOTRON_WANDB")
    assert not WandbLineage.from_environment().enabled


def test_harmony_shard_run_logs_one_harmony_artifact_per_dataset(posttrain_lineage):
    root, folder = posttrain_lineage
    runs = offline_runs(folder)
    assert sorted(runs) == ["candidate_pool", "harmony_shard"]
    [artifacts] = runs["harmony_shard"]
    from nemotron_assets.blend import load_blend
    from nemotron_assets_tests.assets.test_harmony_assets import SAMPLE

    datasets = [e.name for e in load_blend(SAMPLE).entries()]
    used = {a.name for a in artifacts if a.use_after_commit}
    logged = {a.name: a for a in artifacts if not a.use_after_commit}
    assert used == {f"posttrain_sample-{d}-source" for d in datasets}
    assert sorted(logged) == sorted(f"posttrain_sample-{d}-harmony" for d in datasets)
    math = logged["posttrain_sample-nemotron_math_v2-harmony"]
    assert math.type == "harmony-shards"
    receipt = json.loads((root / "posttrain_sample/harmony/nemotron_math_v2/shard_00000.json").read_bytes())
    metadata = json.loads(math.metadata)
    assert metadata["shards"]["nemotron_math_v2/shard_00000"]["sha256"] == receipt["files"][".parquet"]["sha256"]
    assert metadata["records"] == receipt["stats"]["records"]
    assert entries(math) == {f"posttrain_sample/harmony/nemotron_math_v2/shard_00000{ext}":
                             f"file://{root}/posttrain_sample/harmony/nemotron_math_v2/shard_00000{ext}"
                             for ext in (".json", ".parquet")}


def test_pool_run_uses_the_harmony_artifacts_and_logs_every_pool(posttrain_lineage):
    root, folder = posttrain_lineage
    runs = offline_runs(folder)
    produced = {a.name: a.digest for a in runs["harmony_shard"][0] if a.type == "harmony-shards"}
    [artifacts] = runs["candidate_pool"]
    assert {a.name: a.digest for a in artifacts if a.use_after_commit} == produced
    pools = {a.name: a for a in artifacts if not a.use_after_commit}
    from nemotron_assets.posttrain.pools import POOL_NAMES

    assert sorted(pools) == sorted(f"posttrain_sample-pool-{pool}" for pool in POOL_NAMES)
    tool_use = pools["posttrain_sample-pool-tool_use"]
    assert tool_use.type == "candidate-pool"
    manifest = json.loads((root / "posttrain_sample/pools/tool_use/manifest.json").read_bytes())
    assert json.loads(tool_use.metadata)["rows"] == manifest["rows"] > 0
    folder_url = f"file://{root}/posttrain_sample/pools/tool_use"
    assert sorted(entries(tool_use).values()) == [f"{folder_url}/{name}" for name in
                                                  ("manifest.json", "part-00000.json", "part-00000.parquet")]


@pytest.fixture(scope="module")
def jsonl_lineage(tmp_path_factory):
    """The JSONL sample materialized once with lineage on (offline)."""
    from nemotron_assets_tests.assets.test_jsonl_assets import SAMPLE, Pipeline

    def build(root, lineage):
        with dg.instance_for_test() as instance:
            Pipeline(SAMPLE, root, instance, lineage=lineage).all()

    return _build_with_lineage(tmp_path_factory.mktemp("jsonl_lineage"), build)


def test_jsonl_runs_link_source_manifests_to_shard_artifacts_to_the_manifest_artifact(jsonl_lineage):
    root, folder = jsonl_lineage
    runs = offline_runs(folder)
    assert sorted(runs) == ["jsonl_manifest", "jsonl_shard"]
    datasets = ["math_rl", "tool_rl", "sharegpt_chat", "qa_sft", "math_rl_valid"]
    [artifacts] = runs["jsonl_shard"]
    assert {a.name for a in artifacts if a.use_after_commit} == {f"rl_sample-{d}-source" for d in datasets}
    logged = {a.name: a for a in artifacts if not a.use_after_commit}
    assert sorted(logged) == sorted(f"rl_sample-{d}-jsonl" for d in datasets)
    tool = logged["rl_sample-tool_rl-jsonl"]
    assert tool.type == "jsonl-shards"
    receipt = json.loads((root / "rl_sample/jsonl/tool_rl/shard_00000.json").read_bytes())
    assert json.loads(tool.metadata)["shards"]["tool_rl/shard_00000"]["files"] == receipt["stats"]["files"]
    paths = ["shard_00000.json"] + [f"{split}/shard_00000.jsonl.zst" for split in ("train", "valid", "test")]
    assert entries(tool) == {f"rl_sample/jsonl/tool_rl/{p}": f"file://{root}/rl_sample/jsonl/tool_rl/{p}"
                             for p in paths}

    [artifacts] = runs["jsonl_manifest"]
    assert {a.name: a.digest for a in artifacts if a.use_after_commit} == {a.name: a.digest for a in logged.values()}
    [manifest] = [a for a in artifacts if not a.use_after_commit]
    assert manifest.name == "rl_sample-jsonl" and manifest.type == "jsonl-manifest"
    assert sorted(entries(manifest).values()) == [f"file://{root}/rl_sample/jsonl/{name}"
                                                  for name in ("manifest.json", "manifest.receipt.json")]
    assert json.loads(manifest.metadata)["rows_by_split"] == json.loads(
        (root / "rl_sample/jsonl/manifest.json").read_bytes())["rows"]
