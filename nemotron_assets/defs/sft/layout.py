"""Where the packed SFT outputs live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/sft/samples/<dataset>/shard_NNNNN.arrow    SFT samples of one Harmony shard: ids, masks
    <base>/sft/plan.parquet                           which sample goes to which split, shard, bin
    <base>/sft/<split>/shard_NNNNN.parquet            packed bins, Megatron-Bridge's Parquet
    <base>/sft/<split>/.meta/shard_NNNNN.samples.parquet  which sample sits where in those bins
    <base>/sft/<split>.npy                            with formats [parquet, npy]: the split's bins for NeMo
    <base>/sft/manifest.json, packing_metadata.json   per split counts; Bridge's metadata

Every output's receipt is in the ``.receipts/`` folder beside it (``plan`` -> ``.receipts/plan.json``, the manifest's
``.receipts/manifest.receipt.json``; core/records.py ``receipt_path``). A split's folder holds only its packed shards,
so Megatron-Bridge may be given the folder as well as the glob ``<split>/shard_?????.parquet``.
"""

import re
from dataclasses import dataclass

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import META_DIR, output_path

_SFT_SHARD_KEY = re.compile(r"^(?P<split>train|valid|test)/shard_(?P<index>\d{5,})$")


@dataclass(frozen=True)
class SftShardKey:
    """One packed SFT shard: the partition key ``<split>/shard_NNNNN`` of ``sft_packed``."""

    split: str
    index: int

    def __str__(self) -> str:
        return f"{self.split}/shard_{self.index:05d}"

    @staticmethod
    def parse(key: str) -> "SftShardKey":
        match = _SFT_SHARD_KEY.match(key)
        if match is None:
            raise ValueError(f"not a packed SFT shard key: {key!r} (expected train|valid|test/shard_NNNNN)")
        return SftShardKey(match["split"], int(match["index"]))


def sft_dir(base: str) -> str:
    return f"{base}/sft"


def sft_samples_prefix(base: str, key: ShardKey) -> str:
    """``<base>/sft/samples/<dataset>/shard_NNNNN``: the samples of one Harmony shard (``.arrow``, ``.json``)."""
    return f"{sft_dir(base)}/samples/{key.dataset}/shard_{key.index:05d}"


def sft_plan_prefix(base: str) -> str:
    """``<base>/sft/plan``: ``plan.parquet`` and its receipt ``.receipts/plan.json``."""
    return f"{sft_dir(base)}/plan"


def sft_packed_prefix(base: str, key: SftShardKey) -> str:
    """``<base>/sft/<split>/shard_NNNNN``: ``.parquet`` (bins), ``.meta/shard_NNNNN.samples.parquet`` (their samples,
    `packed_samples_name`), receipt ``.receipts/shard_NNNNN.json``."""
    return f"{sft_dir(base)}/{key.split}/shard_{key.index:05d}"


def packed_samples_name(key: SftShardKey) -> str:
    """The receipt's name of a packed shard's samples listing: ``.meta/shard_NNNNN.samples.parquet``, relative to
    the split's folder (core/records.py ``output_path``)."""
    return f"{META_DIR}/shard_{key.index:05d}.samples.parquet"


def packed_samples_path(base: str, key: SftShardKey) -> str:
    """``<base>/sft/<split>/.meta/shard_NNNNN.samples.parquet``."""
    return output_path(sft_packed_prefix(base, key), packed_samples_name(key))


def sft_manifest_prefix(base: str) -> str:
    """The receipt of ``manifest.json``, ``packing_metadata.json`` and ``<split>.npy`` (files named relative to
    ``<base>/sft/``) is ``<base>/sft/.receipts/manifest.receipt.json``."""
    return f"{sft_dir(base)}/manifest.receipt"
