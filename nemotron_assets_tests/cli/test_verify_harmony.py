"""``verify`` and ``status`` on the post-training outputs: the sample post-training blend is built once, then
each test damages a copy of it the way a disk, a person or a bug would, and checks that the problem is named."""

import dataclasses
import shutil

import pyarrow.parquet as pq
import pytest

from nemotron_assets.cli.reports import collect_problems, collect_status, format_status
from nemotron_assets.core.records import read_receipt, write_receipt
from nemotron_assets.core.sections import POOL_NAMES, CurationSettings
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.views import VIEWS
from nemotron_assets_tests.conftest import quick_instance
from nemotron_assets_tests.defs.harmony.harmony_pipeline import SAMPLE, Pipeline

SHARD = "posttrain_sample/harmony/nemotron_math_v2/shard_00000"
POOL = "posttrain_sample/pools/tool_use/part-00000"


@pytest.fixture(scope="module")
def built_once(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify_harmony")
    with quick_instance() as instance:
        pipeline = Pipeline(SAMPLE, root / "data", instance, sft=None)  # the Harmony path (packed SFT: its own tests)
        pipeline.all()
    return pipeline.blend, root / "data"


@pytest.fixture
def built(built_once, tmp_path):
    """A private copy of the built blend."""
    blend, data = built_once
    shutil.copytree(data, tmp_path / "data")
    return blend, Storage(str(tmp_path / "data")), tmp_path / "data"


def _problems(store: Storage, blend) -> list[str]:
    with quick_instance() as instance:
        return [str(p) for p in collect_problems(instance, store, blend)]


def _rewrite_consistently(store: Storage, prefix: str, table) -> None:
    """Replace a Parquet file and update its receipt's hash to match, as a buggy writer would: only the
    content checks (rows, schema) can then find the problem."""
    pq.write_table(table, store.url(f"{prefix}.parquet"))
    receipt = read_receipt(store, prefix)
    files = {".parquet": {"bytes": store.size(f"{prefix}.parquet"), "sha256": store.sha256(f"{prefix}.parquet")}}
    write_receipt(store, prefix, dataclasses.replace(receipt, files=files))


def test_an_intact_build_has_no_problem_and_every_output_is_done(built):
    blend, store, _ = built
    assert _problems(store, blend) == []
    with quick_instance() as instance:
        report = collect_status(instance, store, blend)
    assert {o.state for o in report.outputs} == {"done"}
    assert {o.asset for o in report.outputs} == {"harmony_dedup", "candidate_pool", "embedding_view",
                                                  "behavior_report"}
    [report_row] = [o for o in report.outputs if o.asset == "behavior_report"]
    behavior_views = [o for o in report.outputs if o.asset == "embedding_view" and o.key.startswith("behavior/")]
    assert report_row.rows == sum(o.rows for o in behavior_views) > 0  # the rows it reports on, not 0


def test_pools_the_blend_no_longer_asks_for_are_listed_skipped_and_kept(built):
    """The sample asked for every pool; a narrower ``curation:`` (or none) leaves the other pools, their views and
    the report on disk: status lists them as not in the blend, verify skips them and says so, nothing is touched."""
    blend, store, data = built
    before = {path: path.stat().st_mtime_ns for path in data.rglob("*")}
    # A report over other pools is stale (its inputs are the behavior views of the pools asked for).
    for curation, report_state in ((CurationSettings(pools=["tool_use"]), "stale"), (None, "not_in_blend")):
        narrower = blend.model_copy(update={"curation": curation})
        with quick_instance() as instance:
            report = collect_status(instance, store, narrower)
            found = collect_problems(instance, store, narrower)
        states = {(o.asset, o.key): o.state for o in report.outputs}
        not_asked = [pool for pool in POOL_NAMES if curation is None or pool != "tool_use"]
        assert {key for key, state in states.items() if state == "not_in_blend"} == {
            *(("candidate_pool", pool) for pool in not_asked),
            *(("embedding_view", f"{view}/{pool}") for pool in not_asked for view in VIEWS),
            *([("behavior_report", "")] if curation is None else [])}
        assert states[("behavior_report", "")] == report_state
        assert [str(problem) for problem in found if not problem.skipped] == (
            [] if curation is None else [f"{data}/posttrain_sample/embedding/behavior_report.md: stale: "
                                         f"{states_reason(report, 'behavior_report')}: re-materialize "
                                         "posttrain_sample/behavior_report"])
        assert len(found) == len(not_asked) * (1 + len(VIEWS)) + 1  # and the report: stale, or not in the blend
        assert f"{data}/posttrain_sample/pools/proof/part-00000.parquet: skipped: posttrain_sample/candidate_pool " \
               "partition 'proof': the blend no longer asks for it; kept on disk, not verified, not deleted" \
               in map(str, found)
        assert "candidate_pool   not in the blend: high_correctness, " in format_status(report)
    assert {path: path.stat().st_mtime_ns for path in data.rglob("*")} == before


def states_reason(report, asset: str) -> str:
    [row] = [o for o in report.outputs if o.asset == asset]
    return row.reason


def test_changed_shard_bytes_are_named_stale_and_hold_back_the_downstream_checks(built):
    blend, store, data = built
    path = data / f"{SHARD}.parquet"
    path.write_bytes(path.read_bytes()[:-1] + b"X")  # same size and stamp class, different content
    problems = _problems(store, blend)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}: stale: ") and "posttrain_sample/harmony_shard" in problems[0]


def test_a_shard_with_fewer_rows_than_its_receipt_is_named(built):
    blend, store, data = built
    table = pq.read_table(data / f"{SHARD}.parquet")
    _rewrite_consistently(store, SHARD, table.slice(0, table.num_rows - 1))
    assert _problems(store, blend) == [f"{data / SHARD}.parquet: holds {table.num_rows - 1:,} rows, its receipt "
                                       f"says {table.num_rows:,}"]


def test_a_shard_missing_a_column_is_named(built):
    blend, store, data = built
    table = pq.read_table(data / f"{SHARD}.parquet")
    _rewrite_consistently(store, SHARD, table.drop_columns(["quality_placeholder_prompt"]))
    [problem] = _problems(store, blend)
    assert problem.startswith(f"{data / SHARD}.parquet: its columns are not the normalized schema")
    assert "missing: quality_placeholder_prompt" in problem


def test_a_deleted_pool_is_missing_and_what_is_built_from_it_waits(built):
    blend, store, data = built
    (data / f"{POOL}.parquet").unlink()
    problems = _problems(store, blend)
    assert f"{data / POOL}.parquet: missing: " in problems[0] and "candidate_pool partition 'tool_use'" in problems[0]
    with quick_instance() as instance:
        states = {(o.asset, o.key): o.state for o in collect_status(instance, store, blend).outputs}
    assert states[("candidate_pool", "tool_use")] == "missing"
    assert states[("candidate_pool", "proof")] == "done"
    assert states[("embedding_view", "behavior/tool_use")] == "stale"  # its input is gone: it cannot be current
    assert states[("behavior_report", "")] == "stale"


def test_a_pool_with_rows_removed_behind_its_receipt_is_named(built):
    blend, store, data = built
    table = pq.read_table(data / f"{POOL}.parquet")
    _rewrite_consistently(store, POOL, table.slice(1))
    problems = _problems(store, blend)
    assert f"{data / POOL}.parquet: holds {table.num_rows - 1:,} rows, its receipt says {table.num_rows:,}" in problems
