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

**On several cores.** Normalizing is Python (about 14 s for 230 MB of chat rows), so a shard of at least
``PARALLEL_BYTES`` of local files, given ``cores >= 2``, is normalized by ``cores`` worker processes (core/workers.py
``in_order``, forked), and this process only reads and writes:

1. read: the rows of each file range in pieces, unparsed: raw lines of about ``PIECE_BYTES`` (JSONL), or one record
   batch (Parquet), as the one-process reader reads them (sources/readers.py);
2. normalize, in a worker: parse the piece (the reader's own checks, `readers.json_objects`), normalize each row, and
   send back the piece's records as one Arrow table, and for each row read (a JSON object) its line bytes and its
   outcome: written, dropped (counted), or the error it raises;
3. reassemble, here, pieces in order: the batches the one-process reader would have formed (`readers.batched` over the
   rows' line bytes; a Parquet record batch is a batch), each written as one row group of its records, in one
   contiguous table; the pieces' counts are added in order.

So the file, the counts and the examples are byte for byte those of one process, and so is the error a shard fails
with: a bad line raises where the reader would have read it, a row the mapper cannot read where its batch would have
been normalized, an error reading the file after the pieces read before it. The remote files of a shard are read in
one process: a fork must not copy an S3 client.
"""

import gc
import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from itertools import chain, count, groupby
from operator import attrgetter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.core.allocator import collector_paused
from nemotron_assets.core.workers import fork_available, in_order
from nemotron_assets.normalize.base import RowError, Skipped, SourceFields
from nemotron_assets.normalize.families import check_fields, normalize_row
from nemotron_assets.normalize.record import COLUMNS
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile, is_remote
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.plan import FileRange
from nemotron_assets.sources.readers import (
    MAX_EXAMPLES,
    ReadOptions,
    ReadStats,
    batched,
    iter_record_batches,
    json_objects,
    numbered_lines,
    numbered_rows,
    parquet_slices,
)

#: Parquet types of the column kinds of `record.COLUMNS`.
ARROW_TYPES = {"string": pa.string(), "float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(),
               "strings": pa.list_(pa.string())}
SCHEMA = pa.schema([(name, ARROW_TYPES[kind]) for name, kind in COLUMNS])
PARALLEL_BYTES = 16 << 20  # a shard this large (stored bytes) is normalized on several cores
PIECE_BYTES = 2 << 20  # the raw JSONL lines a worker normalizes at a time (1, 2 and 4 MB cost the same CPU)
#: What reading a file may raise (a compressed file that is cut short, a broken Parquet file).
READ_ERRORS = (InputError, OSError, pa.ArrowException)


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

    def add(self, later: "HarmonyShardStats") -> None:
        """Count in the stats of rows normalized after these (the examples stay the first ``MAX_EXAMPLES``)."""
        self.records += later.records
        self.valid += later.valid
        self.placeholder_prompts += later.placeholder_prompts
        for mine, theirs in ((self.dropped, later.dropped), (self.flags, later.flags),
                             (self.domains, later.domains), (self.difficulty, later.difficulty)):
            mine.update(theirs)
        self.examples = (self.examples + later.examples)[:MAX_EXAMPLES]

    def as_dict(self) -> dict:
        return {"rows": self.rows, "records": self.records, "valid_harmony": self.valid,
                "placeholder_prompts": self.placeholder_prompts,
                "dropped": dict(self.dropped), "dropped_examples": self.examples, "flags": dict(self.flags),
                "domains": dict(self.domains), "difficulty": dict(self.difficulty), "bytes": self.bytes,
                "sha256": self.sha256}


@dataclass(frozen=True)
class _Job:
    """What normalizing a row of the shard takes besides the row and its file."""

    family: str
    fields: SourceFields
    source_split: str | None
    options: ReadOptions


def build_harmony_shard(manifest: SourceManifest, index: int, family: str, source_split: str | None,
                        options: ReadOptions, out: Path, *, messages_field: str | None = None,
                        tools_field: str | None = None, cores: int = 1) -> HarmonyShardStats:
    """Normalize every row of shard ``index`` into the Parquet file ``out`` (a local path), on up to ``cores``
    cores."""
    fields = SourceFields(messages=messages_field, tools=tools_field, text=options.text_field)
    try:
        check_fields(family, fields)
    except RowError as exc:
        raise InputError(exc.reason, dataset=options.dataset, field=exc.field) from None
    job = _Job(family, fields, source_split, options)
    stats = HarmonyShardStats()
    read = ReadStats()
    processes = _processes(manifest, index, cores)
    with pq.ParquetWriter(out, SCHEMA, compression="zstd") as writer, collector_paused():
        if processes == 1:
            tables = _normalized_here(manifest, index, job, read, stats)
        else:
            tables = _normalized_in_pieces(manifest, index, job, processes, read, stats)
        with closing(tables):  # an error: the workers end before it goes on
            for table in tables:  # one row group per batch read
                writer.write_table(table)
                del table
                gc.collect(0)  # whatever cycles the batch left (see collector_paused)
    stats.rows = read.rows
    stats.dropped.update(read.dropped)
    stats.examples = (read.examples + stats.examples)[:MAX_EXAMPLES]
    with out.open("rb") as written:
        stats.sha256 = hashlib.file_digest(written, "sha256").hexdigest()
    stats.bytes = out.stat().st_size
    return stats


def _processes(manifest: SourceManifest, index: int, cores: int) -> int:
    """How many processes normalize shard ``index``: ``cores`` when it `spreads_over_cores`, else one, this one."""
    return cores if cores >= 2 and spreads_over_cores(manifest, index) else 1


def spreads_over_cores(manifest: SourceManifest, index: int) -> bool:
    """Whether shard ``index`` is normalized in pieces by worker processes when given two cores or more: it holds at
    least ``PARALLEL_BYTES`` of local files (starting workers takes a few tens of milliseconds)."""
    ranges = manifest.shards[index].ranges
    files = [manifest.files[file_range.file_index] for file_range in ranges]
    if not fork_available() or any(is_remote(source.url) for source in files):
        return False
    stored = sum(source.size * (r.row_end - r.row_start) // max(source.rows, 1) for source, r in zip(files, ranges))
    return stored >= PARALLEL_BYTES


# --- in one process -----------------------------------------------------------------------------------------------
def _normalized_here(manifest: SourceManifest, index: int, job: _Job, read: ReadStats,
                     stats: HarmonyShardStats) -> Iterator[pa.Table]:
    """The records of each batch the reader reads, normalized here, as a table (batches without any left out)."""
    for file_range in manifest.shards[index].ranges:
        source = manifest.files[file_range.file_index]
        for batch in iter_record_batches(source, file_range.row_start, file_range.row_end, job.options, read):
            records = [r for r in (_normalize(job, raw, row, source, stats) for row, raw in batch) if r is not None]
            if records:
                yield pa.Table.from_pylist(records, schema=SCHEMA)
            del batch, records


# --- in pieces, on several cores --------------------------------------------------------------------------------
#: What became of a row read: written (True), dropped and counted (False), the error it raises (``on_error`` not
#: skip), or not normalized (None: the shard fails at an earlier row of its piece).
Outcome = bool | InputError | None


@dataclass
class _Piece:
    """One piece of a file range, normalized by a worker (steps 1 and 2 of the module docstring)."""

    part: int  # which range of the shard
    records: pa.Table  # the records of its rows, in order
    outcomes: list[Outcome] = field(default_factory=list)  # of each row read (a JSON object), in order
    sizes: list[int] = field(default_factory=list)  # their line bytes (JSONL)
    read_error: BaseException | None = None  # what reading raised after these rows (a bad line, the file)
    read: ReadStats = field(default_factory=ReadStats)
    stats: HarmonyShardStats = field(default_factory=HarmonyShardStats)


def _normalized_in_pieces(manifest: SourceManifest, index: int, job: _Job, processes: int, read: ReadStats,
                          stats: HarmonyShardStats) -> Iterator[pa.Table]:
    """What `_normalized_here` gives, normalized by ``processes`` workers a piece at a time, and reassembled."""
    pieces = in_order(_normalize_piece, _pieces(manifest, index, job), processes, start="fork")
    with closing(pieces):
        for part, normalized in groupby(_counted(pieces, read, stats), key=attrgetter("part")):
            source = manifest.files[manifest.shards[index].ranges[part].file_index]
            yield from _reassembled(normalized, source, job.options)


def _pieces(manifest: SourceManifest, index: int, job: _Job) -> Iterator[tuple]:
    """`_normalize_piece`'s arguments for each piece of the shard, in order. Reading ends at the first error: it
    goes to the workers as a piece of its own, raised in its turn."""
    for part, file_range in enumerate(manifest.shards[index].ranges):
        source = manifest.files[file_range.file_index]
        errors: list[BaseException] = []
        for first_row, rows in _read_in_pieces(source, file_range, job.options, errors):
            yield job, part, source, first_row, rows
        if errors:
            yield job, part, source, file_range.row_end, None, errors[0]
            return


def _read_in_pieces(source: SourceFile, file_range: FileRange, options: ReadOptions,
                    errors: list[BaseException]) -> Iterator[tuple[int, list[bytes] | pa.RecordBatch]]:
    """(first row, rows) of each piece of a file range: raw lines of about ``PIECE_BYTES``, or a record batch.
    What reading raises goes to ``errors``, after the piece of the rows read before it."""
    if source.format == "parquet":
        yield from _until_error(parquet_slices(source, file_range.row_start, file_range.row_end, options), errors)
        return
    lines = _until_error(numbered_lines(source, file_range.row_start, file_range.row_end, options), errors)
    for piece in batched((((row, line), len(line)) for row, line in lines), PIECE_BYTES):
        yield piece[0][0], [line for _, line in piece]


def _until_error(items: Iterator, errors: list[BaseException]) -> Iterator:
    """``items``, until reading them raises one of ``READ_ERRORS``: it goes to ``errors``, and the items end."""
    try:
        yield from items
    except READ_ERRORS as exc:
        errors.append(exc)


def _normalize_piece(job: _Job, part: int, source: SourceFile, first_row: int,
                     rows: list[bytes] | pa.RecordBatch | None, read_error: BaseException | None = None) -> _Piece:
    """In a worker: parse and normalize one piece (step 2 of the module docstring). A piece without rows (None)
    only carries the error reading the file ended with."""
    piece = _Piece(part, SCHEMA.empty_table(), read_error=read_error)
    if rows is None:
        return piece
    records: list[dict] = []
    with collector_paused():
        if source.format == "parquet":
            read = ((row, raw, 0) for row, raw in numbered_rows(first_row, rows, piece.read))
        else:
            read = json_objects(zip(count(first_row), rows), source, job.options, piece.read)
        failed = False  # a row the mapper could not read: the shard fails there, the rows after it are not normalized
        try:
            for row, raw, size in read:
                outcome = None if failed else _outcome(job, raw, row, source, piece.stats, records)
                failed = failed or isinstance(outcome, InputError)
                piece.outcomes.append(outcome)
                piece.sizes.append(size)
        except InputError as exc:  # a bad line, on_error not skip
            piece.read_error = exc
        piece.records = pa.Table.from_pylist(records, schema=SCHEMA)
        del records
    gc.collect(0)
    return piece


def _outcome(job: _Job, raw: dict, row: int, source: SourceFile, stats: HarmonyShardStats,
             records: list[dict]) -> Outcome:
    """Normalize one row: its record goes to ``records``."""
    try:
        record = _normalize(job, raw, row, source, stats)
    except InputError as exc:
        return exc
    if record is not None:
        records.append(record)
    return record is not None


def _counted(pieces: Iterable[_Piece], read: ReadStats, stats: HarmonyShardStats) -> Iterator[_Piece]:
    """The pieces, their counts added to the shard's as each arrives."""
    for piece in pieces:
        read.add(piece.read)
        stats.add(piece.stats)
        yield piece


def _reassembled(pieces: Iterable[_Piece], source: SourceFile, options: ReadOptions) -> Iterator[pa.Table]:
    """The tables `_normalized_here` writes for one file range, from its pieces in order (step 3 of the module
    docstring)."""
    records = _RecordQueue()

    def rows_of_each_piece() -> Iterator[list[tuple[Outcome, int]]]:
        for piece in pieces:
            records.put(piece.records)
            yield list(zip(piece.outcomes, piece.sizes))
            if piece.read_error is not None:
                raise piece.read_error

    if source.format == "parquet":  # a piece is one record batch: one batch
        batches = ([outcome for outcome, _ in rows] for rows in rows_of_each_piece())
    else:
        batches = batched(chain.from_iterable(rows_of_each_piece()), options.batch_bytes)
    for outcomes in batches:
        failed = next((outcome for outcome in outcomes if isinstance(outcome, InputError)), None)
        if failed is not None:
            raise failed
        if written := sum(outcome is True for outcome in outcomes):
            yield records.take(written)


class _RecordQueue:
    """Records received, waiting for the batch they belong to."""

    def __init__(self) -> None:
        self._table = SCHEMA.empty_table()

    def put(self, table: pa.Table) -> None:
        self._table = pa.concat_tables([self._table, table])

    def take(self, count: int) -> pa.Table:
        """The next ``count`` records, in one chunk: what ``from_pylist`` of the batch gives (the writer cuts the same
        pages)."""
        taken, self._table = self._table.slice(0, count), self._table.slice(count)
        return taken.combine_chunks()


# --- one row ------------------------------------------------------------------------------------------------------
def _normalize(job: _Job, raw: dict, row: int, source: SourceFile, stats: HarmonyShardStats) -> dict | None:
    """The row's record, or None when it is dropped (counted in ``stats``); with ``on_error`` not skip, a row the
    mapper cannot read raises."""
    options = job.options
    where = {"line": row + 1} if source.format == "jsonl" else {"row": row}  # as the readers say it
    try:
        record = normalize_row(job.family, raw, dataset=options.dataset, split=job.source_split, file=source.url,
                               row_index=row, fields=job.fields)
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
