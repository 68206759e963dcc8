"""Which files of a listing belong to a dataset entry, and what resolving an entry yields.

Shared by the local/S3 listing (discovery.py) and the Hugging Face one (hf.py). ``subset`` and ``split`` are
matched exactly against path segments: ``4plus`` matches ``4plus/x.parquet`` and ``data/4plus/x.parquet`` but
never ``4plus_MIND/x.parquet``.
"""

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from nemotron_assets.sources.files import SourceFile


class SourceEntry(Protocol):
    """What resolving reads of a blend's dataset entry (``core/blend.py`` ``DatasetEntry`` is one)."""

    name: str
    path: str  # a local file, folder or glob; s3://bucket/prefix; hf://org/repo
    subset: str | None
    split: str | None
    revision: str | None  # of an hf:// source
    format: str | None  # jsonl or parquet, when the suffix does not say
    endpoint_url: str | None  # of an s3:// source


@dataclass(frozen=True)
class Resolution:
    files: list[SourceFile]
    revision: str | None = None  # the pinned commit sha of an hf:// source


def matches_subset_split(relative: str, subset: str | None, split: str | None) -> bool:
    """Exact matching on path segments; a split also matches a file stem like ``train-00000-of-00002``."""
    parts = PurePosixPath(relative).parts
    folders, name = parts[:-1], parts[-1]
    if subset is not None and subset not in folders:
        return False
    if split is not None:
        stem = name.split(".")[0]
        if split not in folders and stem != split and not stem.startswith(f"{split}-"):
            return False
    return True
