"""Which shards a run may build in forked processes, and how many processes it asks for."""

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import SourceManifest
from nemotron_assets.core.workers import fork_available
from nemotron_assets.defs.pretrain.shard_processes import MAX_BUILD_PROCESSES, ShardTarget, build_processes, forkable
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.plan import FileRange, ShardPlan


def _target(urls: list[str], shard_files: list[int]) -> ShardTarget:
    files = [SourceFile(url=url, size=10, format="jsonl", compression=None, rows=5) for url in urls]
    shards = [ShardPlan(0, tuple(FileRange(i, 0, 5) for i in shard_files))]
    manifest = SourceManifest(blend="b", dataset="web", split="train", path="p", revision=None, text_field="text",
                              files=files, shards=shards)
    return ShardTarget("web/shard_00000", manifest, ShardKey("web", 0), "b")


def test_a_shard_is_forked_only_when_every_file_it_reads_is_local():
    assert forkable(_target(["/data/a.jsonl", "/data/b.jsonl"], [0, 1]))
    assert not forkable(_target(["/data/a.jsonl", "s3://raw/b.jsonl"], [0, 1]))  # a copied S3 client: in the step
    assert forkable(_target(["/data/a.jsonl", "s3://raw/b.jsonl"], [0]))  # another shard reads the S3 file


def test_processes_asked_for_are_bounded_and_zero_means_every_core():
    if not fork_available():
        assert build_processes(4) == 1
        return
    assert build_processes(1) == 1
    assert build_processes(3) == 3
    assert build_processes(100) == MAX_BUILD_PROCESSES
    assert 1 <= build_processes(0) <= MAX_BUILD_PROCESSES
