"""A dataset split's manifest: the exact files read (size, content hash or ETag, rows) and its shard plan.

The manifest is what the tokenized shards are built from, so a shard can name exactly which rows of which
file version it holds, and a later run can tell whether anything changed under it.
"""

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nemotron_assets.blend import Blend, DatasetEntry
from nemotron_assets.errors import InputError
from nemotron_assets.layout import manifest_path
from nemotron_assets.sources.discovery import resolve_files, storage_options_for
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.plan import FileRange, ShardPlan, plan_shards, shard_count_for
from nemotron_assets.sources.readers import (
    ReadOptions,
    ReadStats,
    check_parquet_text_column,
    count_rows_and_hash,
    iter_text_batches,
)
from nemotron_assets.storage import Storage

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class SourceManifest:
    blend: str
    dataset: str
    split: str
    path: str
    revision: str | None
    text_field: str
    files: list[SourceFile]
    shards: list[ShardPlan]
    max_rows: int | None = None
    skipped_empty_files: list[str] = field(default_factory=list)

    @property
    def total_rows(self) -> int:
        """Rows the plan covers (after any max_rows limit)."""
        return sum(s.rows for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict:
        return {
            "version": MANIFEST_VERSION, "blend": self.blend, "dataset": self.dataset, "split": self.split,
            "path": self.path, "revision": self.revision, "text_field": self.text_field,
            "max_rows": self.max_rows, "total_rows": self.total_rows, "total_bytes": self.total_bytes,
            "files": [f.as_dict() for f in self.files],
            "skipped_empty_files": self.skipped_empty_files,
            "shards": [{"index": s.index, "rows": s.rows,
                        "ranges": [[r.file_index, r.row_start, r.row_end] for r in s.ranges]}
                       for s in self.shards],
        }

    @staticmethod
    def from_json(data: dict) -> "SourceManifest":
        if data.get("version") != MANIFEST_VERSION:
            raise ValueError(f"manifest version {data.get('version')} is not {MANIFEST_VERSION}")
        return SourceManifest(
            blend=data["blend"], dataset=data["dataset"], split=data["split"], path=data["path"],
            revision=data["revision"], text_field=data["text_field"], max_rows=data["max_rows"],
            files=[SourceFile(**f) for f in data["files"]],
            skipped_empty_files=list(data.get("skipped_empty_files", [])),
            shards=[ShardPlan(s["index"], tuple(FileRange(*r) for r in s["ranges"])) for s in data["shards"]],
        )

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=1, sort_keys=True).encode()

    def shard_fingerprint(self, index: int) -> str:
        """Identity of a shard's input: its row ranges and the exact file versions they come from."""
        shard = self.shards[index]
        pieces = [[self.files[r.file_index].url, self.files[r.file_index].fingerprint, r.row_start, r.row_end]
                  for r in shard.ranges]
        payload = json.dumps({"ranges": pieces, "text_field": self.text_field}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()


def read_manifest(store: Storage, base: str, dataset: str) -> SourceManifest:
    """A dataset's manifest under ``base``; ``FileNotFoundError``/``ValueError`` say what is wrong."""
    path = manifest_path(base, dataset)
    if not store.exists(path):
        raise FileNotFoundError(store.url(path))
    try:
        return SourceManifest.from_json(json.loads(store.read_bytes(path)))
    except (KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError already
        raise ValueError(f"not a readable manifest: {exc}") from None


def write_manifest(store: Storage, base: str, manifest: SourceManifest) -> str:
    """Commit the manifest under ``base``; returns its relative path."""
    relative = manifest_path(base, manifest.dataset)
    store.write_bytes(relative, manifest.to_bytes())
    return relative


def read_options(blend: Blend, entry: DatasetEntry) -> ReadOptions:
    return ReadOptions(dataset=entry.name, text_field=entry.text_field, on_error=blend.on_error,
                       storage_options=storage_options_for(entry))


def build_manifest(blend: Blend, entry: DatasetEntry, base_dir: Path, max_rows: int | None = None) -> SourceManifest:
    """Resolve, measure (rows + content hash, one streaming pass per file) and plan one dataset.

    With ``max_rows`` (a sample) only the first files holding that many rows are measured and listed.
    """
    resolution = resolve_files(entry, base_dir)
    options = read_options(blend, entry)
    if not entry.family:  # pretraining text: every Parquet file must have the text column, checked before reading
        for source in resolution.files:
            if source.format == "parquet":
                check_parquet_text_column(source, options)
    files, skipped = [], []
    for source in resolution.files:
        if max_rows is not None and sum(f.rows for f in files) >= max_rows:
            break  # a sample: the files after the first max_rows rows are neither read nor listed
        rows, digest = count_rows_and_hash(source, options)
        fingerprint = source.fingerprint or f"sha256:{digest}"
        if rows == 0:
            if blend.on_error != "skip":
                raise InputError("empty file (no rows); remove it or set on_error: skip", dataset=entry.name,
                                 path=source.url)
            skipped.append(source.url)
        files.append(SourceFile(source.url, source.size, source.format, source.compression, rows, fingerprint))
    if sum(f.rows for f in files) == 0:
        raise InputError(f"empty dataset: {len(files)} file(s) at {entry.path} hold no rows", dataset=entry.name,
                         field="path")
    rows = _limit_rows([f.rows for f in files], max_rows)
    sizes = [f.size * r // f.rows if f.rows else 0 for f, r in zip(files, rows)]
    count = blend.shard_count_override(entry) or shard_count_for(sum(sizes), sum(rows), blend.shard_size_bytes)
    return SourceManifest(
        blend=blend.name, dataset=entry.name, split=blend.split_of(entry.name), path=entry.path,
        revision=resolution.revision, text_field=entry.text_field, files=files,
        shards=plan_shards(sizes, rows, count), max_rows=max_rows, skipped_empty_files=skipped,
    )


def _limit_rows(rows: list[int], max_rows: int | None) -> list[int]:
    """Keep only the first ``max_rows`` rows of the dataset (file order)."""
    if max_rows is None:
        return rows
    limited, left = [], max_rows
    for r in rows:
        take = min(r, left)
        limited.append(take)
        left -= take
    return limited


def iter_shard_texts(manifest: SourceManifest, index: int, options: ReadOptions,
                    stats: ReadStats) -> Iterator[list[str]]:
    """The documents of shard ``index``, in input order, in batches."""
    for r in manifest.shards[index].ranges:
        yield from iter_text_batches(manifest.files[r.file_index], r.row_start, r.row_end, options, stats)
