"""Where the Harmony curation outputs live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/harmony/<dataset>/shard_NNNNN.parquet      normalized Harmony rows of one shard
    <base>/harmony/<dataset>/.meta/duplicates.parquet (shard, row, id) of rows repeating an earlier id
    <base>/pools/<pool>/part-NNNNN.parquet            one candidate pool, in parts
    <base>/pools/<pool>/.meta/manifest.json           its rows per dataset and thresholds
    <base>/embedding/<view>/<pool>/part-00000.parquet one embedding view of a pool
    <base>/embedding/behavior_report.md               the behavior report

Every output's receipt is in the ``.receipts/`` folder beside it (``shard_NNNNN`` -> ``.receipts/shard_NNNNN.json``,
core/records.py ``receipt_path``), and what a trainer does not read is in ``.meta/``: a dataset's or a pool's folder
holds only its Parquet rows, so ``pyarrow.dataset`` or ``datasets.load_dataset("parquet", data_dir=...)`` reads it.
A pool part is also a partition key, ``<pool>/part-NNNNN``, of the scoring pipeline's ``nll_scores``.
"""

import re
from dataclasses import dataclass

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import META_DIR, output_path


def harmony_shard_prefix(base: str, key: ShardKey) -> str:
    """``<base>/harmony/<dataset>/shard_NNNNN``: the shard is ``.parquet``, its receipt
    ``.receipts/shard_NNNNN.json``."""
    return f"{base}/harmony/{key.dataset}/shard_{key.index:05d}"


def harmony_shard_path(base: str, key: ShardKey) -> str:
    return harmony_shard_prefix(base, key) + ".parquet"


def duplicates_prefix(base: str, dataset: str) -> str:
    """``<base>/harmony/<dataset>/duplicates``: the dedup result's receipt is ``.receipts/duplicates.json``, its file
    ``.meta/duplicates.parquet`` (`DUPLICATES_FILE`, named relative to the dataset's folder)."""
    return f"{base}/harmony/{dataset}/duplicates"


DUPLICATES_FILE = f"{META_DIR}/duplicates.parquet"


def duplicates_path(base: str, dataset: str) -> str:
    return output_path(duplicates_prefix(base, dataset), DUPLICATES_FILE)


def pool_dir(base: str, pool: str) -> str:
    return f"{base}/pools/{pool}"


POOL_MANIFEST_FILE = f"{META_DIR}/manifest.json"  # named relative to the pool's folder, in its parts' receipts


def pool_manifest_path(base: str, pool: str) -> str:
    """``<base>/pools/<pool>/.meta/manifest.json``: rows per dataset and the thresholds (or the selection's details)."""
    return f"{pool_dir(base, pool)}/{POOL_MANIFEST_FILE}"


def pool_path(base: str, pool: str) -> str:
    return f"{pool_dir(base, pool)}/part-00000.parquet"


def embedding_dir(base: str, view: str, pool: str) -> str:
    return f"{base}/embedding/{view}/{pool}"


def embedding_view_path(base: str, view: str, pool: str) -> str:
    return f"{embedding_dir(base, view, pool)}/part-00000.parquet"


def behavior_report_path(base: str) -> str:
    return f"{base}/embedding/behavior_report.md"


_POOL_PART_KEY = re.compile(r"^(?P<pool>[a-z0-9_]+)/part-(?P<part>\d{5,})$")


_POOL_PART_FILE = re.compile(r"^part-(?P<part>\d{5,})\.parquet$")


@dataclass(frozen=True)
class PoolPartKey:
    """One Parquet part of a pool: the partition key ``<pool>/part-NNNNN`` of ``nll_scores``."""

    pool: str
    part: int

    def __str__(self) -> str:
        return f"{self.pool}/part-{self.part:05d}"

    @staticmethod
    def parse(key: str) -> "PoolPartKey":
        match = _POOL_PART_KEY.match(key)
        if match is None:
            raise ValueError(f"not a pool part partition key: {key!r} (expected <pool>/part-NNNNN)")
        return PoolPartKey(match["pool"], int(match["part"]))


def pool_part_path(base: str, pool: str, part: int) -> str:
    """``<base>/pools/<pool>/part-NNNNN.parquet`` (a pool writes part 0 today; ``pool_path`` is that one)."""
    return f"{pool_dir(base, pool)}/part-{part:05d}.parquet"


def pool_part_number(file_name: str) -> int | None:
    """The part number of a file name like ``part-00003.parquet``, None for anything else."""
    match = _POOL_PART_FILE.match(file_name)
    return int(match["part"]) if match else None
