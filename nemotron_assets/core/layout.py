"""Where a blend's outputs live under the storage root, and the keys that name datasets, shards and samples.

A blend's outputs sit under one *base* folder: ``<blend>`` for the full build, ``<blend>/samples/<sample>`` for a
sample (``--scale tiny|small`` or ``--max-rows N``), with the same layout inside, so a sample never touches the full
build. Every pipeline lays its own outputs out under the base (``defs/<pipeline>/layout.py``); this module holds what
they share::

    <base>/sources/<dataset>/manifest.json            files + shard plan of one dataset

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


def manifest_path(base: str, dataset: str) -> str:
    return f"{base}/sources/{dataset}/manifest.json"


def input_stamps_path(base: str, dataset: str) -> str:
    """The modification times of the dataset's local input files when they were measured (defs/sources)."""
    return f"{base}/sources/{dataset}/stamps.json"
