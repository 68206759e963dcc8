"""Scoring through a real Dagster instance, on the post-training sample blend with a ``scoring:`` section that points
at a test-built tiny random Llama (the real Llama-3 tokenizer, tiny_llama.py) and the bundled all-MiniLM-L6-v2.

The blend is built once per module: source split, Harmony shards, dedup, the scored pool and its views, then the
four scoring assets. Results are read back with independent readers: pyarrow for the files, one plain unbatched
forward pass of the model with transformers' own chat-template rendering for the NLL, sentence-transformers' own
``encode`` for the embeddings, brute-force cosines for the near-duplicates. Tests that damage files work on a copy.
"""

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.core.blend import Blend, load_blend
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.records import Receipt, read_receipt, write_receipt
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.pools import register_pool_parts
from nemotron_assets.defs.scoring.inputs import Scoring
from nemotron_assets.defs.scoring.model_files import locate_model
from nemotron_assets.defs.scoring.rendering import conversation_from_row
from nemotron_assets.defs.scoring.status import scoring_problems, scoring_states
from nemotron_assets_tests.conftest import REPO, quick_instance
from nemotron_assets_tests.defs.scoring.hide_scoring_extra import HIDE_HEAVY
from nemotron_assets_tests.defs.scoring.scoring_pipeline import (
    MAX_TOKENS,
    POOL,
    SAMPLE,
    VIEWS,
    ScoringPipeline,
    scoring_settings,
)
from nemotron_assets_tests.defs.scoring.tiny_llama import build_tiny_llama, direct_nll_sum, transformers_render
from nemotron_assets_tests.materialize_helpers import blend_assets


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama") / "model")


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("scoring") / "data"
    blend = load_blend(SAMPLE).model_copy(update={"scoring": scoring_settings(tiny_model), "sft": None})
    with quick_instance() as instance:
        pipeline = ScoringPipeline(root, instance, blend)
        pipeline.upstream()
        pipeline.first = pipeline.scores()
        pipeline.second = pipeline.scores()
        yield pipeline


def read(path: Path, columns=None):
    return pq.read_table(path, columns=columns)


def test_nll_scores_cover_the_pool_part_and_equal_a_direct_unbatched_computation(built, tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert built.parts == [f"{POOL}/part-00000"]
    pool = read(built.out / "pools" / POOL / "part-00000.parquet").to_pylist()
    scores = read(built.out / "scores" / "nll" / POOL / "part-00000.parquet")
    assert scores.column_names == ["id", "nll_mean", "nll_sum", "tokens_scored", "truncated", "model_id",
                                   "model_revision"]
    assert scores.column("id").to_pylist() == [row["id"] for row in pool]  # no row of the sample is dropped
    assert len(pool) >= 4
    assert set(scores.column("model_revision").to_pylist()) == {locate_model(str(tiny_model)).revision}
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    by_id = {row["id"]: row for row in scores.to_pylist()}
    truncated = 0
    for row in pool:
        messages, tools = conversation_from_row(row, "pool", 0)
        ids, mask = transformers_render(tokenizer, messages, tools)
        truncated += len(ids) > MAX_TOKENS
        ids, mask = ids[:MAX_TOKENS], mask[:MAX_TOKENS]
        got = by_id[row["id"]]
        assert got["tokens_scored"] == int(mask[1:].sum())
        assert got["truncated"] == (len(transformers_render(tokenizer, messages, tools)[0]) > MAX_TOKENS)
        assert math.isclose(got["nll_sum"], direct_nll_sum(model, ids, mask), rel_tol=1e-4, abs_tol=1e-3)
        if got["tokens_scored"]:
            assert math.isclose(got["nll_mean"], got["nll_sum"] / got["tokens_scored"], rel_tol=1e-12)
        else:  # every trained token was past the cut
            assert got["nll_mean"] is None and got["nll_sum"] == 0
    assert truncated >= 1  # the flag is exercised
    metadata = built.first[f"{POOL}/part-00000"]
    assert metadata["status"] == "built" and metadata["device"] == "cpu" and metadata["dtype"] == "float32"
    assert metadata["tokens_scored"] == sum(scores.column("tokens_scored").to_pylist())
    assert metadata["truncated"] == truncated
    assert "| nll_mean | rows |" in metadata["nll_histogram"]


def test_a_rerun_scores_nothing(built):
    assert {m["status"] for m in built.second.values()} == {"up to date"}


def test_embeddings_equal_sentence_transformers_encode(built):
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(locate_model("all-MiniLM-L6-v2", field="e").folder), device="cpu")
    for view in VIEWS:
        texts = read(built.out / "embedding" / view / POOL / "part-00000.parquet")
        vectors = read(built.out / "scores" / "embedding" / view / POOL / "part-00000.parquet")
        assert vectors.schema.field("embedding").type == pa.list_(pa.float32(), 384)
        assert vectors.column("id").to_pylist() == texts.column("id").to_pylist()
        expected = encoder.encode(texts.column("embed_text").to_pylist())
        np.testing.assert_allclose(np.array(vectors.column("embedding").to_pylist()), expected, atol=2e-5)


