"""Where every output lives under the storage root, and how partition keys name datasets, shards and samples.

A blend's outputs sit under one *base* folder: ``<blend>`` for the full build, ``<blend>/samples/<sample>`` for a
sample (``--scale tiny|small`` or ``--max-rows N``), with the same layout inside, so a sample never touches the full
build::

    <base>/sources/<dataset>/manifest.json            files + shard plan of one dataset
    <base>/pretrain/<dataset>/shard_NNNNN.bin|.idx    Megatron indexed dataset of one shard
    <base>/pretrain/<dataset>/shard_NNNNN.json        the shard's receipt (records.py)
    <base>/pretrain/blend.json                        Megatron-Bridge per-split blend
    <base>/pretrain/data_path.txt                     the same as Megatron-LM --*-data-path arguments
    <base>/harmony/<dataset>/shard_NNNNN.parquet      normalized Harmony rows of one shard (+ .json receipt)
    <base>/harmony/<dataset>/duplicates.parquet       (shard, row, id) of rows repeating an earlier id
    <base>/pools/<pool>/part-00000.parquet            one candidate pool (+ manifest.json)
    <base>/embedding/<view>/<pool>/part-00000.parquet one embedding view of a pool
    <base>/jsonl/<dataset>/<split>/shard_NNNNN.jsonl[.zst]  JSONL rows of one source shard in one split
    <base>/jsonl/<dataset>/shard_NNNNN.json           that source shard's receipt (every split's file)
    <base>/jsonl/manifest.json                        the files per split, for NeMo-RL (+ manifest.receipt.json)
    <base>/scores/nll/<pool>/part-NNNNN.parquet       NLL of each row of one pool part (+ .json receipt)
    <base>/scores/embedding/<view>/<pool>/part-NNNNN.parquet  one vector per row of a view part (+ receipt)
    <base>/scores/near_duplicates.parquet|.md         pairs of rows above the cosine threshold (+ receipt)
    <base>/pools/<pool>_easy|_hard|_diverse/part-00000.parquet  selections, laid out as pools (+ manifest.json)
    <base>/sft/samples/<dataset>/shard_NNNNN.arrow    SFT samples of one Harmony shard: ids, masks (+ .json receipt)
    <base>/sft/plan.parquet                           which sample goes to which split, shard, bin (+ plan.json)
    <base>/sft/<split>/shard_NNNNN.parquet            packed bins, Megatron-Bridge's Parquet (+ .samples.parquet, .json)
    <base>/sft/<split>.npy                            with formats [parquet, npy]: the split's bins for NeMo
    <base>/sft/manifest.json, packing_metadata.json   per split counts; Bridge's metadata (+ manifest.receipt.json)

Partition keys use the same words as the paths (partitions.py): a dataset is ``wiki``, a shard ``wiki/shard_00000``.
"""

import re
from dataclasses import dataclass

SAMPLES_DIR = "samples"
SAMPLE_NAME = re.compile(r"^(tiny|small|rows_[1-9][0-9]*)$")
SAMPLE_SCALES = {"tiny": 10_000, "small": 1_000_000}  # rows per dataset
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


# --- samples ----------------------------------------------------------------------------------------------
def sample_name(scale: str | None = None, max_rows: int | None = None) -> str | None:
    """The sample a ``--scale``/``--max-rows`` request builds (None: the full build)."""
    if scale not in (None, "full") and max_rows is not None:
        raise ValueError("give either a scale (tiny, small) or max_rows, not both")
    if max_rows is not None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        return f"rows_{max_rows}"
    if scale in (None, "full"):
        return None
    if scale not in SAMPLE_SCALES:
        raise ValueError(f"scale must be tiny, small or full, got {scale!r}")
    return scale


def sample_rows(sample: str) -> int:
    """Rows per dataset of a sample: ``tiny`` 10,000, ``small`` 1,000,000, ``rows_N`` N."""
    check_sample(sample)
    return SAMPLE_SCALES[sample] if sample in SAMPLE_SCALES else int(sample[len("rows_"):])


