"""Read the documents of a row range of one file, in order, in batches.

A dataset reads one text field (each document a string) or several (``ReadOptions.text_field`` a tuple, Megatron's
``--json-keys``: each document a tuple of strings, one per field, so the fields' documents stay row for row).

Each bad row either raises an ``InputError`` naming dataset, file, line (JSONL, 1-based) or row (Parquet,
0-based) and field, or, with ``on_error="skip"``, is counted under a reason in ``ReadStats.dropped`` and
skipped. Rows are never dropped silently. Reading is streaming: memory stays near one batch whatever the
file size.
"""

import gzip
import io
import operator
import queue
import threading
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

import blake3
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile, open_decompressed, open_raw

READ_CHUNK = 8 << 20
LINE_BUFFER = 1 << 20  # read-ahead of the line iterator: the 8 KiB default costs twice the system calls
DEFAULT_BATCH_BYTES = 8 << 20
PARQUET_BATCH_ROWS = 4096
MAX_EXAMPLES = 5
PARSE_LINES = 64  # lines parsed in one C call: ~1 ms of 3 KB rows
LINE_START_EVERY = 32 << 20  # an uncompressed file's manifest records a line start per this many bytes

# Reasons a row can be dropped with on_error="skip" (metadata keys, stable).
MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
NON_STRING_TEXT = "non_string_text"


@dataclass
class ReadStats:
    rows: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)  # where the first skipped rows were, and why

    def add(self, later: "ReadStats") -> None:
        """Count in the stats of the rows read after these (the examples stay the first ``MAX_EXAMPLES``)."""
        self.rows += later.rows
        self.dropped.update(later.dropped)
        self.examples = (self.examples + later.examples)[:MAX_EXAMPLES]


@dataclass(frozen=True)
class ReadOptions:
    dataset: str
    text_field: str | tuple[str, ...] = "text"  # several fields: each row's document is a tuple of their texts
    on_error: str = "raise"
    storage_options: dict | None = None
    batch_bytes: int = DEFAULT_BATCH_BYTES


def _decompress_errors() -> tuple[type[BaseException], ...]:
    return (gzip.BadGzipFile, EOFError, zlib.error, zstandard.ZstdError)


def iter_lines(source: SourceFile, options: ReadOptions, skip: int = 0) -> Iterator[bytes]:
    """Every line of a JSONL file from line ``skip`` on (0-based), decompressed, streaming.

    A line keeps its ``\\n`` (the last one may have none): JSON parsing reads it as whitespace, and cutting it off
    would copy every line once more."""
    with _opened_at_row(source, options, skip) as (decompressed, skip):
        stream = io.BufferedReader(decompressed, LINE_BUFFER)
        try:
            yield from _lines_after(stream, skip)
        except _decompress_errors() as exc:
            raise InputError(f"cannot decompress ({source.compression}): {exc}", dataset=options.dataset,
                             path=source.url) from None


@contextmanager
def _opened_at_row(source: SourceFile, options: ReadOptions, row: int) -> Iterator[tuple[BinaryIO, int]]:
    """The file's decompressed stream, positioned at the start of line ``row`` or of an earlier line, and how many
    lines are still to skip.

    An uncompressed file's manifest entry knows where some of its lines start (``SourceFile.line_starts``, recorded
    by the pass that counted and hashed it): the stream seeks to the last such line at or before ``row``, so a
    shard three quarters into a file does not count its way through the first three quarters. A recorded start
    that is not right after a newline (the file changed since) is not trusted: then every line is counted."""
    with open_raw(source.url, options.storage_options) as raw:
        first, offset = _line_start_before(source, row)
        if offset:
            if not _newline_before(raw, offset):
                first, offset = 0, 0
            raw.seek(offset)
        yield open_decompressed(raw, source.compression), row - first


def _line_start_before(source: SourceFile, row: int) -> tuple[int, int]:
    """(line, byte offset) of the last recorded line start at or before ``row``; (0, 0) without one."""
    if source.compression is not None:
        return 0, 0
    starts = [start for start in source.line_starts if start[0] <= row]
    return tuple(starts[-1]) if starts else (0, 0)


