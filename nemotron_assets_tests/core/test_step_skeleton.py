"""The step skeleton (nemotron_assets/core/step.py): a build commits its files then the receipt; an output an older
version wrote without a receipt is adopted when its bytes are exactly what a build would write; the reason a
rebuild gives (core/records.py) reads well."""

import json
import time

from nemotron_assets.core.records import read_receipt
from nemotron_assets.core.step import Output, ShardBuild, ShardRun, Staged, adopt, build_output
from nemotron_assets.core.storage import Storage

OUTPUT = Output("out/blend.receipt", {"setting": 1}, "megatron_blend", "blend")
CONTENTS = {"blend.json": b'{"train": []}\n', "data_path.txt": b"1.0 out/a\n"}


def write(staging):
    for name, data in CONTENTS.items():
        (staging / name).write_bytes(data)
    return Staged({name: staging / name for name in CONTENTS}, {"shards": 1})


def test_a_build_commits_the_files_and_then_the_receipt(tmp_path):
    store = Storage(str(tmp_path))
    outcome = build_output(store, OUTPUT, write, log=lambda line: None)
    assert outcome.status == "built"
    assert {name: (tmp_path / "out" / name).read_bytes() for name in CONTENTS} == CONTENTS
    assert json.loads((tmp_path / "out/.receipts/blend.receipt.json").read_text())["inputs"] == {"setting": 1}
    assert build_output(store, OUTPUT, write, log=lambda line: None).status == "up to date"


def test_files_written_before_receipts_existed_are_adopted_without_a_rewrite(tmp_path):
    store = Storage(str(tmp_path))
    (tmp_path / "out").mkdir()
    for name, data in CONTENTS.items():
        (tmp_path / "out" / name).write_bytes(data)
    stamps = {name: (tmp_path / "out" / name).stat().st_mtime_ns for name in CONTENTS}
    outcome = adopt(store, OUTPUT, CONTENTS, {"shards": 1})
    assert outcome is not None and outcome.status == "up to date"
    assert {name: (tmp_path / "out" / name).stat().st_mtime_ns for name in CONTENTS} == stamps
    assert read_receipt(store, OUTPUT.prefix).files["blend.json"]["bytes"] == len(CONTENTS["blend.json"])
    assert build_output(store, OUTPUT, write, log=lambda line: None).status == "up to date"


def test_different_bytes_or_an_existing_receipt_are_not_adopted(tmp_path):
    store = Storage(str(tmp_path))
    (tmp_path / "out").mkdir()
    (tmp_path / "out/blend.json").write_bytes(b'{"TRAIN": []}\n')  # same size, other bytes
    (tmp_path / "out/data_path.txt").write_bytes(CONTENTS["data_path.txt"])
    assert adopt(store, OUTPUT, CONTENTS, {}) is None
    assert not (tmp_path / "out/.receipts/blend.receipt.json").exists()
    build_output(store, OUTPUT, write, log=lambda line: None)
    assert adopt(store, OUTPUT, CONTENTS, {}) is None  # a receipt exists: the skeleton judges it


def test_a_rebuild_reason_shows_hashes_shortened_inside_balanced_quotes():
    from nemotron_assets.core.records import describe_changes

    built, now = {"source": "a10ede2ae0949f5c8d2e"}, {"source": "d144b59ece7a1e2f3a4b"}
    assert describe_changes(built, now) == 'source="a10ede2ae094…", now "d144b59ece7a…"'
    assert describe_changes({"dtype": "int32"}, {"dtype": "uint16"}) == 'dtype="int32", now "uint16"'


def test_a_run_forks_the_costliest_builds_first_and_commits_outputs_built_together(tmp_path):
    """Three builds in two forked processes: the two costliest start first, the cheapest when one of them is done;
    each build writes two outputs together, both committed with their receipts, and a second run finds all up to
    date (and rebuilds both when one is gone)."""
    store = Storage(str(tmp_path / "data"))
    started = tmp_path / "started"
    started.mkdir()

    def views(name: str, cost: int) -> ShardBuild:
        outputs = [Output(f"{name}/{view}", {"cost": cost}, "view", f"{name}/{view}") for view in ("a", "b")]

        def build(folder, report, cores):
            (started / name).write_text(str(time.monotonic()))
            time.sleep(0.5)
            staged = {}
            for output in outputs:
                (folder / output.key.replace("/", "_")).write_text(output.key)
                staged[output.prefix] = Staged({".txt": folder / output.key.replace("/", "_")}, {"rows": cost})
            return staged

        return ShardBuild(outputs[0], build, together=(outputs[1],), cost=cost)

    builds = {"small": views("small", 1), "large": views("large", 3), "middle": views("middle", 2)}
    with ShardRun(store, lambda line: None, processes=2, what="pools' views") as run:
        run.plan(builds)
        outcomes = {name: run.outcome(name) for name in builds}
    assert {name: outcome.status for name, outcome in outcomes.items()} == dict.fromkeys(builds, "built")
    start = {name: float((started / name).read_text()) for name in builds}
    assert start["small"] > max(start["large"], start["middle"])
    for name in builds:
        for view in ("a", "b"):
            assert (tmp_path / "data" / name / f"{view}.txt").read_text() == f"{name}/{view}"
            assert read_receipt(store, f"{name}/{view}").stats == {"rows": {"small": 1, "middle": 2, "large": 3}[name]}

    (tmp_path / "data" / "large" / ".receipts" / "b.json").unlink()
    with ShardRun(store, lambda line: None, processes=2) as run:
        run.plan(builds)
        again = {name: run.outcome(name).status for name in builds}
    assert again == {"small": "up to date", "large": "built", "middle": "up to date"}
    assert read_receipt(store, "large/b") is not None


