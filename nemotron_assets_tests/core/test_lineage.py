"""W&B lineage, offline: materialize the sample blend with the resource on, then read the offline run folders
(the ``.wandb`` record logs) back and check the artifacts, their metadata, references and input links."""

import json
import struct
import sys

import dagster as dg
import pyarrow.parquet as pq
import pytest

from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets_tests.conftest import quick_instance
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
    from nemotron_assets_tests.defs.harmony.harmony_pipeline import SAMPLE, Pipeline

    def build(root, lineage):
        with quick_instance() as instance:
            Pipeline(SAMPLE, root, instance, lineage=lineage).all()

    return _build_with_lineage(tmp_path_factory.mktemp("posttrain_lineage"), build)


def entries(artifact) -> dict[str, str]:
    return {c.path: c.ref for c in artifact.manifest.contents}


def used_and_logged(artifacts) -> tuple[dict[str, str], dict]:
    """(name -> digest of each artifact a run used, name -> each artifact it logged), from its artifact records."""
    return ({a.name: a.digest for a in artifacts if a.use_after_commit},
            {a.name: a for a in artifacts if not a.use_after_commit})


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
    receipts = sorted((root / "sample" / "pretrain" / "wiki" / ".receipts").glob("shard_*.json"))
    assert metadata["shards_done"] == metadata["shards_planned"] == len(receipts) > 1
    assert metadata["tokens"] == sum(json.loads(r.read_bytes())["stats"]["tokens"] for r in receipts)
    first = json.loads(receipts[0].read_bytes())["stats"]
    assert metadata["shards"]["wiki/shard_00000"]["bin_sha256"] == first["bin_sha256"]
    assert metadata["shards_in_run"]["wiki/shard_00000"]["status"] == "built"
    assert metadata["dagster_run_id"]
    refs = entries(wiki)
    for name in ("shard_00000.bin", "shard_00000.idx", ".receipts/shard_00000.json"):
        path = f"sample/pretrain/wiki/{name}"
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
    from nemotron_assets.core.blend import load_blend
    from nemotron_assets_tests.defs.harmony.harmony_pipeline import SAMPLE

    datasets = [e.name for e in load_blend(SAMPLE).entries()]
    used = {a.name for a in artifacts if a.use_after_commit}
    logged = {a.name: a for a in artifacts if not a.use_after_commit}
    assert used == {f"posttrain_sample-{d}-source" for d in datasets}
    assert sorted(logged) == sorted(f"posttrain_sample-{d}-harmony" for d in datasets)
    math = logged["posttrain_sample-nemotron_math_v2-harmony"]
    assert math.type == "harmony-shards"
    receipt = json.loads((root / "posttrain_sample/harmony/nemotron_math_v2/.receipts/shard_00000.json").read_bytes())
    metadata = json.loads(math.metadata)
    assert metadata["shards"]["nemotron_math_v2/shard_00000"]["sha256"] == receipt["files"][".parquet"]["sha256"]
    assert metadata["records"] == receipt["stats"]["records"]
    assert entries(math) == {f"posttrain_sample/harmony/nemotron_math_v2/{name}":
                             f"file://{root}/posttrain_sample/harmony/nemotron_math_v2/{name}"
                             for name in (".receipts/shard_00000.json", "shard_00000.parquet")}


def test_pool_run_uses_the_harmony_artifacts_and_logs_every_pool(posttrain_lineage):
    root, folder = posttrain_lineage
    runs = offline_runs(folder)
    produced = {a.name: a.digest for a in runs["harmony_shard"][0] if a.type == "harmony-shards"}
    used, pools = used_and_logged(runs["candidate_pool"][0])
    assert used == produced
    from nemotron_assets.defs.harmony.pools import POOL_NAMES

    assert sorted(pools) == sorted(f"posttrain_sample-pool-{pool}" for pool in POOL_NAMES)
    tool_use = pools["posttrain_sample-pool-tool_use"]
    assert tool_use.type == "candidate-pool"
    manifest = json.loads((root / "posttrain_sample/pools/tool_use/.meta/manifest.json").read_bytes())
    assert json.loads(tool_use.metadata)["rows"] == manifest["rows"] > 0
    folder_url = f"file://{root}/posttrain_sample/pools/tool_use"
    assert sorted(entries(tool_use).values()) == [f"{folder_url}/{name}" for name in
                                                  (".meta/manifest.json", ".receipts/part-00000.json",
                                                   "part-00000.parquet")]