def _newline_before(raw: BinaryIO, offset: int) -> bool:
    raw.seek(offset - 1)
    return raw.read(1) == b"\n"


def _lines_after(stream: BinaryIO, skip: int) -> Iterator[bytes]:
    """The lines of ``stream`` after its first ``skip`` lines.

    The skipped lines are only counted, a block at a time (``bytes.count``), never cut into line objects: a shard
    that starts three quarters into a file would otherwise split and throw away three quarters of the file."""
    head = _skip_lines(stream, skip)  # what the block holding the last skipped line has after it
    if head is None:
        return
    if head:
        lines = head.split(b"\n")
        partial = lines.pop()  # the start of a line the stream goes on with (b"" when head ends with a newline)
        yield from lines
        rest = partial + stream.readline()
        if rest:
            yield rest
    yield from stream  # a buffered reader's own line iterator: one copy per line, in C


def count_rows_and_hash(source: SourceFile, options: ReadOptions,
                        line_starts: list[tuple[int, int]] | None = None) -> tuple[int, str]:
    """Rows of the file and the BLAKE3 hash of its stored bytes (``content_digest``), in one streaming pass.

    The hash is computed in a second thread (``_ThreadedDigest``) while this one reads, decompresses and counts.
    For an uncompressed file, ``line_starts`` (when given) receives ``(line, byte offset)`` of a line start about
    every ``LINE_START_EVERY`` bytes, from the same pass: where a reader of the file can seek to
    (``_opened_at_row``)."""
    if source.format == "parquet":
        return _parquet_rows(source, options), _hash_file(source, options)
    rows, last, position, next_start = 0, b"\n", 0, LINE_START_EVERY
    record = line_starts is not None and source.compression is None
    with open_raw(source.url, options.storage_options) as raw, _ThreadedDigest() as digest:
        hashing = _HashingReader(raw, digest)
        stream = open_decompressed(hashing, source.compression)
        try:
            while chunk := stream.read(READ_CHUNK):
                rows += count_newlines(chunk)
                last = chunk[-1:]
                position += len(chunk)
                if record and position >= next_start and (end := chunk.rfind(b"\n")) >= 0:
                    line_starts.append((rows, position - len(chunk) + end + 1))
                    next_start = position + LINE_START_EVERY
        except _decompress_errors() as exc:
            raise InputError(f"cannot decompress ({source.compression}): {exc}", dataset=options.dataset,
                             path=source.url) from None
        hashing.drain()
    if last != b"\n":
        rows += 1  # a last line without a trailing newline is still a row
    if record and line_starts and line_starts[-1][0] >= rows:
        line_starts.pop()  # the end of the file: no line starts there
    return rows, digest.hexdigest()


