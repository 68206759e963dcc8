"""Curation only on request: a blend builds the candidate pools that its ``curation:``, ``sft.from`` and
``scoring.pools`` name (their union), an embedding view per pool built, and the behavior report only with a
``curation:`` section. A blend that names no pool builds no curation, and its graph shows none."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nemotron_assets.core.blend import load_blend
from nemotron_assets.core.sections import POOL_NAMES
from nemotron_assets.definitions import build_definitions
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.conftest import REPO

MATH = REPO / "blends" / "sample_data" / "posttrain" / "nemotron_math_v2.jsonl"
SCORING = {"model": "/models/none", "pools": ["long_context", "proof"]}
CURATION_ASSETS = ("candidate_pool", "embedding_view", "behavior_report")


def _blend(folder: Path, name: str = "chat", **sections) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"on_error": "skip", **sections,
                                    "datasets": [{"name": "math", "path": str(MATH), "family": "nemotron_math_v2"}]}))
    return path


@pytest.mark.parametrize(("sections", "pools"), [
    ({}, ()),
    ({"sft": {"chat_template": "harmony"}}, ()),  # sft.from: all reads the rows themselves, no pool
    ({"sft": {"chat_template": "harmony", "from": ["tool_use", "proof"]}}, ("tool_use", "proof")),
    ({"curation": {"pools": ["long_context", "tool_use"]}}, ("tool_use", "long_context")),  # POOL_NAMES order
    ({"curation": {"pools": "all"}}, POOL_NAMES),
    ({"scoring": SCORING}, ("proof", "long_context")),
    ({"curation": {"pools": ["proof"]}, "scoring": SCORING,
      "sft": {"chat_template": "harmony", "from": ["tool_use", "long_context_easy"]}},
     ("tool_use", "proof", "long_context")),  # a selection is built from its scored pool, not a pool of its own
])
def test_the_pools_built_are_the_union_of_what_the_blend_names(tmp_path, sections, pools):
    assert load_blend(_blend(tmp_path, **sections)).pools() == pools


@pytest.mark.parametrize(("curation", "message"), [
    ({"pools": []}, "curation.pools"),
    ({"pools": ["tool_use", "no_such_pool"]}, "unknown pool(s) no_such_pool"),
    ({"pools": ["proof", "proof"]}, "pool(s) listed twice: proof"),
    ({"pools": "some"}, "curation.pools"),
    ({"views": True, "pools": "all"}, "curation.views: unknown key"),
])
def test_a_bad_curation_section_is_refused_naming_the_key(tmp_path, curation, message):
    with pytest.raises(InputError, match="chat.yaml") as error:
        load_blend(_blend(tmp_path, curation=curation))
    assert message in str(error.value)


def test_a_curation_section_needs_a_post_training_dataset(tmp_path):
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"name": "wiki", "path": str(MATH)}], "curation": {"pools": "all"}}))
    with pytest.raises(InputError, match="curation: pools post-training rows: the blend needs a dataset with a family"):
        load_blend(path)


def test_the_graph_holds_only_the_curation_assets_a_blend_asks_for(tmp_path):
    _blend(tmp_path, "plain")
    _blend(tmp_path, "sft_from_pools", sft={"chat_template": "harmony", "from": ["proof", "tool_use"]})
    _blend(tmp_path, "curated", curation={"pools": ["tool_use", "long_context"]})
    by_key = build_definitions(tmp_path, str(tmp_path / "data")).get_repository_def().assets_defs_by_key
    assets: dict[str, set[str]] = {}
    for key in by_key:
        assets.setdefault(key.path[0], set()).add(key.path[-1])

    def pools(blend: str) -> list[str]:
        return by_key[dg.AssetKey([blend, "candidate_pool"])].partitions_def.get_partition_keys()

    assert not assets["plain"] & set(CURATION_ASSETS)
    assert {"harmony_shard", "harmony_dedup"} <= assets["plain"]
    assert assets["sft_from_pools"] & set(CURATION_ASSETS) == {"candidate_pool", "embedding_view"}
    assert pools("sft_from_pools") == ["tool_use", "proof"]
    assert assets["curated"] >= set(CURATION_ASSETS)
    assert pools("curated") == ["tool_use", "long_context"]


@pytest.mark.slow
def test_a_blend_that_names_no_pool_builds_no_curation_and_refuses_to_select_it(cli_env, tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    _blend(blends, "plain")
    env = dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends))
    built = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "plain"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "harmony_dedup" in built.stderr and "candidate_pool" not in built.stderr
    out = tmp_path / "data" / "plain"
    assert sorted(p.name for p in out.iterdir()) == ["harmony", "sources"]  # no pools/, no embedding/

    refused = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "plain", "--select",
                              "harmony_dedup,embedding_view"], env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 2
    assert ("blend 'plain' does not build embedding_view: it is built when a pool is named in curation.pools, "
            "sft.from or scoring.pools") in refused.stderr
