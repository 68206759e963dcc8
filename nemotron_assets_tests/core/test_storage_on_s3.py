"""S3 end to end against moto's standalone server (a real HTTP endpoint, separate process): the storage
layer's atomic commits, s3:// sources, and the whole pretraining graph written to s3:// and read back."""

import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import dagster as dg
import pytest
import s3fs

from nemotron_assets.core.blend import DatasetEntry
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.discovery import resolve_files
from nemotron_assets.sources.readers import ReadOptions, ReadStats, count_rows_and_hash, iter_text_batches
from nemotron_assets_tests.conftest import REPO, quick_instance
from nemotron_assets_tests.materialize_helpers import pipeline_for, run_asset, shard_keys
from nemotron_assets_tests.s3_server import apply_environment, make_bucket, moto_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        make_bucket(url, "data")
        make_bucket(url, "raw")
        yield url


@pytest.fixture
def s3_env(endpoint, monkeypatch):
    apply_environment(monkeypatch, endpoint)
    return endpoint


def _fs(endpoint: str) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)


def test_storage_commits_reads_lists_and_deletes_on_s3(s3_env, tmp_path):
    store = Storage("s3://data/unit", endpoint_url=s3_env)
    with store.staging() as folder:
        staged = folder / "x.bin"
        staged.write_bytes(b"\x01\x02")
        store.commit(staged, "a/x.bin")
    store.write_bytes("a/y.json", b"{}")
    assert store.exists("a/x.bin") and store.read_bytes("a/x.bin") == b"\x01\x02"
    assert store.size("a/x.bin") == 2
    assert store.list("a") == ["a/x.bin", "a/y.json"]
    store.delete("a/x.bin")
    assert not store.exists("a/x.bin")
    with pytest.raises(ValueError):
        store.url("../escape")


def test_s3_sources_resolve_with_etags_and_read_in_order(s3_env):
    fs = _fs(s3_env)
    lines = [json.dumps({"text": f"document {i}"}) for i in range(50)]
    fs.pipe("raw/corpus/b.jsonl.gz", gzip.compress("\n".join(lines[25:]).encode() + b"\n"))
    fs.pipe("raw/corpus/a.jsonl", ("\n".join(lines[:25]) + "\n").encode())
    fs.pipe("raw/corpus/notes.txt", b"not data")
    entry = DatasetEntry(name="corpus", path="s3://raw/corpus")
    files = resolve_files(entry, base_dir=REPO).files
    assert [f.url for f in files] == ["s3://raw/corpus/a.jsonl", "s3://raw/corpus/b.jsonl.gz"]
    assert all(f.fingerprint.startswith("etag:") and len(f.fingerprint) > 10 for f in files)
    options = ReadOptions(dataset="corpus", storage_options={"client_kwargs": {"endpoint_url": s3_env}})
    texts = []
    for source in files:
        rows, _ = count_rows_and_hash(source, options)
        texts += [t for batch in iter_text_batches(source, 0, rows, options, ReadStats()) for t in batch]
    assert texts == [f"document {i}" for i in range(50)]
    globbed = resolve_files(DatasetEntry(name="c", path="s3://raw/corpus/*.gz"), base_dir=REPO).files
    assert [f.url for f in globbed] == ["s3://raw/corpus/b.jsonl.gz"]


