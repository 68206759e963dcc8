"""The per-blend sensor and nightly schedule, evaluated as the daemon would (``evaluate_tick``) against a
real instance, with the sample blend's data copied to a temp folder that the tests change."""

import json
import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nemotron_assets.definitions import build_definitions
from nemotron_assets_tests.materialize_helpers import pipeline_for, run_asset, shard_keys
from nemotron_assets_tests.s3_server import apply_environment, make_bucket, moto_server

SENSOR = "sample__new_source_files"
SCHEDULE = "sample__nightly_missing_shards"
DATASETS = ["wiki", "reference", "code", "wiki_valid", "reference_test"]


@pytest.fixture
def instance():
    """A sqlite instance, events included: a schedule's context opens the instance again from its reference, which
    would find an empty event log (no dynamic partitions, no materializations) in a second in-memory one."""
    with dg.instance_for_test() as test_instance:
        yield test_instance


def _edit_blend(path: Path, **settings) -> None:
    blend = yaml.safe_load(path.read_text())
    blend.update(settings)
    path.write_text(yaml.safe_dump(blend))


def _definitions(blends: Path, tmp_path: Path) -> dg.Definitions:
    return build_definitions(blends_dir=blends, data_root=str(tmp_path / "data"))


def _sense(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None,
           name: str = SENSOR) -> tuple[list[str], str]:
    """(requested partitions, new cursor) of one sensor tick."""
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                 resources=defs.resources) as context:
        result = defs.get_repository_def().get_sensor_def(name).evaluate_tick(context)
    for request in result.run_requests:
        assert request.asset_selection == [dg.AssetKey([name.split("__")[0], "source_split"])]
    return [r.partition_key for r in result.run_requests], result.cursor


def _scheduled_ranges(defs: dg.Definitions, instance: dg.DagsterInstance, name: str = SCHEDULE) -> list[tuple]:
    """(first, last) partition of each run one schedule tick requests."""
    repository = defs.get_repository_def()
    # closed right away: an open context keeps the instance its resources were built with entered
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        result = repository.get_schedule_def(name).evaluate_tick(context)
    ranges = []
    for request in result.run_requests:
        assert request.asset_selection == [dg.AssetKey([name.split("__")[0], "pretrain_shard"])]
        ranges.append((request.tags["dagster/asset_partition_range_start"],
                       request.tags["dagster/asset_partition_range_end"]))
    return ranges