@pytest.fixture(scope="module")
def jsonl_lineage(tmp_path_factory):
    """The JSONL sample materialized once with lineage on (offline)."""
    from nemotron_assets_tests.defs.jsonl.jsonl_pipeline import SAMPLE, Pipeline

    def build(root, lineage):
        with quick_instance() as instance:
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
    receipt = json.loads((root / "rl_sample/jsonl/tool_rl/.receipts/shard_00000.json").read_bytes())
    assert json.loads(tool.metadata)["shards"]["tool_rl/shard_00000"]["files"] == receipt["stats"]["files"]
    paths = [".receipts/shard_00000.json"] + [f"{split}/shard_00000.jsonl.zst" for split in ("train", "valid", "test")]
    assert entries(tool) == {f"rl_sample/jsonl/tool_rl/{p}": f"file://{root}/rl_sample/jsonl/tool_rl/{p}"
                             for p in paths}

    [artifacts] = runs["jsonl_manifest"]
    assert {a.name: a.digest for a in artifacts if a.use_after_commit} == {a.name: a.digest for a in logged.values()}
    [manifest] = [a for a in artifacts if not a.use_after_commit]
    assert manifest.name == "rl_sample-jsonl" and manifest.type == "jsonl-manifest"
    assert sorted(entries(manifest).values()) == [f"file://{root}/rl_sample/jsonl/{name}"
                                                  for name in (".receipts/manifest.receipt.json", "manifest.json")]
    assert json.loads(manifest.metadata)["rows_by_split"] == json.loads(
        (root / "rl_sample/jsonl/manifest.json").read_bytes())["rows"]


@pytest.fixture(scope="module")
def scoring_lineage(tmp_path_factory):
    """The post-training sample with a scoring: section (a tiny random Llama, the bundled MiniLM) materialized once
    with lineage on (offline): the pools, the four scoring assets, then packed SFT from the easy selection."""
    from nemotron_assets.core.blend import load_blend
    from nemotron_assets_tests.defs.scoring.scoring_pipeline import POOL, SAMPLE, ScoringPipeline, scoring_settings
    from nemotron_assets_tests.defs.scoring.tiny_llama import build_tiny_llama

    tmp = tmp_path_factory.mktemp("scoring_lineage")
    model = build_tiny_llama(tmp / "model")
    sample = load_blend(SAMPLE)
    blend = sample.model_copy(update={"scoring": scoring_settings(model),
                                      "sft": sample.sft.model_copy(update={"from_": [f"{POOL}_easy"]})})

    def build(root, lineage):
        with quick_instance() as instance:
            pipeline = ScoringPipeline(root, instance, blend, lineage=lineage)
            sft = pipeline.assets  # the blend has sft: its assets are the pipeline's too
            pipeline.upstream()
            pipeline.scores()
            shards = pipeline.assets.harmony_shard.partitions_def.name
            pipeline.run(sft.sft_samples, instance.get_dynamic_partitions(shards))
            pipeline.run(sft.sft_plan)
            pipeline.run(sft.sft_packed, instance.get_dynamic_partitions(sft.sft_packed.partitions_def.name))
            pipeline.run(sft.sft_manifest)

    return (*_build_with_lineage(tmp, build), blend)