def test_a_partition_outside_its_datasets_current_plan_gets_its_own_error_and_the_others_are_planned(tmp_path):
    """The one planning loop of the pretraining, Harmony and JSONL shard steps: a shard a re-plan no longer has, or
    a dataset never planned, is that partition's error, naming what to materialize."""
    from nemotron_assets.core.blend import Blend, DatasetEntry
    from nemotron_assets.core.partitions import Scope
    from nemotron_assets.core.records import NotReady, write_manifest
    from nemotron_assets.core.step import planned_shard_builds
    from nemotron_assets.defs.sources.manifest import build_manifest

    (tmp_path / "wiki.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    entry = DatasetEntry(name="wiki", path="wiki.jsonl", num_shards=2)
    blend = Blend(name="b", datasets=[entry])
    store = Storage(str(tmp_path / "data"))
    write_manifest(store, "b", build_manifest(blend, entry, tmp_path))
    manifests = {}
    builds = planned_shard_builds(store, "b", Scope("b"), ["wiki/shard_00001", "wiki/shard_00002", "code/shard_00000"],
                                  manifests, lambda manifest, key, base: (manifest.dataset, key.index, base))
    assert builds["wiki/shard_00001"] == ("wiki", 1, "b") and list(manifests) == ["wiki"]
    assert isinstance(builds["wiki/shard_00002"], NotReady)
    assert str(builds["wiki/shard_00002"]) == ("the current plan of 'wiki' has only 2 shard(s); re-materialize "
                                               "b/source_split")
    assert isinstance(builds["code/shard_00000"], NotReady) and "materialize b/source_split partition 'code'" in str(
        builds["code/shard_00000"])


def test_builds_that_spread_over_the_cores_run_one_after_another_each_on_every_core(tmp_path, monkeypatch):
    """Builds that spread their own work over the cores they get (large Harmony shards) are not forked: each runs in
    the step, on every core, in partition order. One build that does not spread, or a number of build processes the
    run config names, brings back one process per build."""
    import os

    from nemotron_assets.core import step, workers

    monkeypatch.setattr(step, "usable_cores", lambda: 2)
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    store = Storage(str(tmp_path / "data"))

    def shard(name: str, spreads: bool) -> ShardBuild:
        def build(folder, report, cores):
            (folder / "shard.txt").write_text(f"{os.getpid()} {cores}")
            return Staged({".txt": folder / "shard.txt"}, {})
        return ShardBuild(Output(f"{name}/shard", {}, "shard", name), build, spreads=spreads)

    def run(builds: dict[str, ShardBuild], processes: int = 0) -> tuple[list[str], dict[str, tuple[int, int]]]:
        lines: list[str] = []
        with ShardRun(store, lines.append, processes=processes, force=True) as shard_run:
            shard_run.plan(builds)
            for name in builds:
                assert shard_run.outcome(name).status == "built"
        ran = {name: tuple(map(int, (tmp_path / "data" / name / "shard.txt").read_text().split())) for name in builds}
        return lines, ran

    lines, ran = run({name: shard(name, True) for name in ("a", "b", "c")})
    assert "building 3 shard(s) one after another, each on 2 cores" in lines
    assert ran == dict.fromkeys("abc", (os.getpid(), 2))

    for builds, processes in (({"a": shard("a", True), "b": shard("b", False)}, 0),
                              ({"a": shard("a", True), "b": shard("b", True)}, 2)):
        lines, ran = run(builds, processes)
        assert "building 2 shard(s) in 2 processes, 1 core(s) each" in lines
        assert all(pid != os.getpid() and cores == 1 for pid, cores in ran.values())