def test_easy_and_hard_are_the_lowest_and_highest_nll_quantile_laid_out_as_pools(built):
    scores = read(built.out / "scores" / "nll" / POOL / "part-00000.parquet").to_pylist()
    pool = read(built.out / "pools" / POOL / "part-00000.parquet")
    k = math.floor(0.25 * len(scores) + 0.5)
    scored = [i for i, row in enumerate(scores) if row["nll_mean"] is not None]
    k = math.floor(0.25 * len(scored) + 0.5)
    ordered = sorted(scored, key=lambda i: (scores[i]["nll_mean"], i))
    expected = {"easy": {scores[i]["id"] for i in ordered[:k]}, "hard": {scores[i]["id"] for i in ordered[-k:]}}
    for kind, ids in expected.items():
        folder = built.out / "pools" / f"{POOL}_{kind}"
        selected = read(folder / "part-00000.parquet")
        assert selected.schema == pool.schema
        assert set(selected.column("id").to_pylist()) == ids
        assert selected.column("id").to_pylist() == [i for i in pool.column("id").to_pylist() if i in ids]
        manifest = json.loads((folder / ".meta" / "manifest.json").read_text())
        assert manifest["rows"] == k and manifest["selection"] == kind and manifest["selected_from"] == POOL
        assert json.loads((folder / ".receipts" / "part-00000.json").read_text())["files"][".parquet"]["bytes"] > 0
    diverse = read(built.out / "pools" / f"{POOL}_diverse" / "part-00000.parquet")
    assert diverse.num_rows == 3 and diverse.schema == pool.schema


def test_sft_from_may_name_a_selection(built):
    data = {"datasets": [{"name": "a", "path": "a.jsonl", "family": "openai_chat"}],
            "scoring": {"model": "/m", "pools": [POOL]}, "sft": {"chat_template": "harmony", "from": [f"{POOL}_easy"]}}
    assert Blend.model_validate({**data, "name": "b"}).sft.from_ == [f"{POOL}_easy"]
    with pytest.raises(ValueError, match=f"{POOL}_diverse"):
        Blend.model_validate({**data, "name": "b", "sft": {"chat_template": "harmony", "from": [f"{POOL}_diverse"]}})

    def plan_upstream(sft: dict) -> set[dg.AssetKey]:
        """The asset graph's upstream of sft_plan, built as definitions.py builds it."""
        blend = Blend.model_validate({**data, "name": "b", "sft": sft})
        plan = blend_assets(blend, REPO / "blends" / "b.yaml").sft_plan
        return plan.asset_deps[plan.key]

    selected = dg.AssetKey(["b", "selected_pool"])
    assert selected in plan_upstream({"chat_template": "harmony", "from": [f"{POOL}_easy"]})
    assert selected not in plan_upstream({"chat_template": "harmony", "from": [POOL]})


def test_near_duplicate_report_agrees_with_brute_force(built):
    report = read(built.out / "scores" / "near_duplicates.parquet").to_pylist()
    for view in VIEWS:
        table = read(built.out / "scores" / "embedding" / view / POOL / "part-00000.parquet")
        vectors = np.array(table.column("embedding").to_pylist(), dtype=np.float64)
        units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        ids = table.column("id").to_pylist()
        cosines = units @ units.T
        expected = {(ids[i], ids[j]) for i in range(len(ids)) for j in range(i + 1, len(ids))
                    if cosines[i, j] >= 0.9 + 1e-5}
        found = {(r["id_a"], r["id_b"]) for r in report if r["view"] == view and r["pool"] == POOL}
        assert expected <= found
        assert all(cosines[ids.index(a), ids.index(b)] >= 0.9 - 1e-5 for a, b in found)
    assert (built.out / "scores" / "near_duplicates.md").read_text().startswith("**Near-duplicate pairs**")