def test_scoring_runs_link_pools_to_scores_and_scores_to_selections_and_the_report(scoring_lineage):
    from nemotron_assets_tests.defs.scoring.scoring_pipeline import POOL, VIEWS

    root, folder, blend = scoring_lineage
    runs = offline_runs(folder)
    assert {"nll_scores", "embeddings", "selected_pool", "near_duplicate_report"} <= set(runs)
    name = blend.name
    _, pools = used_and_logged(runs["candidate_pool"][0])
    pool = f"{name}-pool-{POOL}"

    used, logged = used_and_logged(runs["nll_scores"][0])
    assert used == {pool: pools[pool].digest}  # the version the pool run logged
    [nll] = logged.values()
    assert nll.name == f"{name}-nll-{POOL}" and nll.type == "nll-scores"
    part = f"{name}/scores/nll/{POOL}/part-00000"
    files = (f"{name}/scores/nll/{POOL}/.receipts/part-00000.json", f"{part}.parquet")
    assert entries(nll) == {path: f"file://{root}/{path}" for path in files}
    metadata = json.loads(nll.metadata)
    receipt = json.loads((root / files[0]).read_bytes())
    assert metadata["receipts"][part]["tokens_scored"] == receipt["stats"]["tokens_scored"] > 0
    assert metadata["partitions_in_run"][f"{POOL}/part-00000"]["status"] == "built"

    used, embeddings = used_and_logged(runs["embeddings"][0])
    assert used == {pool: pools[pool].digest}
    assert sorted(embeddings) == sorted(f"{name}-embeddings-{view}-{POOL}" for view in VIEWS)
    prompt = embeddings[f"{name}-embeddings-prompt-{POOL}"]
    assert prompt.type == "embeddings"
    assert sorted(entries(prompt)) == [f"{name}/scores/embedding/prompt/{POOL}/{file}"
                                       for file in (".receipts/part-00000.json", "part-00000.parquet")]

    used, selections = used_and_logged(runs["selected_pool"][0])
    assert used == {nll.name: nll.digest, prompt.name: prompt.digest}  # NLL for easy/hard, prompts for diverse
    assert sorted(selections) == sorted(f"{name}-pool-{selection}" for selection in blend.scoring.selections())
    easy = selections[f"{name}-pool-{POOL}_easy"]
    assert easy.type == "selected-pool"
    folder_url = f"file://{root}/{name}/pools/{POOL}_easy"
    assert sorted(entries(easy).values()) == [f"{folder_url}/{file}" for file in
                                              (".meta/manifest.json", ".receipts/part-00000.json",
                                               "part-00000.parquet")]
    manifest = json.loads((root / name / "pools" / f"{POOL}_easy" / ".meta" / "manifest.json").read_bytes())
    assert json.loads(easy.metadata)["receipts"][f"{name}/pools/{POOL}_easy/part-00000"]["rows"] == manifest["rows"]

    used, logged = used_and_logged(runs["near_duplicate_report"][0])
    assert used == {a.name: a.digest for a in embeddings.values()}
    [report] = logged.values()
    assert report.name == f"{name}-near-duplicates" and report.type == "near-duplicate-report"
    assert sorted(entries(report)) == [f"{name}/scores/{file}" for file in (".receipts/near_duplicates.json",
                                                                            "near_duplicates.md",
                                                                            "near_duplicates.parquet")]


def test_packed_sft_from_a_selection_uses_the_selection_it_was_packed_from(scoring_lineage):
    from nemotron_assets_tests.defs.scoring.scoring_pipeline import POOL

    root, folder, blend = scoring_lineage
    runs = offline_runs(folder)
    _, selections = used_and_logged(runs["selected_pool"][0])
    easy = selections[f"{blend.name}-pool-{POOL}_easy"]
    used, logged = used_and_logged(runs["sft_manifest"][0])
    assert used[easy.name] == easy.digest  # the version the selection run logged
    assert {name for name in used if name != easy.name} == {
        f"{blend.name}-{e.name}-harmony" for e in blend.datasets_of("harmony")}
    assert [a.type for a in logged.values()] == ["sft-packed"]
    # the packed rows are the selection's: what the lineage says was read is what was read
    selected = set(pq.read_table(root / blend.name / "pools" / f"{POOL}_easy" / "part-00000.parquet",
                                 columns=["id"]).column("id").to_pylist())
    packed = {row for listing in (root / blend.name / "sft").glob("*/.meta/shard_?????.samples.parquet")
              for row in pq.read_table(listing, columns=["id"]).column("id").to_pylist()}
    assert packed and packed <= selected


