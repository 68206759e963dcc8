"""The samples file of one Harmony shard (``sft_samples``' output): an Arrow IPC file of `SCHEMA` rows.

Why Arrow IPC (the Feather v2 file format) and not Parquet like the other outputs: a samples file is an
intermediate that only the next two steps read, and nearly all of its bytes are two list columns of tokens. Parquet
encodes a list column value by value (a repetition and a definition level per token, then the values); Arrow IPC
stores the same Arrow buffers the step already holds (offsets, values), each compressed with zstd. Measured on the
30,000-conversation bench's samples file (35,640 samples, 19.4 M tokens; bench/README.md): writing 0.45 -> 0.24
CPU-s, reading the two token columns 0.40 -> 0.08 CPU-s, 23.0 MB either way. Both packed shards of that file read
rows from across all of it (``first_fit_shuffle``), so the read is paid once per packed shard.

The file holds one record batch per rendered batch (`samples_step.BATCH_ROWS` conversations), in shard order; the
same table gives the same bytes. Any Arrow reader opens it: ``pyarrow.ipc.open_file``, ``pyarrow.feather``,
``polars.read_ipc``. Readers here take only the columns they need (`batches` with ``columns``): the others are
neither read nor decompressed (the ``sample`` column alone reads 75 KB of that 22.8 MB file).
"""

from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

SUFFIX = ".arrow"
SCHEMA = pa.schema([
    ("id", pa.string()), ("dataset", pa.string()), ("row", pa.int64()), ("sample", pa.int32()),
    ("user_turn", pa.int32()), ("split_key", pa.string()), ("used_in", pa.list_(pa.string())),
    ("license", pa.string()), ("source_row", pa.int64()), ("length", pa.int32()), ("trained", pa.int32()),
    ("input_ids", pa.list_(pa.int32())), ("assistant_mask", pa.list_(pa.uint8())),
    ("masked_spans", pa.list_(pa.int32())),
])
#: The columns the plan reads (everything but the token arrays).
METADATA_COLUMNS = [name for name in SCHEMA.names if name not in ("input_ids", "assistant_mask", "masked_spans")]
_WRITE_OPTIONS = ipc.IpcWriteOptions(compression="zstd")


def writer(path: Path) -> ipc.RecordBatchFileWriter:
    """A writer of a new samples file at the local `path` (a context manager: the footer is written on exit)."""
    return ipc.new_file(str(path), SCHEMA, options=_WRITE_OPTIONS)


def batches(source, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The file's record batches in order, each holding `columns` (default: all) by name. ``source``: a local path
    or a seekable binary file (`Storage.open`)."""
    file = reader(source, columns)
    for index in range(file.num_record_batches):
        yield file.get_batch(index)


def row_counts(source) -> list[int]:
    """Rows of each record batch, in order (only a small column is read): lets a reader skip the batches it does
    not need (``reader(...).get_batch(i)``)."""
    return [batch.num_rows for batch in batches(source, ["sample"])]


def file_schema(source) -> pa.Schema:
    """The schema the file declares."""
    return ipc.open_file(source).schema


def reader(source, columns: Sequence[str] | None = None) -> ipc.RecordBatchFileReader:
    """A reader of `columns` (default: all), batch by batch (``get_batch(i)``). A column the file does not have is
    an error naming it (the file was not written by this code: its receipt's checksum would have said so first)."""
    if isinstance(source, Path):
        source = str(source)
    whole = ipc.open_file(source)
    if columns is None:
        return whole
    missing = [name for name in columns if whole.schema.get_field_index(name) < 0]
    if missing:
        raise RuntimeError(f"not a samples file: it has no column {', '.join(missing)}")
    indices = sorted(whole.schema.get_field_index(name) for name in columns)
    return ipc.open_file(source, options=ipc.IpcReadOptions(included_fields=indices))