def test_status_and_verify_see_a_changed_pool_part_and_a_corrupted_score_file(built, tmp_path):
    shutil.copytree(built.root, tmp_path / "data")
    store = Storage(str(tmp_path / "data"))
    name = built.blend.name
    states = scoring_states(store, Scoring.of(built.blend), name)
    assert {s.asset: s.freshness.state.value for s in states if s.freshness.state.value != "done"} == {}
    assert scoring_problems(None, store, built.blend) == []
    scores = tmp_path / "data" / name / "scores" / "nll" / POOL / "part-00000.parquet"
    data = bytearray(scores.read_bytes())
    data[len(data) // 2] ^= 0xFF
    scores.write_bytes(bytes(data))
    problems = scoring_problems(None, store, built.blend)
    by_path = {p.path: p.reason for p in problems}
    corrupted = store.url(f"{name}/scores/nll/{POOL}/part-00000.parquet")
    assert "changed after it was built" in by_path.pop(corrupted)
    assert sorted(by_path) == [store.url(f"{name}/pools/{POOL}_{kind}/part-00000.parquet") for kind in ("easy", "hard")]
    pool_part = tmp_path / "data" / name / "pools" / POOL / "part-00000.parquet"
    table = read(pool_part)
    pq.write_table(table.slice(1), pool_part)  # the pool part changed after it was built
    states = {(s.asset, s.key): s.freshness for s in scoring_states(store, Scoring.of(built.blend), name)}
    stale = states[("nll_scores", f"{POOL}/part-00000")]
    assert stale.state.value == "stale" and "pool part" in stale.reason
    assert states[("embeddings", f"prompt/{POOL}")].state.value == "stale"  # its view reads the pool too


def scored_blend_folder(tmp_path: Path) -> Path:
    """A blends folder holding ``scored``: the sample post-training blend without its SFT part, scoring the
    ``tool_use`` pool with a model folder that does not exist (for tests that never load it)."""
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "sample_data").symlink_to(REPO / "blends" / "sample_data")
    (blends / "scored.yaml").write_text(SAMPLE.read_text().split("holdout:")[0]
                                        + "scoring: {model: /no/such/model, pools: [tool_use]}\n")
    return blends