def test_pretraining_graph_writes_to_s3_what_it_writes_locally(s3_env, tmp_path):
    outputs = {}
    for root in ("s3://data/run", str(tmp_path / "local")):
        with quick_instance() as instance:
            _, pipeline = pipeline_for(REPO / "blends" / "sample.yaml")
            resources_root = root
            run_asset(pipeline, pipeline.source_split, resources_root, instance,
                      pipeline.dataset_partitions.get_partition_keys(), s3_endpoint=s3_env)
            run_asset(pipeline, pipeline.pretrain_shard, resources_root, instance,
                      shard_keys(pipeline, instance), s3_endpoint=s3_env)
            run_asset(pipeline, pipeline.megatron_blend, resources_root, instance, s3_endpoint=s3_env)
        store = Storage(root, endpoint_url=s3_env)
        names = [f"sample/pretrain/{d}/shard_00000{ext}" for d in ("wiki", "code", "wiki_valid")
                 for ext in (".bin", ".idx")] + ["sample/pretrain/blend.json", "sample/pretrain/data_path.txt"]
        # blend.json and data_path.txt name the shards by their absolute location: s3:// URLs on S3
        outputs[root.startswith("s3://")] = {n: store.read_bytes(n).replace(root.encode(), b"<root>") for n in names}
        if root.startswith("s3://"):
            blend_json = json.loads(store.read_bytes("sample/pretrain/blend.json"))
            assert blend_json["valid"][1] == "s3://data/run/sample/pretrain/wiki_valid/shard_00000"
    assert outputs[True] == outputs[False]
    leftovers = [p for p in _fs(s3_env).find("data/run") if "staging" in p]
    assert leftovers == []


def test_post_training_path_on_s3_writes_the_same_bytes_as_on_local_disk(s3_env, tmp_path):
    """Every asset of the post-training sample (Harmony shards, dedup, pools, views, report, then the packed SFT
    steps, whose samples files the plan and the packer read back as Arrow IPC over s3fs), once to s3:// and once to
    local disk: same files, same bytes (receipts differ only in their storage stamps: ETag on S3, mtime locally)."""
    from nemotron_assets_tests.defs.harmony.harmony_pipeline import SAMPLE, Pipeline
    from nemotron_assets_tests.defs.sft.sft_pipeline import SftPipeline

    for root, endpoint in (("s3://data/post", s3_env), (tmp_path / "local", None)):
        with quick_instance() as instance:
            Pipeline(SAMPLE, root, instance, endpoint_url=endpoint).all()
            SftPipeline(root, instance, endpoint_url=endpoint).packed_sft()

    fs = _fs(s3_env)
    remote = {path.removeprefix("data/post/"): fs.cat_file(path) for path in fs.find("data/post")}
    local = {str(p.relative_to(tmp_path / "local")): p.read_bytes()
             for p in (tmp_path / "local").rglob("*") if p.is_file()}
    assert sorted(remote) == sorted(local)
    assert any(name.startswith("posttrain_sample/pools/tool_use/") for name in remote)
    assert any(name.startswith("posttrain_sample/sft/") and name.endswith(".arrow") for name in remote)
    assert any(name == "posttrain_sample/sft/manifest.json" for name in remote)
    assert not any("staging" in name for name in remote)
    _assert_same_files(local, remote)


def _assert_same_files(local: dict[str, bytes], remote: dict[str, bytes]) -> None:
    """Each local file's bytes equal the S3 copy's; a receipt's, apart from its storage stamps (ETag on S3, mtime
    locally), whose files must be the same."""
    for name, data in local.items():
        if _is_receipt(data):
            mine, theirs = json.loads(data), json.loads(remote[name])
            assert mine.pop("committed").keys() == theirs.pop("committed").keys(), name
            assert mine == theirs, name
        else:
            assert data == remote[name], name


def _is_receipt(data: bytes) -> bool:
    return data.startswith(b"{") and b'"receipt_version"' in data


