"""Build one normalized Harmony shard: raw rows of one shard plan entry -> Parquet with the columns of
``normalize/record.py`` (docs/architecture.md §4.3).

Rows stream through in batches (memory stays near one batch whatever the shard size). What happens to a row:

- its family mapper cannot read it (a required field missing): an ``InputError`` naming dataset, file, line (or
  row) and field fails the shard, or with ``on_error: skip`` it is counted under ``unreadable:<field>``;
- the family deliberately does not normalize it (an OpenMathReasoning problem without a solution): counted under
  ``skipped:<reason>`` whatever ``on_error`` says;
- otherwise it is written, also when it cannot be stored as valid Harmony or its prompt is a placeholder: its
  quality columns say so, and the pools leave it out, counted.

``messages_field`` / ``tools_field`` of the blend entry name other columns for the conversation (refused, naming
the setting, for a family that reads none); ``options.text_field`` is the ``text`` family's column.
"""

import gc
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.core.allocator import collector_paused
from nemotron_assets.normalize.base import RowError, Skipped, SourceFields
from nemotron_assets.normalize.families import check_fields, normalize_row
from nemotron_assets.normalize.record import COLUMNS
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.readers import MAX_EXAMPLES, ReadOptions, ReadStats, iter_record_batches

#: Parquet types of the column kinds of `record.COLUMNS`.
ARROW_TYPES = {"string": pa.string(), "float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(),
               "strings": pa.list_(pa.string())}
SCHEMA = pa.schema([(name, ARROW_TYPES[kind]) for name, kind in COLUMNS])


@dataclass
class HarmonyShardStats:
    rows: int = 0  # source rows read
    records: int = 0  # rows written
    dropped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    flags: Counter = field(default_factory=Counter)
    domains: Counter = field(default_factory=Counter)
    difficulty: Counter = field(default_factory=Counter)
    valid: int = 0
    placeholder_prompts: int = 0
    bytes: int = 0
    sha256: str = ""

    def count(self, record: dict) -> None:
        self.records += 1
        self.valid += bool(record["quality_valid_harmony"])
        self.placeholder_prompts += bool(record["quality_placeholder_prompt"])
        self.flags.update(record["quality_flags"])
        self.domains[record["meta_domain"] or "unknown"] += 1
        self.difficulty[record["meta_difficulty_bin"] or "none"] += 1

    def drop(self, reason: str, example: str) -> None:
        self.dropped[reason] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)

    def as_dict(self) -> dict:
        return {"rows": self.rows, "records": self.records, "valid_harmony": self.valid,
                "placeholder_prompts": self.placeholder_prompts,
                "dropped": dict(self.dropped), "dropped_examples": self.examples, "flags": dict(self.flags),
                "domains": dict(self.domains), "difficulty": dict(self.difficulty), "bytes": self.bytes,
                "sha256": self.sha256}


def build_harmony_shard(manifest: SourceManifest, index: int, family: str, source_split: str | None,
                        options: ReadOptions, out: Path, *, messages_field: str | None = None,
                        tools_field: str | None = None) -> HarmonyShardStats:
    """Normalize every row of shard ``index`` into the Parquet file ``out`` (a local path)."""
    fields = SourceFields(messages=messages_field, tools=tools_field, text=options.text_field)
    try:
        check_fields(family, fields)
    except RowError as exc:
        raise InputError(exc.reason, dataset=options.dataset, field=exc.field) from None
    stats = HarmonyShardStats()
    read = ReadStats()
    with pq.ParquetWriter(out, SCHEMA, compression="zstd") as writer, collector_paused():
        for file_range in manifest.shards[index].ranges:
            source = manifest.files[file_range.file_index]
            for batch in iter_record_batches(source, file_range.row_start, file_range.row_end, options, read):
                records = [r for r in (_normalize(family, fields, raw, row, source, source_split, options, stats)
                                       for row, raw in batch) if r is not None]
                if records:
                    writer.write_table(pa.Table.from_pylist(records, schema=SCHEMA))
                del batch, records
                gc.collect(0)  # whatever cycles the batch left (see collector_paused)
    stats.rows = read.rows
    stats.dropped.update(read.dropped)
    stats.examples = (read.examples + stats.examples)[:MAX_EXAMPLES]
    with out.open("rb") as written:
        stats.sha256 = hashlib.file_digest(written, "sha256").hexdigest()
    stats.bytes = out.stat().st_size
    return stats


def _normalize(family: str, fields: SourceFields, raw: dict, row: int, source: SourceFile,
               source_split: str | None, options: ReadOptions, stats: HarmonyShardStats) -> dict | None:
    where = {"line": row + 1} if source.format == "jsonl" else {"row": row}  # as the readers say it
    try:
        record = normalize_row(family, raw, dataset=options.dataset, split=source_split, file=source.url,
                               row_index=row, fields=fields)
    except RowError as exc:
        located = InputError(exc.reason, dataset=options.dataset, path=source.url, field=exc.field, **where)
        if options.on_error != "skip":
            raise located from None
        stats.drop(f"unreadable:{exc.field}", str(located))
        return None
    if isinstance(record, Skipped):
        located = InputError(f"skipped: {record.reason}", dataset=options.dataset, path=source.url, **where)
        stats.drop(f"skipped:{record.reason}", str(located))
        return None
    stats.count(record)
    return record
