"""Partitions: their names, their keys, and how many go into one run.

The full build of a blend partitions its assets as the outputs are laid out (layout.py):

    <blend>/source_split      one partition per dataset            wiki
    <blend>/pretrain_shard    one per pretraining shard (dynamic)  wiki/shard_00000   <blend>__pretrain_shards
    <blend>/harmony_shard     one per post-training shard (dynamic)                    <blend>__harmony_shards
    <blend>/jsonl_shard       one per JSONL dataset shard (dynamic)                    <blend>__jsonl_shards
    <blend>/sft_packed        one per packed SFT shard (dynamic)   train/shard_00000  <blend>__sft_shards
    <blend>/megatron_blend    unpartitioned
    <blend>/nll_scores        one per part of a scored pool (dynamic) tool_use/part-00000 <blend>__scored_pool_parts

Samples (``--scale tiny|small``, ``--max-rows N``) have twin assets ``<blend>/samples/<asset>`` in the group
``<blend>_samples``, so building a sample never changes what the UI shows of the full build. Every twin is
dynamically partitioned (``<blend>__samples__<what>``), with the sample's name in front of the full build's key:
``tiny/wiki``, ``rows_500/wiki/shard_00000``, and ``tiny`` for what the full build leaves unpartitioned.

Shard runs take up to ``SHARDS_PER_RUN`` contiguous partitions: one run per shard costs seconds of overhead.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import dagster as dg

from nemotron_assets.core.layout import base_dir, check_sample

SHARDS_PER_RUN = 16
SAMPLES_GROUP_SUFFIX = "_samples"


def pretrain_partitions_name(blend: str) -> str:
    """Dynamic partitions of a blend's pretraining shards (its datasets without a family)."""
    return f"{blend}__pretrain_shards"


def harmony_partitions_name(blend: str) -> str:
    """Dynamic partitions of a blend's Harmony shards (its family datasets)."""
    return f"{blend}__harmony_shards"


def jsonl_partitions_name(blend: str) -> str:
    """Dynamic partitions of a blend's JSONL shards (its datasets with a ``transform``)."""
    return f"{blend}__jsonl_shards"


def sft_partitions_name(blend: str) -> str:
    """Dynamic partitions of a blend's packed SFT shards (``<split>/shard_NNNNN``), registered by ``sft_plan``."""
    return f"{blend}__sft_shards"


def scored_pool_parts_name(blend: str) -> str:
    """Dynamic partitions of ``nll_scores``: the Parquet parts ``<pool>/part-NNNNN`` of the pools ``scoring:``
    lists, registered by ``candidate_pool`` when it commits them (assets/scoring_parts.py)."""
    return f"{blend}__scored_pool_parts"


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

    def partitions(self, what: str, full: dg.PartitionsDefinition | None) -> dg.PartitionsDefinition | None:
        """The partitions of an asset: ``full`` for the full build, a sample-keyed dynamic set for samples."""
        return dg.DynamicPartitionsDefinition(name=sample_partitions_name(self.blend, what)) if self.samples else full

    def shard_partitions_name(self, kind: str) -> str:
        """Where ``source_split`` registers the shards of a dataset: ``kind`` is its ``DatasetEntry.kind``
        (``pretrain``, ``harmony`` or ``jsonl``); ``sft``: where ``sft_plan`` registers the packed shards."""
        if self.samples:
            return sample_partitions_name(self.blend, f"{kind}_shards")
        names = {"pretrain": pretrain_partitions_name, "harmony": harmony_partitions_name,
                 "jsonl": jsonl_partitions_name, "sft": sft_partitions_name}
        return names[kind](self.blend)

    def split(self, partition: str | None) -> tuple[str | None, str | None]:
        """(sample or None, the full build's key) of one of this scope's partition keys."""
        return split_sample_key(partition) if self.samples else (None, partition)

    def qualify(self, sample: str | None, key: str | None) -> str:
        return sample_key(sample if self.samples else None, key)

    def base(self, sample: str | None) -> str:
        return base_dir(self.blend, sample if self.samples else None)