def count_newlines(data: bytes) -> int:
    """How many ``\\n`` bytes ``data`` holds.

    numpy compares a block with vector instructions; ``bytes.count`` looks at one byte at a time: on 1 GB of JSONL
    read in 8 MB blocks, reading and counting took 0.27 s this way against 0.46 s with ``bytes.count``."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 0x0A))


def content_digest() -> "blake3.blake3":
    """A new hash of a source file's bytes, whose hex digest is the file's fingerprint (``blake3:<hex>``).

    BLAKE3, not sha256: the fingerprint is only compared with itself (is this the file a shard was built from?),
    and it is computed over every input byte on every ``source_split``, before any shard can start. On 1 GB of
    JSONL here, sha256 took 0.63 s (with the CPU's SHA instructions) and BLAKE3 0.17 s on one core, so the
    split's pass became as fast as reading and counting the lines (bench/README.md)."""
    return blake3.blake3()


class _ThreadedDigest:
    """``content_digest`` of the byte strings given to ``update``, computed in a thread of its own, in order.

    The hash lets go of the GIL while it hashes a large buffer, so the caller goes on reading meanwhile. At most
    ``QUEUED`` buffers wait (bounded memory); leaving the ``with`` block ends the thread, also after an error."""

    QUEUED = 4

    def __init__(self) -> None:
        self._digest = content_digest()
        self._queue: queue.Queue = queue.Queue(maxsize=self.QUEUED)
        self._thread = threading.Thread(target=self._run, name="content_digest", daemon=True)
        self._result = ""

    def __enter__(self) -> "_ThreadedDigest":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._queue.put(None)
        self._thread.join()
        self._result = self._digest.hexdigest()

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            self._digest.update(data)

    def update(self, data: bytes) -> None:
        if data:
            self._queue.put(data)

    def hexdigest(self) -> str:
        """The digest of everything given, once the ``with`` block has ended."""
        return self._result


class _HashingReader:
    """File-like wrapper that hashes every byte read through it."""

    def __init__(self, raw: BinaryIO, digest) -> None:
        self._raw, self._digest = raw, digest

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._digest.update(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        while self.read(READ_CHUNK):
            pass

    @property
    def closed(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def flush(self) -> None:
        pass


def _hash_file(source: SourceFile, options: ReadOptions) -> str:
    digest = content_digest()
    with open_raw(source.url, options.storage_options) as raw:
        while chunk := raw.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _parquet_rows(source: SourceFile, options: ReadOptions) -> int:
    with open_raw(source.url, options.storage_options) as raw:
        try:
            return pq.ParquetFile(raw).metadata.num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", dataset=options.dataset,
                             path=source.url) from None


def iter_text_batches(source: SourceFile, row_start: int, row_end: int, options: ReadOptions,
                      stats: ReadStats) -> Iterator[list[str]]:
    """Documents of rows ``[row_start, row_end)``, in order, in batches of about ``batch_bytes``."""
    if source.format == "parquet":
        yield from _parquet_batches(source, row_start, row_end, options, stats)
    else:
        yield from _jsonl_batches(source, row_start, row_end, options, stats)


def numbered_lines(source: SourceFile, row_start: int, row_end: int,
                   options: ReadOptions) -> Iterator[tuple[int, bytes]]:
    """(row, line) of rows ``[row_start, row_end)`` of a JSONL file, each line with its newline (`iter_lines`)."""
    with closing(iter_lines(source, options, skip=row_start)) as lines:
        yield from zip(range(row_start, row_end), lines)  # zip stops before reading past row_end


def json_objects(lines: Iterable[tuple[int, bytes]], source: SourceFile, options: ReadOptions,
                 stats: ReadStats) -> Iterator[tuple[int, dict, int]]:
    """(row, JSON object, line bytes) of each of ``source``'s numbered lines; bad lines raise or are counted."""
    for row, line in lines:
        stats.rows += 1
        record = _json_object(line, row, source, options, stats)
        if record is not None:
            yield row, record, len(line)


def _json_object(line: bytes, row: int, source: SourceFile, options: ReadOptions, stats: ReadStats) -> dict | None:
    """The line's JSON object, or None when it is not one (raised, or counted when on_error is skip)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        _bad_row(options, stats, source, row, *_json_problem(line))
        return None
    if not isinstance(record, dict):
        _bad_row(options, stats, source, row, NOT_AN_OBJECT, f"expected a JSON object, got {type(record).__name__}")
        return None
    return record


def batched(sized_items: Iterator[tuple[object, int]], limit: int) -> Iterator[list]:
    """Group items (each with its size in bytes) into lists of about ``limit`` bytes, in order."""
    batch: list = []
    batch_bytes = 0
    for item, size in sized_items:
        batch.append(item)
        batch_bytes += size
        if batch_bytes >= limit:
            yield batch
            batch, batch_bytes = [], 0
    if batch:
        yield batch


def _jsonl_batches(source: SourceFile, row_start: int, row_end: int, options: ReadOptions,
                   stats: ReadStats) -> Iterator[list[str]]:
    """The texts of rows ``[row_start, row_end)`` in batches of about ``batch_bytes`` of JSONL.

    The lines come in blocks (``_line_blocks``), and a block whose every line is an object with a string text field
    (the usual case) is parsed and looked up by ``map`` in C: no Python code runs per row, which for short rows is
    most of the cost of reading. Any other block is read line by line, and each row that is not such an object
    goes to ``_refused_row``, which says what is wrong with it.
    """
    key, limit = options.text_field, options.batch_bytes
    batch: list[str] = []
    batch_bytes, row = 0, row_start
    for lines, size in _line_blocks(source, row_start, row_end, options):
        texts = _texts_of_good_block(lines, key)
        if texts is None:
            texts = _texts_line_by_line(lines, row, source, options, stats)
        stats.rows += len(lines)
        row += len(lines)
        batch.extend(texts)
        batch_bytes += size
        if batch_bytes >= limit and batch:
            yield batch
            batch, batch_bytes = [], 0
    if batch:
        yield batch


def _texts_of_good_block(lines: list[bytes], key: str) -> list[str] | None:
    """Every line's text field, or None when some line is not an object with a string text field.

    Parsed ``PARSE_LINES`` lines per ``map``: a C call holds the GIL to its end, and the shard's other threads
    (tokenizers, writer) need it for a moment between their own long calls."""
    texts: list = []
    field = _text_of(key)
    try:
        for start in range(0, len(lines), PARSE_LINES):
            texts.extend(map(field, map(orjson.loads, lines[start:start + PARSE_LINES])))
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):  # not JSON, no such key, not an object
        return None
    if isinstance(key, str):
        return texts if all(type(text) is str for text in texts) else None
    return texts if all(map(_is_text, texts)) else None


def _text_of(key: str | tuple[str, ...]):
    """The function that takes a parsed row's document: one field's value, or the tuple of several fields'."""
    if isinstance(key, str):
        return operator.itemgetter(key)
    return lambda record: tuple(record[name] for name in key)


def _is_text(value: object) -> bool:
    """A document as read: a string, or a tuple of strings (several text fields)."""
    return type(value) is str or (type(value) is tuple and all(type(text) is str for text in value))


def _texts_line_by_line(lines: list[bytes], first_row: int, source: SourceFile, options: ReadOptions,
                        stats: ReadStats) -> list[str]:
    """The texts of the good rows of a block; every other row raises or is counted (``_refused_row``)."""
    field, texts = _text_of(options.text_field), []
    for row, line in enumerate(lines, start=first_row):
        try:
            text = field(orjson.loads(line))
        except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
            text = None
        if _is_text(text):
            texts.append(text)
        else:
            _refused_row(line, row, source, options, stats)
    return texts


def _line_blocks(source: SourceFile, row_start: int, row_end: int, options: ReadOptions
                 ) -> Iterator[tuple[list[bytes], int]]:
    """The lines of rows ``[row_start, row_end)`` (without their newlines) in blocks, each with its bytes.

    A block is the complete lines of one read of ``min(READ_CHUNK, batch_bytes)`` bytes (with the partial line
    the read before left): ``bytes.split`` cuts them in C. The rows before ``row_start`` are counted, never cut.
    """
    chunk_bytes = max(1, min(READ_CHUNK, options.batch_bytes))
    left = row_end - row_start
    with _opened_at_row(source, options, row_start) as (stream, skip):
        try:
            chunk = _skip_lines(stream, skip)  # the rest of the block that held the last skipped line
            if chunk is None:
                return
            pending: list[bytes] = []  # the start of a line whose end has not been read yet
            while left > 0:
                chunk = chunk or stream.read(chunk_bytes)
                if not chunk:
                    break
                if b"\n" not in chunk:
                    pending.append(chunk)
                    chunk = b""
                    continue
                lines = chunk.split(b"\n")
                chunk = b""
                if pending:  # the line the reads before began: joined alone, the block is never copied whole
                    lines[0] = b"".join([*pending, lines[0]])
                partial = lines.pop()
                pending = [partial] if partial else []
                if len(lines) > left:
                    del lines[left:]
                left -= len(lines)
                yield lines, sum(map(len, lines)) + len(lines)
            last = b"".join(pending)
            if left > 0 and last:  # a last line without a trailing newline is still a row
                yield [last], len(last)
        except _decompress_errors() as exc:
            raise InputError(f"cannot decompress ({source.compression}): {exc}", dataset=options.dataset,
                             path=source.url) from None


def _skip_lines(stream: BinaryIO, skip: int) -> bytes | None:
    """Read past ``skip`` lines, counting them a block at a time; what was read after them (None: the file ended
    first)."""
    while skip:
        block = stream.read(READ_CHUNK)
        if not block:
            return None
        newlines = count_newlines(block)
        if newlines < skip:
            skip -= newlines
            continue
        end = -1
        for _ in range(skip):
            end = block.find(b"\n", end + 1)
        return block[end + 1:]
    return b""


def _refused_row(line: bytes, row: int, source: SourceFile, options: ReadOptions, stats: ReadStats) -> None:
    """Raise, or count under its reason, a row without a string text field: parse it again to say why (the first
    text field that is missing or not a string, when there are several)."""
    record = _json_object(line, row, source, options, stats)
    if record is None:
        return
    for key in _fields(options):
        if key not in record:
            _bad_row(options, stats, source, row, MISSING_FIELD, "missing", field_name=key)
            return
        if type(record[key]) is not str:
            _bad_row(options, stats, source, row, NON_STRING_TEXT,
                     f"expected a string, got {_json_type(record[key])}", field_name=key)
            return


def _fields(options: ReadOptions) -> tuple[str, ...]:
    """The text fields a dataset reads, one or several."""
    key = options.text_field
    return (key,) if isinstance(key, str) else key


def iter_record_batches(source: SourceFile, row_start: int, row_end: int, options: ReadOptions,
                        stats: ReadStats) -> Iterator[list[tuple[int, dict]]]:
    """Whole rows ``[row_start, row_end)`` as ``(row index in the file, dict)``, in order, in batches.

    For post-training data, where a mapper needs every field of a row, not one text column.
    """
    if source.format == "parquet":
        for first_row, record_batch in parquet_slices(source, row_start, row_end, options):
            yield numbered_rows(first_row, record_batch, stats)
        return
    rows = json_objects(numbered_lines(source, row_start, row_end, options), source, options, stats)
    yield from batched((((row, record), size) for row, record, size in rows), options.batch_bytes)


def parquet_slices(source: SourceFile, row_start: int, row_end: int,
                   options: ReadOptions) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(first row, record batch) of rows ``[row_start, row_end)`` of a Parquet file: its record batches of
    ``PARQUET_BATCH_ROWS`` rows, the first and last cut at the range's ends."""
    with open_raw(source.url, options.storage_options) as raw:
        parquet = pq.ParquetFile(raw)
        row = 0
        for record_batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            start, end = max(row_start, row), min(row_end, row + record_batch.num_rows)
            if start < end:
                yield start, record_batch.slice(start - row, end - start)
            row += record_batch.num_rows
            if row >= row_end:
                return


def numbered_rows(first_row: int, record_batch: pa.RecordBatch, stats: ReadStats) -> list[tuple[int, dict]]:
    """(row, dict) of each row of a record batch that starts at row ``first_row``."""
    rows = record_batch.to_pylist()
    stats.rows += len(rows)
    return list(zip(range(first_row, first_row + len(rows)), rows))


def _json_problem(line: bytes) -> tuple[str, str]:
    """(reason, message) for a line that is not JSON, described without its newline."""
    line = line[:-1] if line.endswith(b"\n") else line
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return INVALID_UTF8, f"invalid UTF-8 at byte {bad.start} of the line"
    if not line.strip():
        return MALFORMED_JSON, "blank line (JSONL needs one JSON object per line)"
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return MALFORMED_JSON, f"malformed JSON: {exc.msg} (column {exc.colno})"
    return MALFORMED_JSON, "malformed JSON"  # not reached: a line that parses without its newline parses with it


def _json_type(value: object) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def _bad_row(options: ReadOptions, stats: ReadStats, source: SourceFile, row: int, reason: str,
             message: str, field_name: str | None = None, parquet: bool = False) -> None:
    """Raise, or count the row under ``reason`` (keeping the first few locations) when on_error is skip."""
    where = {"row": row} if parquet else {"line": row + 1}
    error = InputError(message, dataset=options.dataset, path=source.url, field=field_name, **where)
    if options.on_error != "skip":
        raise error
    stats.dropped[reason] += 1
    if len(stats.examples) < MAX_EXAMPLES:
        stats.examples.append(str(error))


def _is_string_type(column_type: pa.DataType) -> bool:
    """A Parquet UTF-8 column, whichever Arrow type its writer recorded (string, large, view, dictionary)."""
    if pa.types.is_dictionary(column_type):
        column_type = column_type.value_type
    return (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)
            or pa.types.is_string_view(column_type))


def _parquet_batches(source: SourceFile, row_start: int, row_end: int, options: ReadOptions,
                     stats: ReadStats) -> Iterator[list[str]]:
    with open_raw(source.url, options.storage_options) as raw:
        parquet = pq.ParquetFile(raw)
        _check_text_column(parquet.schema_arrow, source, options)
        first = 0
        for group in range(parquet.num_row_groups):
            count = parquet.metadata.row_group(group).num_rows
            lo, hi = max(row_start, first), min(row_end, first + count)
            if lo < hi:
                yield from _parquet_group_texts(parquet, group, first, lo, hi, source, options, stats)
            first += count
            if first >= row_end:
                break


def check_parquet_text_column(source: SourceFile, options: ReadOptions) -> None:
    """Fail now, from the file's footer alone, if the text column is missing or not a string column: before any
    data of the dataset is read or hashed."""
    with open_raw(source.url, options.storage_options) as raw:
        try:
            parquet = pq.ParquetFile(raw)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", dataset=options.dataset,
                             path=source.url) from None
        if parquet.metadata.num_rows == 0:
            return  # an empty file is reported as empty (sources/manifest.py), whatever its columns' types
        _check_text_column(parquet.schema_arrow, source, options)


