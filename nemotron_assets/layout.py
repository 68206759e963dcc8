"""Where every output lives under the storage root, and how partition keys name shards.

    <root>/<blend>/sources/<dataset>/manifest.json          files + shard plan of one dataset
    <root>/<blend>/pretrain/<dataset>/shard_NNNNN.bin|.idx  Megatron indexed dataset of one shard
    <root>/<blend>/pretrain/<dataset>/shard_NNNNN.json      the shard's receipt (counts, checksums, inputs)
    <root>/<blend>/pretrain/blend.json                      Megatron-Bridge per-split blend
    <root>/<blend>/pretrain/data_path.txt                   the same as Megatron-LM --*-data-path arguments
    <root>/<blend>/harmony/<dataset>/shard_NNNNN.parquet    normalized Harmony rows of one shard (+ .json receipt)
    <root>/<blend>/harmony/<dataset>/duplicates.parquet     (shard, row, id) of rows repeating an earlier id
    <root>/<blend>/pools/<pool>/part-00000.parquet          one candidate pool (+ manifest.json)
    <root>/<blend>/embedding/<view>/<pool>/part-00000.parquet  one embedding view of a pool

A tokenized shard's partition key is ``<dataset>/shard_NNNNN``: the same words as its path.
"""

import re
from dataclasses import dataclass

_SHARD_KEY = re.compile(r"^(?P<dataset>[a-z0-9_][a-z0-9_.-]*)/shard_(?P<index>\d{5,})$")


@dataclass(frozen=True)
class ShardKey:
    dataset: str
    index: int

    def __str__(self) -> str:
        return f"{self.dataset}/shard_{self.index:05d}"

    @staticmethod
    def parse(key: str) -> "ShardKey":
        match = _SHARD_KEY.match(key)
        if match is None:
            raise ValueError(f"not a shard partition key: {key!r} (expected <dataset>/shard_NNNNN)")
        return ShardKey(match["dataset"], int(match["index"]))


def harmony_partitions_name(blend: str) -> str:
    """Dynamic partitions of a blend's Harmony shards (its family datasets)."""
    return f"{blend}__harmony_shards"


def pretrain_partitions_name(blend: str) -> str:
    """Dynamic partitions of a blend's pretraining shards (its datasets without a family)."""
    return f"{blend}__pretrain_shards"


def manifest_path(blend: str, dataset: str) -> str:
    return f"{blend}/sources/{dataset}/manifest.json"


def shard_prefix(blend: str, key: ShardKey) -> str:
    return f"{blend}/pretrain/{key.dataset}/shard_{key.index:05d}"


def pretrain_dir(blend: str) -> str:
    return f"{blend}/pretrain"


def harmony_shard_path(blend: str, key: ShardKey) -> str:
    """``<blend>/harmony/<dataset>/shard_NNNNN.parquet`` (its receipt: the same name with ``.json``)."""
    return f"{blend}/harmony/{key.dataset}/shard_{key.index:05d}.parquet"


def duplicates_path(blend: str, dataset: str) -> str:
    return f"{blend}/harmony/{dataset}/duplicates.parquet"


def pool_dir(blend: str, pool: str) -> str:
    return f"{blend}/pools/{pool}"


def embedding_dir(blend: str, view: str, pool: str) -> str:
    return f"{blend}/embedding/{view}/{pool}"
