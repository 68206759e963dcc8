"""A run over a range of partitions carries Dagster's own range tags (core/partitions.py ``range_tags``): the ones
``dagster asset materialize --partition-range`` and the UI's backfills set, which Dagster names only privately."""

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from nemotron_assets.core.partitions import range_tags

PARTS = dg.StaticPartitionsDefinition(["a", "b", "c", "d"])


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run())
def lettered(context: dg.AssetExecutionContext) -> None:
    context.add_output_metadata({"keys": ",".join(context.partition_keys)})


def test_the_tags_are_dagsters_and_a_run_with_them_covers_the_range(instance):
    assert range_tags(["b", "c"]) == {ASSET_PARTITION_RANGE_START_TAG: "b", ASSET_PARTITION_RANGE_END_TAG: "c"}
    assert range_tags([]) == {} and range_tags(None) == {}
    result = dg.materialize([lettered], instance=instance, tags=range_tags(["b", "c"]))
    assert result.success
    assert instance.get_materialized_partitions(dg.AssetKey("lettered")) == {"b", "c"}
