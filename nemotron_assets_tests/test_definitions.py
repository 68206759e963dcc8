"""The code location loads: one pipeline per blend file, keys prefixed and grouped by the blend, its sample twins in
their own group, and a broken blend file as one error asset that does not take the others down."""

import dagster as dg

from nemotron_assets.definitions import build_definitions
from nemotron_assets_tests.conftest import REPO

ASSETS = ("source_split", "pretrain_shard", "megatron_blend")


def test_every_blend_becomes_a_prefixed_group_of_assets_with_checks_and_a_samples_group(tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "second.json").write_text('{"datasets": [{"name": "one", "path": "x.jsonl"}]}')
    (blends / "sample.yaml").write_text((REPO / "blends" / "sample.yaml").read_text())
    defs = build_definitions(blends_dir=blends, data_root=str(tmp_path / "data"))
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == ({f"{blend}/{asset}" for blend in ("sample", "second") for asset in ASSETS}
                    | {f"{blend}/samples/{asset}" for blend in ("sample", "second") for asset in ASSETS})
    assert graph.get(dg.AssetKey(["second", "pretrain_shard"])).group_name == "second"
    assert graph.get(dg.AssetKey(["second", "samples", "pretrain_shard"])).group_name == "second_samples"
    assert {k.name for k in graph.asset_check_keys} == {"bin_idx_consistent", "token_ids_below_vocab",
                                                         "counts_match_metadata"}
    shard_node = graph.get(dg.AssetKey(["sample", "pretrain_shard"]))
    assert dg.AssetKey(["sample", "source_split"]) in shard_node.parent_keys
    assert shard_node.backfill_policy == dg.BackfillPolicy.single_run()  # any range in one run: --partition-range
    sample_shards = graph.get(dg.AssetKey(["sample", "samples", "pretrain_shard"]))
    assert sample_shards.partitions_def.name == "sample__samples__pretrain_shards"
    assert dg.AssetKey(["sample", "samples", "source_split"]) in sample_shards.parent_keys


def test_a_broken_blend_file_becomes_an_error_asset_and_the_others_still_load(tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "sample.yaml").write_text((REPO / "blends" / "sample.yaml").read_text())
    (blends / "typo.yaml").write_text("datasets:\n  - {name: x, path: x.jsonl, wieght: 2}\n")
    defs = build_definitions(blends_dir=blends, data_root=str(tmp_path / "data"))
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey(["sample", "pretrain_shard"]) in graph.get_all_asset_keys()
    error = graph.get(dg.AssetKey(["typo", "blend_file_error"]))
    assert error.group_name == "typo"
    assert "typo.yaml" in error.description and "wieght" in error.description and "unknown key" in error.description


def test_the_bundled_blends_folder_loads_as_a_code_server_loads_it():
    defs = build_definitions(blends_dir=REPO / "blends")
    dg.Definitions.validate_loadable(defs)
    defs.get_repository_def().load_all_definitions()  # every job a sensor or schedule implies, as a code server does