def test_copy_from_places_a_stored_file_as_it_is_hard_link_server_side_or_bytes(s3_env, tmp_path, monkeypatch):
    from nemotron_assets.core.storage import StoredFile

    local, elsewhere = Storage(str(tmp_path / "data")), Storage(str(tmp_path / "export"))
    local.write_bytes("pools/p/part-00000.parquet", b"PAR1 rows PAR1")
    elsewhere.copy_from(StoredFile(local, "pools/p/part-00000.parquet"), "pools/p/part-00000.parquet")
    linked = tmp_path / "export" / "pools" / "p" / "part-00000.parquet"
    assert linked.stat().st_ino == (tmp_path / "data" / "pools" / "p" / "part-00000.parquet").stat().st_ino
    assert not list((tmp_path / "export" / ".staging").iterdir())

    source, target = Storage("s3://data/copy", endpoint_url=s3_env), Storage("s3://raw/export", endpoint_url=s3_env)
    target.copy_from(StoredFile(local, "pools/p/part-00000.parquet"), "up.parquet")  # local -> S3: one upload
    source.write_bytes("a.parquet", b"\x00" * 1000)

    def no_bytes_through_this_process(*args, **kwargs):
        raise AssertionError("a copy between two S3 places must not read the object here")

    with monkeypatch.context() as patched:
        for name in ("cat_file", "open", "get_file", "put_file"):
            patched.setattr(source.fs, name, no_bytes_through_this_process)
        target.copy_from(StoredFile(source, "a.parquet"), "b/a.parquet")  # S3 -> S3: server-side
    assert target.read_bytes("b/a.parquet") == b"\x00" * 1000 and target.read_bytes("up.parquet") == b"PAR1 rows PAR1"
    elsewhere.copy_from(StoredFile(source, "a.parquet"), "from_s3.parquet")  # S3 -> local: bytes
    assert (tmp_path / "export" / "from_s3.parquet").read_bytes() == b"\x00" * 1000


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs a second local file system (/dev/shm)")
def test_copy_from_another_local_file_system_copies_the_bytes(tmp_path):
    from nemotron_assets.core.storage import StoredFile

    other = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        if os.stat(other).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same file system here")
        source, target = Storage(str(tmp_path)), Storage(str(other))
        source.write_bytes("a.parquet", b"PAR1 rows PAR1")
        target.copy_from(StoredFile(source, "a.parquet"), "pools/a.parquet")
        assert (other / "pools" / "a.parquet").read_bytes() == b"PAR1 rows PAR1"
        assert (other / "pools" / "a.parquet").stat().st_ino != (tmp_path / "a.parquet").stat().st_ino
    finally:
        shutil.rmtree(other)


def test_the_rl_sample_on_s3_exports_by_server_side_copies_and_loads_from_a_local_export(s3_env, tmp_path):
    import datasets
    import yaml

    from nemotron_assets_tests.defs.jsonl.jsonl_pipeline import SAMPLE, Pipeline

    with quick_instance() as instance:
        pipeline = Pipeline(SAMPLE, "s3://data/exported", instance)
        pipeline.resources["storage"] = pipeline.resources["storage"].model_copy(update={"endpoint_url": s3_env})
        pipeline.all()
        pipeline.run(pipeline.assets.hf_export)  # the default folder: s3://data/exported/rl_sample/hf
        local = tmp_path / "hf"
        dg.materialize(pipeline.definitions, selection=[pipeline.assets.hf_export.key], instance=instance,
                       resources=pipeline.resources,
                       run_config={"ops": {"rl_sample__hf_export": {"config": {"hf_dir": str(local)}}}})
    fs = _fs(s3_env)
    on_s3 = "data/exported/rl_sample/hf"
    listed = sorted(p.removeprefix(on_s3 + "/") for p in fs.find(on_s3) if "/." not in p)
    assert listed == sorted(str(p.relative_to(local)) for p in local.rglob("*")
                            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(local).parts))
    for name in listed:  # the same bytes as the committed file, on S3 and downloaded
        source = f"data/exported/rl_sample/{name}"
        committed = (local / name).read_bytes() if name == "README.md" else fs.cat_file(source)
        assert fs.cat_file(f"{on_s3}/{name}") == committed == (local / name).read_bytes()
    header = yaml.safe_load((local / "README.md").read_text().split("---\n")[1])
    rows = datasets.load_dataset(str(local), "jsonl_math_rl", cache_dir=str(tmp_path / "cache"))
    assert {split: len(r) for split, r in rows.items()} == {"train": 10, "validation": 4, "test": 3}
    assert header["configs"][0]["config_name"] == "jsonl_math_rl"