def _check_text_column(schema: pa.Schema, source: SourceFile, options: ReadOptions) -> None:
    for key in _fields(options):
        if key not in schema.names:
            raise InputError(f"no such column (columns: {', '.join(schema.names)})", dataset=options.dataset,
                             path=source.url, field=key)
        column_type = schema.field(key).type
        if not _is_string_type(column_type):
            raise InputError(f"column type is {column_type}, expected string", dataset=options.dataset,
                             path=source.url, field=key)


def _parquet_group_texts(parquet: pq.ParquetFile, group: int, first: int, lo: int, hi: int, source: SourceFile,
                         options: ReadOptions, stats: ReadStats) -> Iterator[list[str]]:
    """Rows ``[lo, hi)`` of one row group (which starts at row ``first``), streamed in record batches."""
    keys = _fields(options)
    row = first
    for record_batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[group], columns=list(keys)):
        start, end = max(lo, row), min(hi, row + record_batch.num_rows)
        if start < end:
            columns = [column.slice(start - row, end - start).to_pylist() for column in record_batch.columns]
            values = columns[0] if isinstance(options.text_field, str) else list(zip(*columns))
            stats.rows += len(values)
            batch = []
            for offset, text in enumerate(values):
                if text is None or (type(text) is tuple and None in text):
                    null = next(key for key, column in zip(keys, columns) if column[offset] is None)
                    _bad_row(options, stats, source, start + offset, NON_STRING_TEXT, "null", field_name=null,
                             parquet=True)
                    continue
                batch.append(text)
            if batch:
                yield batch
        row += record_batch.num_rows
        if row >= hi:
            break