def test_sensor_requests_every_dataset_then_nothing_then_only_the_dataset_with_a_new_file(
        sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    requested, cursor = _sense(defs, instance, None)
    assert requested == DATASETS
    assert set(json.loads(cursor)) == set(DATASETS)
    requested, cursor = _sense(defs, instance, cursor)
    assert requested == []
    shutil.copy(sample_blends / "sample_data" / "wiki" / "part-00000.jsonl",
                sample_blends / "sample_data" / "wiki" / "part-00002.jsonl")
    requested, cursor = _sense(defs, instance, cursor)
    assert requested == ["wiki"]
    assert _sense(defs, instance, cursor)[0] == []


def test_sensor_notices_a_file_rewritten_in_place(sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    _, cursor = _sense(defs, instance, None)
    test_file = sample_blends / "sample_data" / "test.jsonl"
    test_file.write_text(test_file.read_text() + '{"text": "one more document"}\n')
    assert _sense(defs, instance, cursor)[0] == ["reference_test"]


def test_turning_the_sensor_on_requests_nothing_while_every_file_matches_its_plan_and_hashes_no_file(
        sample_blends, tmp_path, instance, monkeypatch):
    from nemotron_assets.sources import readers

    defs = _definitions(sample_blends, tmp_path)
    _, sample = pipeline_for(sample_blends / "sample.yaml")
    run_asset(sample, sample.source_split, str(tmp_path / "data"), instance, DATASETS)  # plans + stamps.json
    hashed = []  # every content hash of a source file starts with content_digest()
    content_digest = readers.content_digest
    monkeypatch.setattr(readers, "content_digest", lambda: hashed.append(1) or content_digest())
    stale = json.dumps({name: "0123456789abcdef" for name in DATASETS})  # listings of files long gone
    for cursor in (None, "", "not json {", '["an", "older", "format"]', stale):
        assert _sense(defs, instance, cursor)[0] == [], cursor
    assert hashed == []

    # Same size, another modification time: not provably the file measured, so re-planned; the sensor reads
    # nothing, the re-plan hashes that one file.
    test_file = sample_blends / "sample_data" / "test.jsonl"
    stat = test_file.stat()
    os.utime(test_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    requested, cursor = _sense(defs, instance, stale)
    assert requested == ["reference_test"] and hashed == []
    run_asset(sample, sample.source_split, str(tmp_path / "data"), instance, ["reference_test"])
    assert len(hashed) == 1
    assert _sense(defs, instance, None)[0] == []


def test_sensor_skips_hf_sources_and_keeps_the_last_listing_of_a_vanished_folder(tmp_path, instance):
    blends = tmp_path / "blends"
    (blends / "local").mkdir(parents=True)
    (blends / "local" / "a.jsonl").write_text('{"text": "a"}\n')
    (blends / "mixed.yaml").write_text("datasets:\n  - {name: hub, path: hf://org/repo}\n"
                                       "  - {name: local, path: local}\n")
    defs = _definitions(blends, tmp_path)
    requested, cursor = _sense(defs, instance, None, "mixed__new_source_files")
    assert requested == ["local"] and set(json.loads(cursor)) == {"local"}
    shutil.rmtree(blends / "local")
    assert _sense(defs, instance, cursor, "mixed__new_source_files") == ([], cursor)


@pytest.mark.slow
def test_sensor_watches_an_s3_prefix(tmp_path, instance, monkeypatch):
    import s3fs

    with moto_server() as endpoint:
        make_bucket(endpoint, "raw")
        apply_environment(monkeypatch, endpoint)
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
        fs.pipe("raw/web/part-0.jsonl", b'{"text": "a"}\n')
        blends = tmp_path / "blends"
        blends.mkdir()
        (blends / "remote.yaml").write_text("datasets:\n  - {name: web, path: 's3://raw/web/'}\n")
        defs = _definitions(blends, tmp_path)
        requested, cursor = _sense(defs, instance, None, "remote__new_source_files")
        assert requested == ["web"]
        assert _sense(defs, instance, cursor, "remote__new_source_files")[0] == []
        fs.pipe("raw/web/part-1.jsonl", b'{"text": "b"}\n')
        assert _sense(defs, instance, cursor, "remote__new_source_files")[0] == ["web"]


def test_schedule_requests_only_missing_failed_or_stale_shards(sample_blends, tmp_path, instance):
    (sample_blends / "broken.jsonl").write_text('{"text": "ok"}\n{"text": "cut off\n')
    (sample_blends / "broken.yaml").write_text("datasets:\n  - {name: fine, path: sample_data/test.jsonl}\n"
                                               "  - {name: bad, path: broken.jsonl}\n")
    defs = _definitions(sample_blends, tmp_path)
    root = str(tmp_path / "data")
    _, sample = pipeline_for(sample_blends / "sample.yaml")
    run_asset(sample, sample.source_split, root, instance, DATASETS)
    assert _scheduled_ranges(defs, instance) == [("wiki/shard_00000", "reference_test/shard_00000")]

    run_asset(sample, sample.pretrain_shard, root, instance, ["wiki/shard_00001"])
    run_asset(sample, sample.pretrain_shard, root, instance, ["code/shard_00000"])
    assert _scheduled_ranges(defs, instance) == [("wiki/shard_00000", "wiki/shard_00000"),
                                                 ("wiki/shard_00002", "reference/shard_00000"),
                                                 ("wiki_valid/shard_00000", "reference_test/shard_00000")]
    run_asset(sample, sample.source_split, root, instance, ["code"])  # re-planned from the same file: still done
    assert _scheduled_ranges(defs, instance) == [("wiki/shard_00000", "wiki/shard_00000"),
                                                 ("wiki/shard_00002", "reference/shard_00000"),
                                                 ("wiki_valid/shard_00000", "reference_test/shard_00000")]
    _edit_blend(sample_blends / "sample.yaml", add_eos=False)  # every shard built so far is stale now
    defs = _definitions(sample_blends, tmp_path)
    assert _scheduled_ranges(defs, instance) == [("wiki/shard_00000", "reference_test/shard_00000")]
    _edit_blend(sample_blends / "sample.yaml", add_eos=True)
    defs = _definitions(sample_blends, tmp_path)

    _, broken = pipeline_for(sample_blends / "broken.yaml")
    run_asset(broken, broken.source_split, root, instance, ["fine", "bad"])
    run_asset(broken, broken.pretrain_shard, root, instance, ["fine/shard_00000"])
    run_asset(broken, broken.pretrain_shard, root, instance, ["bad/shard_00000"], raise_on_error=False)
    assert _scheduled_ranges(defs, instance, "broken__nightly_missing_shards") == [
        ("bad/shard_00000", "bad/shard_00000")]


def test_schedule_batches_runs_of_at_most_16_partitions_and_skips_when_all_are_built(
        sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    repository = defs.get_repository_def()
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        assert repository.get_schedule_def(SCHEDULE).evaluate_tick(context).skip_message.startswith("all 0 shard")
    keys = [f"wiki/shard_{i:05d}" for i in range(40)]
    instance.add_dynamic_partitions("sample__pretrain_shards", keys)
    assert _scheduled_ranges(defs, instance) == [(keys[0], keys[15]), (keys[16], keys[31]), (keys[32], keys[39])]


def test_every_blend_gets_a_sensor_and_a_stopped_nightly_schedule(sample_blends, tmp_path):
    repository = _definitions(sample_blends, tmp_path).get_repository_def()
    schedule = repository.get_schedule_def(SCHEDULE)
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert repository.get_sensor_def(SENSOR).default_status == dg.DefaultSensorStatus.STOPPED


POSTTRAIN_SCHEDULE = "posttrain_sample__nightly_missing_harmony_shards"
POSTTRAIN_SENSOR = "posttrain_sample__post_training_automation"


def _harmony_pipeline(blends: Path, root: Path, instance: dg.DagsterInstance):
    from nemotron_assets_tests.defs.harmony.harmony_pipeline import Pipeline

    return Pipeline(blends / "posttrain_sample.yaml", root, instance)


def test_harmony_schedule_requests_unbuilt_harmony_shards_then_skips(sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    pipeline = _harmony_pipeline(sample_blends, tmp_path / "data", instance)
    pipeline.run(pipeline.source_split, [e.name for e in pipeline.blend.entries()])
    keys = pipeline.shard_keys()
    repository = defs.get_repository_def()
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        result = repository.get_schedule_def(POSTTRAIN_SCHEDULE).evaluate_tick(context)
    assert [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
            for r in result.run_requests] == [(keys[0], keys[-1])]
    assert result.run_requests[0].asset_selection == [dg.AssetKey(["posttrain_sample", "harmony_shard"])]

    pipeline.run(pipeline.assets.harmony_shard, keys)
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        result = repository.get_schedule_def(POSTTRAIN_SCHEDULE).evaluate_tick(context)
    assert result.skip_message.startswith(f"all {len(keys)} shard")


def _post_training_tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None):
    """One tick of the post-training sensor: (its requests, (asset, first, last) each, the result)."""
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs) as context:
        result = defs.get_repository_def().get_sensor_def(POSTTRAIN_SENSOR).evaluate_tick(context)
    return [(r.asset_selection[0].path[-1], r.tags.get("dagster/asset_partition_range_start"),
             r.tags.get("dagster/asset_partition_range_end")) for r in result.run_requests], result


def test_post_training_automation_requests_only_what_follows_the_rebuilt_shards_dataset_each_once(
        sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    repository = defs.get_repository_def()
    assert repository.get_sensor_def(POSTTRAIN_SENSOR).default_status == dg.DefaultSensorStatus.STOPPED
    assert repository.get_schedule_def(POSTTRAIN_SCHEDULE).default_status == dg.DefaultScheduleStatus.STOPPED
    with pytest.raises(dg.DagsterInvariantViolationError):  # a blend without Harmony datasets has none
        repository.get_sensor_def("sample__post_training_automation")
    assert all(asset.automation_condition is None for asset in repository.asset_graph.asset_nodes)

    pipeline = _harmony_pipeline(sample_blends, tmp_path / "data", instance)
    families = pipeline.assets.harmony_dedup.partitions_def.get_partition_keys()
    pipeline.run(pipeline.source_split, families)
    math = [key for key in pipeline.shard_keys() if key.startswith("nemotron_math_v2/")]
    pipeline.run(pipeline.assets.harmony_shard, math)
    # Turned on: it starts from the latest event, whatever was built before.
    requests, result = _post_training_tick(defs, instance, None)
    assert requests == [] and result.skip_message.startswith("following the materializations after event")
    # As if the packed shards had been planned before (sft_plan registers them).
    instance.add_dynamic_partitions("posttrain_sample__sft_shards", ["train/shard_00000", "valid/shard_00000",
                                                                     "test/shard_00000"])

    pipeline.run(pipeline.assets.harmony_shard, math)  # one dataset's shard rebuilt
    requests, result = _post_training_tick(defs, instance, result.cursor)
    assert requests == [("harmony_dedup", "nemotron_math_v2", "nemotron_math_v2"),
                        ("sft_samples", math[0], math[-1])]
    for request in result.run_requests:  # run as the daemon would: their events are not new input changes
        dg.materialize(pipeline.definitions, selection=request.asset_selection, instance=instance,
                       tags=request.tags, resources={"storage": pipeline.storage, "lineage": pipeline.lineage})
    stages = []
    while True:  # the later stages, not run (they read every dataset): the sensor goes on once nothing runs
        requests, result = _post_training_tick(defs, instance, result.cursor)
        if not requests:
            break
        stages.append(requests)
    pools = pipeline.assets.candidate_pool.partitions_def.get_partition_keys()
    # sft_plan reads no pool (the sample's sft.from is all): it does not wait for the pools.
    assert stages == [[("candidate_pool", pools[0], pools[-1]), ("sft_plan", None, None)],
                      [("embedding_view", pools[0], pools[-1]),
                       ("sft_packed", "train/shard_00000", "test/shard_00000")],
                      [("behavior_report", None, None), ("sft_manifest", None, None)]]
    assert result.skip_message == "nothing of posttrain_sample was rebuilt since the last request"


def test_post_training_automation_waits_for_running_runs_and_drops_what_follows_a_failed_one(
        sample_blends, tmp_path, instance):
    from nemotron_assets.core.automation import AUTOMATION_STAGE_TAG, AUTOMATION_TAG

    defs = _definitions(sample_blends, tmp_path)
    shard, dedup = (dg.AssetKey(["posttrain_sample", name]) for name in ("harmony_shard", "harmony_dedup"))
    instance.add_dynamic_partitions("posttrain_sample__harmony_shards", ["text/shard_00000"])
    _, result = _post_training_tick(defs, instance, "a cursor of another sensor")  # starts from now too
    instance.report_runless_asset_event(dg.AssetMaterialization(shard, partition="text/shard_00000"))
    job = defs.get_repository_def().get_implicit_job_def_for_assets([dedup])
    building = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, asset_selection=frozenset([shard]))
    requests, result = _post_training_tick(defs, instance, result.cursor)
    assert requests == [] and result.skip_message == "waiting for 1 run(s) of posttrain_sample to end"
    instance.report_run_failed(building)
    requests, result = _post_training_tick(defs, instance, result.cursor)
    assert requests == [("harmony_dedup", "text", "text"), ("sft_samples", "text/shard_00000", "text/shard_00000")]
    tags = result.run_requests[0].tags
    assert tags[AUTOMATION_TAG] == POSTTRAIN_SENSOR
    failed = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, asset_selection=frozenset([dedup]),
                                         tags=tags)
    instance.report_run_failed(failed)
    requests, result = _post_training_tick(defs, instance, result.cursor)
    assert requests == []  # everything after harmony_dedup reads it: pools, views, report, SFT plan and on
    assert json.loads(result.cursor)["pending"] == {} and tags[AUTOMATION_STAGE_TAG]


def test_jsonl_schedule_requests_unbuilt_jsonl_shards_then_skips(sample_blends, tmp_path, instance):
    from nemotron_assets_tests.defs.jsonl.jsonl_pipeline import Pipeline

    defs = _definitions(sample_blends, tmp_path)
    repository = defs.get_repository_def()
    schedule = repository.get_schedule_def("rl_sample__nightly_missing_jsonl_shards")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    with pytest.raises(dg.DagsterInvariantViolationError):  # a blend of JSONL data only has no Megatron shards
        repository.get_schedule_def("rl_sample__nightly_missing_shards")
    pipeline = Pipeline(sample_blends / "rl_sample.yaml", tmp_path / "data", instance)
    pipeline.plan()
    keys = pipeline.shard_keys()
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        result = schedule.evaluate_tick(context)
    assert [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
            for r in result.run_requests] == [(keys[0], keys[-1])]
    assert result.run_requests[0].asset_selection == [dg.AssetKey(["rl_sample", "jsonl_shard"])]

    pipeline.shards()
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        result = schedule.evaluate_tick(context)
    assert result.skip_message.startswith(f"all {len(keys)} shard")


BUILD_SENSOR = "sample__build"


def _build_tick(defs: dg.Definitions, instance: dg.DagsterInstance, name: str = BUILD_SENSOR):
    """One tick of a blend's build sensor: (its requests as (asset, first, last, run key), its skip message)."""
    with dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        result = defs.get_repository_def().get_sensor_def(name).evaluate_tick(context)
    requests = [(request.asset_selection[0].path[-1], request.tags.get("dagster/asset_partition_range_start"),
                 request.tags.get("dagster/asset_partition_range_end"), request.run_key)
                for request in result.run_requests]
    return requests, result.skip_message


def _run_requested(pipeline, root: str, instance: dg.DagsterInstance, requests: list[tuple],
                   raise_on_error: bool = True) -> list[str]:
    """Each requested run as the daemon would launch it (the asset and the range tags); the runs' log lines."""
    lines = []
    for asset, first, last, _ in requests:
        keys = None
        if first is not None:
            order = (instance.get_dynamic_partitions(pipeline[asset].partitions_def.name) if asset != "source_split"
                     else pipeline[asset].partitions_def.get_partition_keys())
            keys = order[order.index(first):order.index(last) + 1]
        result = run_asset(pipeline, pipeline[asset], root, instance, keys, raise_on_error=raise_on_error)
        lines += [entry.user_message for entry in instance.all_logs(result.run_id)]
    return lines


def test_build_sensor_requests_splits_then_shard_ranges_then_the_blend_files_then_nothing(
        sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    sensor = defs.get_repository_def().get_sensor_def(BUILD_SENSOR)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert sensor.minimum_interval_seconds <= 10
    root = str(tmp_path / "data")
    _, sample = pipeline_for(sample_blends / "sample.yaml")

    requests, _ = _build_tick(defs, instance)
    assert [r[:3] for r in requests] == [("source_split", "wiki", "reference_test")]
    _run_requested(sample, root, instance, requests)
    requests, _ = _build_tick(defs, instance)
    assert [r[:3] for r in requests] == [("pretrain_shard", "wiki/shard_00000", "reference_test/shard_00000")]
    lines = _run_requested(sample, root, instance, requests)
    assert any(re.search(r"building 7 shard\(s\) in 2 processes", line) for line in lines), lines
    requests, _ = _build_tick(defs, instance)
    assert [r[:3] for r in requests] == [("megatron_blend", None, None)]
    _run_requested(sample, root, instance, requests)
    requests, skipped = _build_tick(defs, instance)
    assert requests == [] and "is up to date" in skipped

    # A new file in one dataset: that dataset is split again, then only its shards are built, then the blend.
    shutil.copy(sample_blends / "sample_data" / "wiki" / "part-00000.jsonl",
                sample_blends / "sample_data" / "wiki" / "part-00002.jsonl")
    requests, _ = _build_tick(defs, instance)
    assert [r[:3] for r in requests] == [("source_split", "wiki", "wiki")]
    _run_requested(sample, root, instance, requests)
    requests, _ = _build_tick(defs, instance)
    wiki = [key for key in shard_keys(sample, instance) if key.startswith("wiki/")]
    assert [r[:3] for r in requests] == [("pretrain_shard", wiki[0], wiki[-1])]

    # A changed setting that plans other shards from the same files: split again.
    _run_requested(sample, root, instance, requests)
    _edit_blend(sample_blends / "sample.yaml", shard_size="1KB")
    defs = _definitions(sample_blends, tmp_path)
    requests, _ = _build_tick(defs, instance)
    assert requests[0][0] == "source_split"


def test_build_sensor_waits_for_the_blends_runs_and_asks_for_a_failed_run_once(sample_blends, tmp_path, instance):
    (sample_blends / "broken.jsonl").write_text('{"text": "ok"}\n{"text": "cut off\n')
    (sample_blends / "broken.yaml").write_text("datasets:\n  - {name: fine, path: sample_data/test.jsonl}\n"
                                               "  - {name: bad, path: broken.jsonl}\n")
    defs = _definitions(sample_blends, tmp_path)
    root = str(tmp_path / "data")
    _, broken = pipeline_for(sample_blends / "broken.yaml")
    run_asset(broken, broken.source_split, root, instance, ["fine", "bad"])
    requests, _ = _build_tick(defs, instance, "broken__build")
    assert [r[:3] for r in requests] == [("pretrain_shard", "fine/shard_00000", "bad/shard_00000")]
    _run_requested(broken, root, instance, requests, raise_on_error=False)
    again, _ = _build_tick(defs, instance, "broken__build")
    assert [r[:3] for r in again] == [("pretrain_shard", "bad/shard_00000", "bad/shard_00000")]
    _run_requested(broken, root, instance, again, raise_on_error=False)
    # Nothing that decides the outcome changed since: the same run key, which the daemon does not launch twice.
    assert _build_tick(defs, instance, "broken__build")[0] == again
    (sample_blends / "broken.jsonl").write_text('{"text": "ok"}\n{"text": "fixed now"}\n')
    fixed, _ = _build_tick(defs, instance, "broken__build")
    assert fixed[0][0] == "source_split" and fixed[0][3] != again[0][3]

    # While a run of the blend is queued or running, the sensor waits.
    job = defs.get_repository_def().get_implicit_job_def_for_assets([broken.megatron_blend.key])
    instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, asset_selection=frozenset(
        [broken.megatron_blend.key]))
    requests, skipped = _build_tick(defs, instance, "broken__build")
    assert requests == [] and skipped == "waiting for 1 run(s) of broken to end"


def test_a_nightly_run_builds_its_range_of_shards_at_the_same_time(sample_blends, tmp_path, instance):
    defs = _definitions(sample_blends, tmp_path)
    root = str(tmp_path / "data")
    _, sample = pipeline_for(sample_blends / "sample.yaml")
    run_asset(sample, sample.source_split, root, instance, DATASETS)
    repository = defs.get_repository_def()
    with dg.build_schedule_context(instance=instance, repository_def=repository, resources=defs.resources) as context:
        result = repository.get_schedule_def(SCHEDULE).evaluate_tick(context)
    requests = [("pretrain_shard", r.tags["dagster/asset_partition_range_start"],
                 r.tags["dagster/asset_partition_range_end"], r.run_key) for r in result.run_requests]
    lines = _run_requested(sample, root, instance, requests)  # as the daemon launches them: asset + range tags
    assert any(line.startswith("building 7 shard(s) in 2 processes") for line in lines), lines
