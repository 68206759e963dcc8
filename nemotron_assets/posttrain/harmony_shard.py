"""Build one normalized Harmony shard: raw rows of one shard plan entry -> Parquet with DESIGN.md §3 columns.

Rows stream through in batches (memory stays near one batch whatever the shard size). A row its family mapper
cannot read (a required field missing) raises an ``InputError`` naming dataset, file, row and field, or with
``on_error: skip`` is counted under ``unreadable:<field>``; a row that can be read but not stored as valid Harmony
is *kept* with its quality flags: dropping happens in the pools, where it is counted.
"""

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.errors import InputError
from nemotron_assets.normalize.base import RowError
from nemotron_assets.normalize.families import normalize_row
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.readers import MAX_EXAMPLES, ReadOptions, ReadStats, iter_record_batches

_STRING, _FLOAT, _INT, _BOOL, _STRINGS = pa.string(), pa.float64(), pa.int64(), pa.bool_(), pa.list_(pa.string())
SCHEMA = pa.schema([
    ("id", _STRING), ("dataset", _STRING), ("split", _STRING), ("text", _STRING), ("loss_mode", _STRING),
    ("meta_domain", _STRING), ("meta_task", _STRING), ("meta_correctness", _FLOAT), ("meta_pass_k", _INT),
    ("meta_correct_count", _INT), ("meta_eval_best_setting", _STRING), ("meta_difficulty_bin", _STRING),
    ("meta_reasoning_effort", _STRING), ("meta_tool_call_count", _INT), ("meta_tool_result_count", _INT),
    ("meta_tool_names", _STRINGS), ("quality_valid_harmony", _BOOL), ("quality_completion_nonempty", _BOOL),
    ("quality_valid_tool_schema", _BOOL), ("quality_has_tool", _BOOL), ("quality_is_duplicate", _BOOL),
    ("quality_flags", _STRINGS), ("quality_reason", _STRING), ("stats_char_len", _INT),
    ("stats_approx_tokens", _INT), ("source_uuid", _STRING), ("source_license", _STRING),
    ("source_used_in", _STRINGS), ("source_reasoning", _STRING), ("source_capability_target", _STRING),
    ("source_category", _STRING), ("source_generator", _STRING), ("source_tools_id", _STRING),
    ("source_file", _STRING), ("source_row", _INT),
])


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
    bytes: int = 0
    sha256: str = ""

    def count(self, record: dict) -> None:
        self.records += 1
        self.valid += bool(record["quality_valid_harmony"])
        self.flags.update(record["quality_flags"])
        self.domains[record["meta_domain"] or "unknown"] += 1
        self.difficulty[record["meta_difficulty_bin"] or "none"] += 1

    def as_dict(self) -> dict:
        return {"rows": self.rows, "records": self.records, "valid_harmony": self.valid,
                "dropped": dict(self.dropped), "dropped_examples": self.examples, "flags": dict(self.flags),
                "domains": dict(self.domains), "difficulty": dict(self.difficulty), "bytes": self.bytes,
                "sha256": self.sha256}


def build_harmony_shard(manifest: SourceManifest, index: int, family: str, source_split: str | None,
                        options: ReadOptions, out: Path) -> HarmonyShardStats:
    """Normalize every row of shard ``index`` into the Parquet file ``out`` (a local path)."""
    stats = HarmonyShardStats()
    read = ReadStats()
    with pq.ParquetWriter(out, SCHEMA, compression="zstd") as writer:
        for file_range in manifest.shards[index].ranges:
            source = manifest.files[file_range.file_index]
            for batch in iter_record_batches(source, file_range.row_start, file_range.row_end, options, read):
                records = [r for r in (_normalize(family, raw, row, source, source_split, options, stats)
                                       for row, raw in batch) if r is not None]
                if records:
                    writer.write_table(pa.Table.from_pylist(records, schema=SCHEMA))
    stats.rows = read.rows
    stats.dropped.update(read.dropped)
    stats.examples = (read.examples + stats.examples)[:MAX_EXAMPLES]
    data = out.read_bytes()
    stats.bytes, stats.sha256 = len(data), hashlib.sha256(data).hexdigest()
    return stats


def _normalize(family: str, raw: dict, row: int, source: SourceFile, source_split: str | None,
               options: ReadOptions, stats: HarmonyShardStats) -> dict | None:
    try:
        record = normalize_row(family, raw, dataset=options.dataset, split=source_split, file=source.url,
                               row_index=row)
    except RowError as exc:
        where = {"line": row + 1} if source.format == "jsonl" else {"row": row}  # as the readers say it
        located = InputError(exc.reason, dataset=options.dataset, path=source.url, field=exc.field, **where)
        if options.on_error != "skip":
            raise located from None
        stats.dropped[f"unreadable:{exc.field}"] += 1
        if len(stats.examples) < MAX_EXAMPLES:
            stats.examples.append(str(located))
        return None
    stats.count(record)
    return record
