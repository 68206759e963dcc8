"""Where the packed SFT outputs live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/sft/samples/<dataset>/shard_NNNNN.arrow    SFT samples of one Harmony shard: ids, masks (+ .json receipt)
    <base>/sft/plan.parquet                           which sample goes to which split, shard, bin (+ plan.json)
    <base>/sft/<split>/shard_NNNNN.parquet            packed bins, Megatron-Bridge's Parquet (+ .samples.parquet, .json)
    <base>/sft/<split>.npy                            with formats [parquet, npy]: the split's bins for NeMo
    <base>/sft/manifest.json, packing_metadata.json   per split counts; Bridge's metadata (+ manifest.receipt.json)
"""

import re
from dataclasses import dataclass

from nemotron_assets.core.layout import ShardKey

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
    """``<base>/sft/plan``: ``plan.parquet`` and its receipt ``plan.json``."""
    return f"{sft_dir(base)}/plan"


def sft_packed_prefix(base: str, key: SftShardKey) -> str:
    """``<base>/sft/<split>/shard_NNNNN``: ``.parquet`` (bins), ``.samples.parquet`` (their samples), ``.json``."""
    return f"{sft_dir(base)}/{key.split}/shard_{key.index:05d}"


def sft_manifest_prefix(base: str) -> str:
    """The receipt of ``manifest.json``, ``packing_metadata.json`` and ``<split>.npy`` (files named relative to
    ``<base>/sft/``) is ``<base>/sft/manifest.receipt.json``."""
    return f"{sft_dir(base)}/manifest.receipt"