@pytest.fixture(scope="module")
def sft_lineage(tmp_path_factory):
    """The post-training sample's packed SFT (its sft: section) materialized once with lineage on (offline)."""
    from nemotron_assets_tests.defs.sft.sft_pipeline import SftPipeline

    def build(root, lineage):
        with quick_instance() as instance:
            pipeline = SftPipeline(root, instance, lineage=lineage)
            pipeline.upstream()
            pipeline.packed_sft()

    return _build_with_lineage(tmp_path_factory.mktemp("sft_lineage"), build)


def test_sft_manifest_run_uses_the_harmony_artifacts_and_logs_the_packed_build(sft_lineage):
    root, folder = sft_lineage
    runs = offline_runs(folder)
    produced = {a.name: a.digest for a in runs["harmony_shard"][0] if a.type == "harmony-shards"}
    used, logged = used_and_logged(runs["sft_manifest"][0])
    assert used == produced
    [sft] = logged.values()
    assert sft.name == "posttrain_sample-sft" and sft.type == "sft-packed"
    out = root / "posttrain_sample" / "sft"
    manifest = json.loads((out / "manifest.json").read_bytes())
    shards = sorted(p.relative_to(root).as_posix() for p in out.glob("*/shard_?????.parquet"))
    assert shards, "the sample packs at least one shard"
    expected = {"manifest.json", ".receipts/manifest.receipt.json", "packing_metadata.json"}
    expected |= {p.relative_to(out).as_posix() for p in out.glob("*.npy")}
    for shard in shards:
        split, name = shard.removesuffix(".parquet").removeprefix("posttrain_sample/sft/").split("/")
        expected |= {f"{split}/.receipts/{name}.json", f"{split}/{name}.parquet",
                     f"{split}/.meta/{name}.samples.parquet"}
    assert entries(sft) == {f"posttrain_sample/sft/{name}": f"file://{out}/{name}" for name in expected}
    metadata = json.loads(sft.metadata)
    assert metadata["dagster_run_id"] and metadata["tokenizer_sha256"] == manifest["tokenizer_sha256"]
    assert {split: metadata["splits"][split]["files"] for split in manifest["splits"]} == {
        split: written["files"] for split, written in manifest["splits"].items()}


@pytest.fixture(scope="module")
def export_lineage(tmp_path_factory):
    """The JSONL sample materialized, then exported (the asset ``rl_sample/hf_export``), with lineage on (offline)."""
    from nemotron_assets_tests.defs.jsonl.jsonl_pipeline import SAMPLE, Pipeline

    def build(root, lineage):
        with quick_instance() as instance:
            pipeline = Pipeline(SAMPLE, root, instance, lineage=lineage)
            pipeline.all()
            pipeline.run(pipeline.assets.hf_export)

    return _build_with_lineage(tmp_path_factory.mktemp("export_lineage"), build)


def test_export_run_uses_what_it_exports_and_logs_the_folder(export_lineage):
    from nemotron_assets_tests.defs.jsonl.jsonl_pipeline import SAMPLE, Pipeline

    root, folder = export_lineage
    runs = offline_runs(folder)
    [manifest] = [a for a in runs["jsonl_manifest"][0] if not a.use_after_commit]
    used, logged = used_and_logged(runs["hf_export"][0])
    assert used == {"rl_sample-jsonl": manifest.digest}  # the artifact the jsonl_manifest run logged, same version
    [export] = logged.values()
    assert export.name == "rl_sample-hf" and export.type == "hf-export"
    out = root / "rl_sample" / "hf"
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and ".meta" not in p.parts}
    assert entries(export) == {name: f"file://{out}/{name}" for name in files}
    assert json.loads(export.metadata)["configs"]["jsonl_math_rl"] == {"train": 10, "validation": 4, "test": 3}
    with quick_instance() as instance:  # the lineage the UI draws
        assets = Pipeline(SAMPLE, root, instance).assets
    assert assets.hf_export.asset_deps[assets.hf_export.key] == {assets.jsonl_shard.key}