def test_a_scoring_blend_fails_its_runs_with_the_install_command_without_the_extra(tmp_path):
    blends = scored_blend_folder(tmp_path)
    code = HIDE_HEAVY + f"""
import dagster as dg
from nemotron_assets.definitions import build_definitions
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.lineage import WandbLineage
defs = build_definitions({str(blends)!r}, {str(tmp_path / 'data')!r})
assert sys.modules.get("torch") is None
key = dg.AssetKey(["scored", "nll_scores"])
with dg.instance_for_test() as instance:
    instance.add_dynamic_partitions("scored__scored_pool_parts", ["tool_use/part-00000"])
    result = dg.materialize([a for a in defs.assets if isinstance(a, dg.AssetsDefinition)], selection=[key],
                            partition_key="tool_use/part-00000", instance=instance, raise_on_error=False,
                            resources={{"storage": StorageResource(root={str(tmp_path / 'data')!r}),
                                        "lineage": WandbLineage()}})
    print("SUCCESS" if result.success else "FAILED")
    for event in result.all_events:
        if event.is_step_failure:
            print(event.step_failure_data.error.message)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FAILED" in done.stdout
    assert "pip install -e '.[scoring]'" in done.stdout and "torch" in done.stdout


def split_pool_in_two(store: Storage, base: str, pool: str) -> list[str]:
    """Rewrite a committed one-part pool as ``part-00000`` and ``part-00001``, each with its own receipt holding the
    pool's inputs, as a pool written in several parts is laid out (layout.py ``pool_part_path``); returns the ids in
    part order."""
    first = read_receipt(store, f"{base}/pools/{pool}/part-00000")
    table = pq.read_table(store.url(f"{base}/pools/{pool}/part-00000.parquet"))
    half = table.num_rows // 2
    for part, rows in enumerate((table.slice(0, half), table.slice(half))):
        prefix = f"{base}/pools/{pool}/part-{part:05d}"
        pq.write_table(rows, store.url(f"{prefix}.parquet"), compression="zstd")
        data = Path(store.url(f"{prefix}.parquet")).read_bytes()
        files = {".parquet": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
        write_receipt(store, prefix, Receipt(first.kind, first.key, first.inputs, files, {"rows": rows.num_rows}))
    return table.column("id").to_pylist()


def test_a_pool_in_two_parts_is_scored_embedded_selected_and_reported_whole(built, tmp_path):
    shutil.copytree(built.root, tmp_path / "data")
    store = Storage(str(tmp_path / "data"))
    name = built.blend.name
    ids = split_pool_in_two(store, name, POOL)
    with quick_instance() as instance:
        pipeline = ScoringPipeline(tmp_path / "data", instance, built.blend)
        register_pool_parts(instance, store, (POOL,), Scope(name), None, POOL)  # as candidate_pool does
        assert pipeline.parts == [f"{POOL}/part-00000", f"{POOL}/part-00001"]
        pipeline.run(pipeline.assets.embedding_view, [POOL])
        pipeline.scores()
    out = tmp_path / "data" / name
    scored = [read(out / "scores" / "nll" / POOL / f"part-0000{p}.parquet").to_pylist() for p in (0, 1)]
    assert [row["id"] for part in scored for row in part] == ids and all(scored)
    one_part = {r["id"]: r["nll_sum"] for r in read(built.out / "scores" / "nll" / POOL / "part-00000.parquet")
                .to_pylist()}  # fp32 on CPU: how rows are split into parts changes no score
    assert all(math.isclose(r["nll_sum"], one_part[r["id"]], rel_tol=1e-6) for part in scored for r in part)
    for view in VIEWS:
        assert read(out / "embedding" / view / POOL / "part-00000.parquet").column("id").to_pylist() == ids
        assert read(out / "scores" / "embedding" / view / POOL / "part-00000.parquet").column("id").to_pylist() == ids
    for kind in ("easy", "hard", "diverse"):
        manifest = out / "pools" / f"{POOL}_{kind}" / ".meta" / "manifest.json"
        assert json.loads(manifest.read_text())["candidates"] == len(ids)
    means = {r["id"]: r["nll_mean"] for part in scored for r in part if r["nll_mean"] is not None}
    hard = read(out / "pools" / f"{POOL}_hard" / "part-00000.parquet").column("id").to_pylist()
    assert max(means, key=lambda i: (means[i], ids.index(i))) in hard  # the hardest row, whichever part holds it
    report = json.loads((out / "scores" / ".receipts" / "near_duplicates.json").read_text())["stats"]["by_view"]
    assert {key: view["rows"] for key, view in report.items()} == {f"{view}/{POOL}": len(ids) for view in VIEWS}


def test_scoring_steps_whose_pools_are_not_built_fail_naming_what_to_materialize(tmp_path):
    """``--select nll_scores`` on a fresh root or a sample without pools must not run nothing and exit 0."""
    blends = scored_blend_folder(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ, DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(tmp_path / "data"),
               NEMOTRON_BLENDS_DIR=str(blends), HF_HUB_OFFLINE="1")

    def materialize(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "scored", *args], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=300)

    for args, where in ((["--select", "nll_scores"], ""), (["--select", "nll_scores", "--max-rows", "4"],
                                                            " of sample 'rows_4'")):
        done = materialize(*args)
        assert done.returncode == 2, done.stderr[-3000:]
        assert (f"the scored pool(s) tool_use{where} are not built" in done.stderr
                and f"materialize scored/candidate_pool partition(s) 'tool_use'{where} first" in done.stderr)
    done = materialize("--select", "embeddings")
    assert done.returncode == 1 and "materialize scored/embedding_view partition 'tool_use' first" in done.stderr, \
        done.stderr[-3000:]


def test_the_post_training_automation_sensor_rebuilds_the_scores_of_the_full_build_only(tmp_path):
    from nemotron_assets.definitions import build_definitions

    blends = scored_blend_folder(tmp_path)
    repository = build_definitions(blends, str(tmp_path / "data")).get_repository_def()
    names = ("nll_scores", "embeddings", "selected_pool", "near_duplicate_report")
    sensor = repository.get_sensor_def("scored__post_training_automation")
    targeted = sensor.asset_selection.resolve(repository.asset_graph)
    assert {dg.AssetKey(["scored", name]) for name in names} <= targeted
    for name in names:  # requested by the sensor itself (core/automation.py), not by automation conditions
        assert repository.asset_graph.get(dg.AssetKey(["scored", name])).automation_condition is None
        twin = repository.asset_graph.get(dg.AssetKey(["scored", "samples", name]))
        assert twin.automation_condition is None and twin.key not in targeted
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