def check_sample(sample: str) -> str:
    if not SAMPLE_NAME.match(sample):
        raise ValueError(f"not a sample name: {sample!r} (tiny, small or rows_N)")
    return sample


def base_dir(blend: str, sample: str | None = None) -> str:
    """The folder every output of the full build (``sample=None``) or of one sample lives under."""
    return blend if sample is None else f"{blend}/{SAMPLES_DIR}/{check_sample(sample)}"


def samples_dir(blend: str) -> str:
    return f"{blend}/{SAMPLES_DIR}"


# --- paths (``base`` is ``base_dir(blend, sample)``) ----------------------------------------------------------
def manifest_path(base: str, dataset: str) -> str:
    return f"{base}/sources/{dataset}/manifest.json"


def shard_prefix(base: str, key: ShardKey) -> str:
    return f"{base}/pretrain/{key.dataset}/shard_{key.index:05d}"


def pretrain_dir(base: str) -> str:
    return f"{base}/pretrain"


def harmony_shard_prefix(base: str, key: ShardKey) -> str:
    """``<base>/harmony/<dataset>/shard_NNNNN``: the shard is ``.parquet``, its receipt ``.json``."""
    return f"{base}/harmony/{key.dataset}/shard_{key.index:05d}"


def harmony_shard_path(base: str, key: ShardKey) -> str:
    return harmony_shard_prefix(base, key) + ".parquet"


def duplicates_path(base: str, dataset: str) -> str:
    return f"{base}/harmony/{dataset}/duplicates.parquet"


def pool_dir(base: str, pool: str) -> str:
    return f"{base}/pools/{pool}"


def pool_path(base: str, pool: str) -> str:
    return f"{pool_dir(base, pool)}/part-00000.parquet"


def embedding_dir(base: str, view: str, pool: str) -> str:
    return f"{base}/embedding/{view}/{pool}"


def embedding_view_path(base: str, view: str, pool: str) -> str:
    return f"{embedding_dir(base, view, pool)}/part-00000.parquet"


def behavior_report_path(base: str) -> str:
    return f"{base}/embedding/behavior_report.md"


def jsonl_dir(base: str) -> str:
    return f"{base}/jsonl"


def jsonl_shard_prefix(base: str, key: ShardKey) -> str:
    """``<base>/jsonl/<dataset>/shard_NNNNN``: its ``.json`` is the receipt of one source shard's JSONL files, which
    lie beside it in one folder per split, ``<split>/shard_NNNNN.jsonl[.zst]`` (records.py ``output_path``)."""
    return f"{jsonl_dir(base)}/{key.dataset}/shard_{key.index:05d}"


def jsonl_manifest_path(base: str) -> str:
    return f"{jsonl_dir(base)}/manifest.json"


def jsonl_manifest_prefix(base: str) -> str:
    """The manifest's receipt is ``<base>/jsonl/manifest.receipt.json`` (``manifest.json`` is the manifest)."""
    return f"{jsonl_dir(base)}/manifest.receipt"


# --- scores of candidate pools (scoring/) ------------------------------------------------------------------------
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


def nll_scores_path(base: str, key: PoolPartKey) -> str:
    """``<base>/scores/nll/<pool>/part-NNNNN.parquet``: the NLL of every row of one pool part (+ .json receipt)."""
    return f"{base}/scores/nll/{key.pool}/part-{key.part:05d}.parquet"


def embedding_scores_path(base: str, view: str, pool: str, part: int = 0) -> str:
    """``<base>/scores/embedding/<view>/<pool>/part-NNNNN.parquet``: one vector per row of a view part."""
    return f"{base}/scores/embedding/{view}/{pool}/part-{part:05d}.parquet"


def near_duplicates_path(base: str) -> str:
    """``<base>/scores/near_duplicates.parquet`` (pairs) beside ``near_duplicates.md`` (the summary)."""
    return f"{base}/scores/near_duplicates.parquet"


# --- packed chat SFT (sft/steps/) ---------------------------------------------------------------------------------
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
