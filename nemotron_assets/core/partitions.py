"""Partitions: their names, their keys, and how many go into one run.

The full build of a blend partitions its assets as the outputs are laid out (layout.py): ``source_split`` has one
partition per dataset (``wiki``), a shard asset one per shard (``wiki/shard_00000``), registered in a dynamic
partitions set ``<blend>__<what>`` (``<blend>__pretrain_shards``, ``<blend>__harmony_shards``,
``<blend>__jsonl_shards``, ``<blend>__sft_shards``, ``<blend>__scored_pool_parts``) by the step that plans them.

Samples (``--scale tiny|small``, ``--max-rows N``) have twin assets ``<blend>/samples/<asset>`` in the group
``<blend>_samples``, so building a sample never changes what the UI shows of the full build. Every twin is
dynamically partitioned (``<blend>__samples__<what>``), with the sample's name in front of the full build's key:
``tiny/wiki``, ``rows_500/wiki/shard_00000``, and ``tiny`` for what the full build leaves unpartitioned.

Runs: a shard asset's run may take any range of its partitions (``BackfillPolicy.single_run()``: ``dagster asset
materialize --partition-range`` needs it) and builds them in parallel inside its step (core/step.py). Whoever cuts
a long list of shards into runs (the command line, the schedules, the build sensor) cuts contiguous ranges of at
most ``SHARDS_PER_RUN``, so that several runs can spread over a Ray cluster.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import dagster as dg

from nemotron_assets.core.layout import base_dir, check_sample

SHARDS_PER_RUN = 16
SAMPLES_GROUP_SUFFIX = "_samples"


def sample_partitions_name(blend: str, what: str) -> str:
    """Dynamic partitions of a sample twin: ``what`` is ``datasets``, ``pretrain_shards``, ``blend``, ..."""
    return f"{blend}__samples__{what}"


def sample_key(sample: str | None, key: str | None) -> str:
    """The partition key of ``key`` in a sample's twin asset (``key`` itself for the full build)."""
    if sample is None:
        if key is None:
            raise ValueError("the full build's unpartitioned assets have no partition key")
        return key
    return check_sample(sample) if key is None else f"{check_sample(sample)}/{key}"


def split_sample_key(key: str) -> tuple[str, str | None]:
    """``tiny/wiki/shard_00000`` -> (``tiny``, ``wiki/shard_00000``); ``tiny`` -> (``tiny``, None)."""
    sample, _, rest = key.partition("/")
    return check_sample(sample), (rest or None)


#: The tags that make a run cover a partition range, as ``dagster asset materialize --partition-range`` and the UI's
#: backfills set them. Dagster 1.13 names them only in its private ``dagster._core.storage.tags``. Written out here,
#: beside the ranges, for the sensors and the command line: the code location need not import core/runs.py (and with
#: it Dagster's sqlite storage and alembic, 0.24 s). core/test_partition_range_tags.py checks they are Dagster's.
PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"


def range_tags(partitions: Sequence[str] | None) -> dict[str, str]:
    """The tags of a run over the contiguous range ``partitions[0]...partitions[-1]`` (none when unpartitioned)."""
    if not partitions:
        return {}
    return {PARTITION_RANGE_START_TAG: partitions[0], PARTITION_RANGE_END_TAG: partitions[-1]}


def contiguous_ranges(all_keys: Sequence[str], wanted: Sequence[str], max_per_run: int) -> Iterator[list[str]]:
    """Split ``wanted`` into runs of keys adjacent in ``all_keys`` order, each at most ``max_per_run`` long."""
    wanted_set = set(wanted)
    run: list[str] = []
    for key in all_keys:
        if key in wanted_set and len(run) < max_per_run:
            run.append(key)
            continue
        if run:
            yield run
        run = [key] if key in wanted_set else []
    if run:
        yield run


def register_block(instance: dg.DagsterInstance, partitions_name: str, prefix: str, wanted: list[str]) -> None:
    """Make the keys starting with ``prefix`` (one dataset's shards, one plan's packed shards) equal ``wanted``, as
    one contiguous block in that order.

    Dynamic partitions keep the order they were added in, and a partition range is a span of that order. Adding a
    re-planned dataset's new shards at the end would put other datasets' shards inside its range, so a changed
    block is deleted and added again whole, at the end (a partition's materializations are kept by key)."""
    existing = instance.get_dynamic_partitions(partitions_name)
    mine = [key for key in existing if key.startswith(prefix)]
    if mine == wanted:
        return
    for key in mine:
        instance.delete_dynamic_partition(partitions_name, key)
    if wanted:
        instance.add_dynamic_partitions(partitions_name, wanted)


@dataclass(frozen=True)
class Scope:
    """The full build of a blend, or its samples: the asset keys, group and partitions an asset factory uses."""

    blend: str
    samples: bool = False

    def key(self, asset: str) -> list[str]:
        return [self.blend, "samples", asset] if self.samples else [self.blend, asset]

    @property
    def group(self) -> str:
        return self.blend + SAMPLES_GROUP_SUFFIX if self.samples else self.blend

    def dynamic_name(self, what: str) -> str:
        """The name of a dynamic partitions set of this scope: ``<blend>__<what>``, or for the samples
        ``<blend>__samples__<what>``."""
        return sample_partitions_name(self.blend, what) if self.samples else f"{self.blend}__{what}"

    def dynamic(self, what: str) -> dg.DynamicPartitionsDefinition:
        return dg.DynamicPartitionsDefinition(name=self.dynamic_name(what))

    def partitions(self, what: str, full: dg.PartitionsDefinition | None) -> dg.PartitionsDefinition | None:
        """The partitions of an asset: ``full`` for the full build, a sample-keyed dynamic set for samples."""
        return self.dynamic(what) if self.samples else full

    def split(self, partition: str | None) -> tuple[str | None, str | None]:
        """(sample or None, the full build's key) of one of this scope's partition keys."""
        return split_sample_key(partition) if self.samples else (None, partition)

    def qualify(self, sample: str | None, key: str | None) -> str:
        return sample_key(sample if self.samples else None, key)

    def base(self, sample: str | None) -> str:
        return base_dir(self.blend, sample if self.samples else None)

    def sample_of(self, context: dg.AssetExecutionContext) -> str | None:
        """The sample an unpartitioned asset's run builds (its one partition key), None for the full build."""
        return self.split(context.partition_keys[0])[0] if self.samples else None
