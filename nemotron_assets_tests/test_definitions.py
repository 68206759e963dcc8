"""The code location loads: one pipeline per blend file, keys prefixed and grouped by the blend."""

import dagster as dg

from nemotron_assets.definitions import build_definitions
from nemotron_assets_tests.conftest import REPO


def test_every_blend_becomes_a_prefixed_group_of_assets_with_checks(tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "second.json").write_text('{"datasets": [{"name": "one", "path": "x.jsonl"}]}')
    for name in ("sample.yaml",):
        (blends / name).write_text((REPO / "blends" / name).read_text())
    defs = build_definitions(blends_dir=blends, data_root=str(tmp_path / "data"))
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == {f"{blend}/{asset}" for blend in ("sample", "second")
                    for asset in ("source_split", "pretrain_shard", "megatron_blend")}
    assert graph.get(dg.AssetKey(["second", "pretrain_shard"])).group_name == "second"
    assert {k.name for k in graph.asset_check_keys} == {"bin_idx_consistent", "token_ids_below_vocab",
                                                         "counts_match_metadata"}
    shard_node = graph.get(dg.AssetKey(["sample", "pretrain_shard"]))
    assert dg.AssetKey(["sample", "source_split"]) in shard_node.parent_keys
    assert shard_node.backfill_policy == dg.BackfillPolicy.multi_run(16)


def test_the_bundled_blends_folder_loads():
    dg.Definitions.validate_loadable(build_definitions(blends_dir=REPO / "blends"))
