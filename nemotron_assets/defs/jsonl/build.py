"""Build the JSONL files of one source shard: whole rows of one shard plan entry -> transform -> holdout split ->
``<split>/shard_NNNNN.jsonl[.zst]`` in a local folder (docs/architecture.md §4.5, formats/transforms.py).

Rows stream through in the readers' batches, so memory stays near one batch whatever the shard size. A JSONL source
is read line by line as whole JSON objects; a Parquet source's rows come as dicts (nested columns as lists and
dicts). What happens to a row:

- the reader cannot read it (not JSON, not an object, invalid UTF-8): an ``InputError`` naming dataset, file and
  line fails the shard, or with ``on_error: skip`` it is counted under the reader's reason (``malformed_json``, ...);
- the transform cannot take it (a field missing or of the wrong type): counted under the transform's reason
  (``missing:responses_create_params``, ...) whatever ``on_error`` says: such rows are data the transform does not
  apply to, not broken files;
- otherwise it is written to the file of its split.

Either way the row is counted: ``rows_in`` (every row read) = rows written + rows dropped.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nemotron_assets.formats.splits import Holdout, Split
from nemotron_assets.formats.transforms import MAX_EXAMPLES, Compression, JsonlShardStats, Transform, write_jsonl_shard
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.readers import ReadOptions, ReadStats, iter_record_batches


def build_jsonl_shard(manifest: SourceManifest, index: int, transform: Transform, options: ReadOptions,
                      out_dir: Path, *, holdout: Holdout | None, fixed_split: Split | None,
                      compression: Compression) -> JsonlShardStats:
    """Write shard ``index`` of ``manifest`` into ``out_dir/<split>/shard_NNNNN.jsonl[.zst]`` (a local folder)."""
    read = ReadStats()
    stats = write_jsonl_shard(_rows(manifest, index, options, read), transform, out_dir, dataset=manifest.dataset,
                              shard=index, holdout=holdout, fixed_split=fixed_split, compression=compression)
    stats.rows_in = read.rows  # the rows the reader could not read were never handed to the transform
    stats.dropped.update(read.dropped)
    stats.examples = (read.examples + stats.examples)[:MAX_EXAMPLES]
    return stats


def _rows(manifest: SourceManifest, index: int, options: ReadOptions,
          read: ReadStats) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(location, row) of every readable row of the shard, in plan order."""
    for file_range in manifest.shards[index].ranges:
        source = manifest.files[file_range.file_index]
        for batch in iter_record_batches(source, file_range.row_start, file_range.row_end, options, read):
            for row, record in batch:
                yield _location(source, row), record


def _location(source: SourceFile, row: int) -> str:
    """As the readers name a row: ``file:line`` (JSONL, 1-based) or ``file row N`` (Parquet, 0-based)."""
    return f"{source.url}:{row + 1}" if source.format == "jsonl" else f"{source.url} row {row}"
