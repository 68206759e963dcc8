"""A dataset's manifest: the exact files it reads and its shard plan (the schema of
``<base>/sources/<dataset>/manifest.json``), and reading the rows a shard plans.

The manifest is what the shards are built from, so a shard can name exactly which rows of which file version it
holds (`SourceManifest.shard_fingerprint`), and a later run can tell whether anything changed under it. It is
written by the source_split step (defs/sources/).
"""

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.plan import FileRange, ShardPlan
from nemotron_assets.sources.readers import ReadOptions, ReadStats, iter_text_batches

MANIFEST_VERSION = 1
COMPRESSED_TEXT_RATIO = 4  # about how many bytes of text a compressed byte holds (zstd or gzip on text)


@dataclass(frozen=True)
class SourceManifest:
    blend: str
    dataset: str
    split: str
    path: str
    revision: str | None
    text_field: str | list[str]  # several: Megatron's --json-keys (each field its own shards)
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

    def shard_text_bytes(self, index: int) -> int:
        """About how many bytes of text shard ``index`` reads: each range's share of its file's size, by rows, a
        compressed file's (gzip, zstd, Parquet) counted ``COMPRESSED_TEXT_RATIO`` times."""
        total = 0
        for r in self.shards[index].ranges:
            file = self.files[r.file_index]
            ratio = COMPRESSED_TEXT_RATIO if file.compression or file.format == "parquet" else 1
            total += file.size * ratio * r.rows // max(file.rows, 1)
        return total

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


def iter_shard_texts(manifest: SourceManifest, index: int, options: ReadOptions,
                    stats: ReadStats) -> Iterator[list[str]]:
    """The documents of shard ``index``, in input order, in batches."""
    for r in manifest.shards[index].ranges:
        yield from iter_text_batches(manifest.files[r.file_index], r.row_start, r.row_end, options, stats)
