"""Packed SFT files, as Megatron-Bridge reads them: Parquet shards, the legacy ``.npy``, packing metadata, manifest.

Layout under ``<root>/<blend>/sft/`` (the names below; the lead's layout code joins them)::

    <split>/shard_NNNNN.parquet           one row per bin (PACKED_SCHEMA), zstd, row groups of 1,000 bins
    <split>/.meta/shard_NNNNN.samples.parquet  one row per sample: (bin, offset) -> id, sample, dataset, source row
    <split>.npy                           with ``formats: [parquet, npy]``: every bin of the split, one file
    manifest.json                         per split: files, samples, bins, tokens, drops, licenses; hashes, EOS id
    packing_metadata.json                 Bridge's packing metadata, one dict per split (``pad_cu_seqlens``)

**Parquet** (Bridge's ``GPTSFTPackedParquetDataset``, ``src/megatron/bridge/data/packing/parquet.py``): columns
``input_ids list<int32>``, ``loss_mask list<uint8>``, ``seq_start_id list<int32>``; Bridge needs only these three
names and reads each cell with ``as_py()``. A folder spec makes Bridge read every ``*.parquet``/``*.pq`` directly in
it and reject a file without those columns, so a split's folder holds only its packed shards (the samples listings
and receipts are in hidden subfolders): Bridge may be given ``<split>/`` or the glob `BRIDGE_SHARD_GLOB`
(``<split>/shard_?????.parquet``).

**npy** (Bridge's ``GPTSFTPackedDataset``, ``src/megatron/bridge/data/packing/gpt_sft.py``, loads it through
``safe_load_npy`` in ``src/megatron/bridge/utils/safe_pickle.py``): a NumPy object array of dicts
``{"input_ids": [int], "loss_mask": [int], "seq_start_id": [int]}``, the layout NeMo's ``fill_packing_strategy``
produces. The values are plain lists: Bridge computes ``seq_start_id + [len(input_ids)]``, which on a NumPy array
would silently add instead of append. Bridge's restricted unpickler accepts only builtins, ``numpy.ndarray``,
``numpy.dtype``, ``numpy.core.multiarray._reconstruct`` / ``numpy._core.multiarray._reconstruct`` and
``_codecs.encode``. ``np.save`` under NumPy 2 names ``numpy._core.multiarray``, which NumPy releases before 1.26
cannot import; ``numpy.core.multiarray._reconstruct`` loads under every NumPy 1.x and, without a warning, 2.x (kept
there for old pickles). So we write the pickle ourselves, streaming, with protocol 3 opcodes only::

    npy header 1.0       b"\\x93NUMPY\\x01\\x00", u16 header length, "{'descr': '|O', 'fortran_order': False,
                         'shape': (N,), }" padded with spaces and "\\n" (numpy.lib.format.write_array_header_1_0)
    PROTO 3
    GLOBAL numpy.core.multiarray _reconstruct  GLOBAL numpy ndarray  BININT1 0 TUPLE1  SHORT_BINBYTES b"b"
    TUPLE3 REDUCE                                         -> an empty array: _reconstruct(ndarray, (0,), b"b")
    MARK BININT1 1                                        -> its __setstate__ tuple: version 1,
         BININT N TUPLE1                                     shape (N,),
         GLOBAL numpy dtype BINUNICODE "O8" NEWFALSE NEWTRUE TUPLE3 REDUCE
         MARK BININT1 3 BINUNICODE "|" NONE NONE NONE BININT -1 BININT -1 BININT1 63 TUPLE BUILD
                                                             dtype("O") with its state,
         NEWFALSE                                            not Fortran order,
         EMPTY_LIST (MARK bin*1000 APPENDS)*                 the bins, 1,000 per APPENDS (as pickle does)
    TUPLE BUILD STOP
    bin := EMPTY_DICT MARK
             BINUNICODE "input_ids"    EMPTY_LIST MARK (BININT id)*  APPENDS      BININT  = "J" + int32 LE
             BINUNICODE "loss_mask"    EMPTY_LIST MARK (BININT1 m)*  APPENDS      BININT1 = "K" + uint8
             BINUNICODE "seq_start_id" EMPTY_LIST MARK (BININT s)*   APPENDS
           SETITEMS

**Packing metadata** (written by Bridge's ``prepare_gpt_sft_packed_data`` in ``.../packing/offline.py`` from
``create_packing_strategy`` in ``.../packing/algorithms.py``; read by ``collate_fn`` when ``pad_cu_seqlens``): a JSON
list with one dict per packed split, keys ``dataset_max_seqlen`` (max ``L - 1``), ``max_samples_per_bin``,
``packing_factor`` (samples per bin, 2 decimals), ``packing_efficiency`` (percent, 2 decimals), ``pack_size``,
``min_packed_seqlen`` (min over bins of ``sum(L - 1)``). Bridge takes the max / min over the list.

Every writer is deterministic: the same bins give byte-identical files.
"""

import hashlib
import io
import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.formats.packing import (
    LaidOutBins,
    PackedBin,
    PackSettings,
    PackStats,
    SampleKey,
    bin_problems,
    sample_digest,
)

PACKED_SCHEMA = pa.schema([
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.uint8())),
    ("seq_start_id", pa.list_(pa.int32())),
])
SAMPLES_SCHEMA = pa.schema([
    ("bin", pa.int64()),  # row of the bin in its shard
    ("offset", pa.int32()),  # the sample's seq_start_id in the bin
    ("length", pa.int32()),  # tokens stored, padding included
    ("id", pa.string()),
    ("sample", pa.int32()),  # the sample's index in its conversation (one per user turn with reasoning)
    ("dataset", pa.string()),
    ("source_row", pa.int64()),
    ("copy", pa.int32()),  # repeat copy of the row (0 for the first)
    ("truncated", pa.bool_()),
])
ROW_GROUP_BINS = 1000
#: Bins decoded at a time when a packed shard is read back (its checks, the ``.npy``): decoding whole row groups of
#: 1,000 bins at pack_size 8192 raised RSS by ~270 MB, batches of 100 bins by ~75 MB, in the same time (bench/README).
READ_BATCH_BINS = 100
_MAX_GROUP_VALUES = 1 << 30  # flush a row group early rather than overflow list<int32>'s 32-bit offsets
BRIDGE_SHARD_GLOB = "shard_?????.parquet"
MANIFEST_NAME = "manifest.json"
PACKING_METADATA_NAME = "packing_metadata.json"
SPLIT_ORDER = ("train", "valid", "test")


def _group_full(bins: int, values: int, row_group_bins: int) -> bool:
    """Whether a row group of ``bins`` bins and ``values`` tokens is complete: the one rule of where a packed shard's
    row groups end, for `PackedShardWriter` and `row_group_bounds` alike (the same bins give the same bytes)."""
    return bins >= row_group_bins or values >= _MAX_GROUP_VALUES


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def npy_name(split: str) -> str:
    return f"{split}.npy"


@dataclass(frozen=True)
class FileInfo:
    path: str
    bytes: int
    sha256: str

    @staticmethod
    def of(path: Path) -> "FileInfo":
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return FileInfo(str(path), path.stat().st_size, digest.hexdigest())


@dataclass
class ShardFiles:
    """What one packed shard holds: its two files and their counts."""

    packed: FileInfo
    samples_file: FileInfo
    bins: int
    samples: int
    tokens: int


# --- Parquet shards --------------------------------------------------------------------------------------------------


def _list_array(parts: list[np.ndarray], value_type: pa.DataType) -> pa.Array:
    """One list<value_type> column from per-row numpy arrays, built from offsets (no per-element Python)."""
    bounds = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(part) for part in parts], out=bounds[1:])
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=value_type.to_pandas_dtype())
    return _list_column(bounds, values, value_type)


class PackedShardWriter:
    """Streams bins into ``shard_NNNNN.parquet`` and their samples into ``shard_NNNNN.samples.parquet``.

    Bins are buffered up to one row group (1,000 bins). A full row group is encoded and compressed in a background
    thread (pyarrow releases the GIL) while the caller lays out the next one; at most one row group is being written
    at a time, so memory stays near two row groups and the files are written in order, byte for byte as without it.
    """

    def __init__(self, packed_path: Path, samples_path: Path, row_group_bins: int = ROW_GROUP_BINS) -> None:
        self.packed_path, self.samples_path = Path(packed_path), Path(samples_path)
        self.row_group_bins = row_group_bins
        # Token columns are near-unique values: a dictionary would be tried and dropped, costing write and read time.
        self._packed = pq.ParquetWriter(self.packed_path, PACKED_SCHEMA, compression="zstd", use_dictionary=False)
        self._samples = pq.ParquetWriter(self.samples_path, SAMPLES_SCHEMA, compression="zstd")
        self._group: list[PackedBin] = []
        self._group_values = 0
        self.bins = self.samples = self.tokens = 0
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="packed-shard-writer")
        self._writing: Future | None = None  # the row group being written

    def write(self, packed: PackedBin) -> None:
        self._group.append(packed)
        self._group_values += len(packed.input_ids)
        if _group_full(len(self._group), self._group_values, self.row_group_bins):
            self._flush()

    def _flush(self) -> None:
        if not self._group:
            return
        group = self._group
        table = pa.Table.from_arrays([
            _list_array([b.input_ids for b in group], pa.int32()),
            _list_array([b.loss_mask for b in group], pa.uint8()),
            _list_array([b.seq_start_id for b in group], pa.int32()),
        ], schema=PACKED_SCHEMA)
        members = [(self.bins + row, m) for row, b in enumerate(group) for m in b.members]
        listing = pa.Table.from_pydict({
            "bin": [row for row, _ in members], "offset": [m.offset for _, m in members],
            "length": [m.length for _, m in members], "id": [m.id for _, m in members],
            "sample": [m.sample for _, m in members], "dataset": [m.dataset for _, m in members],
            "source_row": [m.source_row for _, m in members],
            "copy": [m.copy for _, m in members], "truncated": [m.truncated for _, m in members],
        }, schema=SAMPLES_SCHEMA)
        values, self._group, self._group_values = self._group_values, [], 0
        self.write_row_group(table, listing, values)

    def write_row_group(self, table: pa.Table, listing: pa.Table, values: int) -> None:
        """Write one row group that is ready: ``table`` (`PACKED_SCHEMA`, a row per bin, ``values`` tokens) and its
        samples' ``listing`` (`SAMPLES_SCHEMA`, ``bin`` counted from this shard's first bin)."""
        self._wait()
        self._writing = self._encoder.submit(self._write_group, table, listing)
        self.bins += table.num_rows
        self.samples += listing.num_rows
        self.tokens += values

    def _write_group(self, table: pa.Table, listing: pa.Table) -> None:
        self._packed.write_table(table, row_group_size=table.num_rows)
        self._samples.write_table(listing)

    def _wait(self) -> None:
        """Let the row group being written finish (its error, e.g. a full disk, is raised here)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def close(self) -> ShardFiles:
        self._flush()
        self._wait()
        self._encoder.shutdown()
        self._packed.close()
        self._samples.close()
        return ShardFiles(FileInfo.of(self.packed_path), FileInfo.of(self.samples_path), self.bins, self.samples,
                          self.tokens)

    def __enter__(self) -> "PackedShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # leave the partial files to the caller's staging folder, but release them
            self._encoder.shutdown(wait=True)
            self._packed.close()
            self._samples.close()


def row_group_bounds(bin_tokens: np.ndarray, row_group_bins: int = ROW_GROUP_BINS) -> list[int]:
    """The first bin of each row group, and the bin count last: where `PackedShardWriter` flushes (`_group_full`)."""
    bounds, count, values = [0], 0, 0
    for index, tokens in enumerate(bin_tokens.tolist()):
        count, values = count + 1, values + tokens
        if _group_full(count, values, row_group_bins):
            bounds.append(index + 1)
            count = values = 0
    if bounds[-1] != len(bin_tokens):
        bounds.append(len(bin_tokens))
    return bounds


def _list_column(bounds: np.ndarray, values: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """A list<value_type> column whose row i is ``values[bounds[i] - bounds[0] : bounds[i + 1] - bounds[0]]``."""
    offsets = (bounds - bounds[0]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type), type=pa.list_(value_type))


def write_laid_out_shard(bins: LaidOutBins, members: pa.Table, packed_path: Path, samples_path: Path,
                         row_group_bins: int = ROW_GROUP_BINS) -> ShardFiles:
    """Write a shard laid out at once (`packing.lay_out_bins`): the same bytes `PackedShardWriter` writes for the
    same bins one by one. ``members``: per sample, in order, the listing's ``id``, ``sample``, ``dataset``,
    ``source_row``, ``copy`` and ``truncated`` (``bin``, ``offset`` and ``length`` come from the layout)."""
    token_bounds, starts, lengths = bins.token_bounds, bins.seq_start_id, bins.lengths.astype(np.int32)
    with PackedShardWriter(packed_path, samples_path, row_group_bins) as writer:
        group_bounds = row_group_bounds(np.diff(token_bounds), row_group_bins)
        for first, end in zip(group_bounds[:-1], group_bounds[1:]):
            samples = bins.bin_bounds[first : end + 1]
            tokens = token_bounds[first : end + 1]
            table = pa.Table.from_arrays([
                _list_column(tokens, bins.input_ids[tokens[0] : tokens[-1]], pa.int32()),
                _list_column(tokens, bins.loss_mask[tokens[0] : tokens[-1]], pa.uint8()),
                _list_column(samples, starts[samples[0] : samples[-1]], pa.int32()),
            ], schema=PACKED_SCHEMA)
            here = members.slice(samples[0], samples[-1] - samples[0])
            listing = pa.Table.from_arrays([
                pa.array(np.repeat(np.arange(first, end, dtype=np.int64), np.diff(samples))),
                pa.array(starts[samples[0] : samples[-1]]), pa.array(lengths[samples[0] : samples[-1]]),
                *(here.column(name).cast(SAMPLES_SCHEMA.field(name).type).combine_chunks()
                  for name in SAMPLES_SCHEMA.names[3:]),
            ], schema=SAMPLES_SCHEMA)
            writer.write_row_group(table, listing, int(tokens[-1] - tokens[0]))
        return writer.close()


def _column_rows(column: pa.ListArray, dtype: str) -> Iterator[np.ndarray]:
    offsets = column.offsets.to_numpy()
    values = column.values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    for start, end in zip(offsets[:-1], offsets[1:]):
        yield values[start:end]


def bin_batches(parquet: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
    """The bins of a packed shard, `READ_BATCH_BINS` at a time (``input_ids``, ``loss_mask``, ``seq_start_id``)."""
    return parquet.iter_batches(batch_size=READ_BATCH_BINS, columns=list(PACKED_SCHEMA.names), use_threads=False)


def iter_packed_bins(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(input_ids, loss_mask, seq_start_id) of every bin of a packed shard, `READ_BATCH_BINS` in memory at a time."""
    parquet = pq.ParquetFile(path)
    missing = set(PACKED_SCHEMA.names) - set(parquet.schema_arrow.names)
    if missing:
        raise ValueError(f"{path}: not a packed shard, missing column(s) {sorted(missing)}")
    for batch in bin_batches(parquet):
        yield from zip(_column_rows(batch.column("input_ids"), "int32"),
                       _column_rows(batch.column("loss_mask"), "uint8"),
                       _column_rows(batch.column("seq_start_id"), "int32"))


# --- the .npy of a split ---------------------------------------------------------------------------------------------

_PROTO = b"\x80\x03"
_GLOBAL_RECONSTRUCT = b"cnumpy.core.multiarray\n_reconstruct\n"
_GLOBAL_NDARRAY = b"cnumpy\nndarray\n"
_GLOBAL_DTYPE = b"cnumpy\ndtype\n"
(MARK, STOP, TUPLE, TUPLE1, TUPLE3, REDUCE, BUILD, NONE, NEWTRUE, NEWFALSE, EMPTY_LIST, APPENDS, EMPTY_DICT,
 SETITEMS) = (b"(", b".", b"t", b"\x85", b"\x87", b"R", b"b", b"N", b"\x88", b"\x89", b"]", b"e", b"}", b"u")
_APPENDS_BATCH = 1000
_BININT_RECORD = np.dtype([("op", "u1"), ("value", "<i4")])
_BININT1_RECORD = np.dtype([("op", "u1"), ("value", "u1")])


def _binint(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def _binint1(value: int) -> bytes:
    return b"K" + struct.pack("<B", value)


def _binunicode(text: str) -> bytes:
    data = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(data)) + data


def _int_list(values: np.ndarray, small: bool = False) -> bytes:
    """EMPTY_LIST MARK (one BININT, or BININT1 when ``small``, per value) APPENDS, built as one record array."""
    records = np.empty(len(values), dtype=_BININT1_RECORD if small else _BININT_RECORD)
    records["op"] = ord("K") if small else ord("J")
    records["value"] = values
    return EMPTY_LIST + MARK + records.tobytes() + APPENDS


_KEY_INPUT_IDS, _KEY_LOSS_MASK, _KEY_SEQ_START = (_binunicode(k) for k in ("input_ids", "loss_mask", "seq_start_id"))


def _pickled_bin(input_ids: np.ndarray, loss_mask: np.ndarray, seq_start_id: np.ndarray) -> bytes:
    return b"".join([
        EMPTY_DICT, MARK,
        _KEY_INPUT_IDS, _int_list(np.asarray(input_ids, dtype=np.int32)),
        _KEY_LOSS_MASK, _int_list(np.asarray(loss_mask, dtype=np.uint8), small=True),
        _KEY_SEQ_START, _int_list(np.asarray(seq_start_id, dtype=np.int32)),
        SETITEMS,
    ])


def _npy_head(count: int) -> bytes:
    """Everything before the first bin: the npy header, then the pickle up to the list of bins."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": (count,)})
    empty_array = _GLOBAL_RECONSTRUCT + _GLOBAL_NDARRAY + _binint1(0) + TUPLE1 + b"C\x01b" + TUPLE3 + REDUCE
    dtype_object = (_GLOBAL_DTYPE + _binunicode("O8") + NEWFALSE + NEWTRUE + TUPLE3 + REDUCE
                    + MARK + _binint1(3) + _binunicode("|") + NONE + NONE + NONE + _binint(-1) + _binint(-1)
                    + _binint1(63) + TUPLE + BUILD)
    state_head = MARK + _binint1(1) + _binint(count) + TUPLE1 + dtype_object + NEWFALSE + EMPTY_LIST
    return header.getvalue() + _PROTO + empty_array + state_head


def write_packed_npy(bins: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], count: int, out: BinaryIO) -> int:
    """Stream ``count`` bins (input_ids, loss_mask, seq_start_id) as a Bridge ``.npy``; returns bytes written.

    The count goes into the header before the first bin, so it must be known up front (the shards' bin counts);
    a different number of bins is an error.
    """
    if not 0 <= count < 1 << 31:
        raise ValueError(f"an .npy of {count} bins cannot be written (0 <= bins < 2**31)")
    written = out.write(_npy_head(count))
    seen = 0
    batch: list[bytes] = []
    for input_ids, loss_mask, seq_start_id in bins:
        seen += 1
        if seen > count:
            raise ValueError(f"more bins than the {count} announced")
        batch.append(_pickled_bin(input_ids, loss_mask, seq_start_id))
        if len(batch) == _APPENDS_BATCH:
            written += out.write(MARK + b"".join(batch) + APPENDS)
            batch = []
    if seen != count:
        raise ValueError(f"{seen} bins written, {count} announced")
    if batch:
        written += out.write(MARK + b"".join(batch) + APPENDS)
    written += out.write(TUPLE + BUILD + STOP)
    return written


def npy_from_shards(shards: Iterable[Path], out_path: Path) -> FileInfo:
    """The split's ``.npy`` from its Parquet shards, in order (bins counted from the Parquet footers first)."""
    shards = list(shards)
    count = sum(pq.ParquetFile(path).metadata.num_rows for path in shards)
    bins = (item for path in shards for item in iter_packed_bins(path))
    with open(out_path, "wb") as out:
        write_packed_npy(bins, count, out)
    return FileInfo.of(Path(out_path))


# --- metadata and manifest -------------------------------------------------------------------------------------------


def bridge_packing_metadata(stats: PackStats) -> dict:
    """One split's entry of Bridge's packing metadata list (module docstring)."""
    if not stats.bins:
        raise ValueError("a split without bins has no packing metadata")
    return {
        "dataset_max_seqlen": stats.max_sample_positions,
        "max_samples_per_bin": stats.max_samples_per_bin,
        "packing_factor": round(stats.samples / stats.bins, 2),
        "packing_efficiency": round(stats.packing_efficiency * 100, 2),
        "pack_size": stats.pack_size,
        "min_packed_seqlen": stats.min_bin_positions,
    }


def packing_metadata_json(splits: Mapping[str, PackStats]) -> str:
    """``packing_metadata.json``: the entries of the splits that have bins, in train/valid/test order."""
    entries = [bridge_packing_metadata(splits[name]) for name in _ordered(splits) if splits[name].bins]
    return json.dumps(entries, indent=2) + "\n"


@dataclass
class SplitSummary:
    """One split's outputs for the manifest: its files (relative to ``sft/``) and merged counts."""

    files: list[str]
    stats: PackStats
    npy: str | None = None
    file_sha256: dict[str, str] = field(default_factory=dict)


def _ordered(splits: Mapping[str, object]) -> list[str]:
    return [s for s in SPLIT_ORDER if s in splits] + sorted(s for s in splits if s not in SPLIT_ORDER)


def sft_manifest(splits: Mapping[str, SplitSummary], settings: PackSettings, formats: Iterable[str], *,
                 tokenizer_sha256: str, template_sha256: str, eos_id: int) -> dict:
    """``sft/manifest.json``: per split files and counts, plus what determines the token ids."""
    body = {}
    for name in _ordered(splits):
        summary = splits[name]
        stats = summary.stats.as_dict()
        body[name] = {
            "files": summary.files, "bridge_glob": f"{name}/{BRIDGE_SHARD_GLOB}", "npy": summary.npy,
            "sha256": dict(sorted(summary.file_sha256.items())),
            "samples": stats["samples"], "bins": stats["bins"], "tokens": stats["tokens"],
            "trained_tokens": stats["trained_tokens"], "pad_tokens": stats["pad_tokens"],
            "packing_efficiency": stats["packing_efficiency"], "samples_in": stats["samples_in"],
            "truncated": stats["truncated"], "dropped": stats["dropped"], "licenses": stats["licenses"],
            "max_samples_per_bin": stats["max_samples_per_bin"], "min_packed_seqlen": stats["min_bin_positions"],
            "dataset_max_seqlen": stats["max_sample_positions"],
        }
    return {
        "format": "megatron_bridge_packed_sft", "formats": list(formats),
        "pack_size": settings.pack_size, "packing": settings.packing, "pack_window": settings.pack_window,
        "pad_to_multiple": settings.pad_to_multiple, "overlong": settings.overlong, "seed": settings.seed,
        "tokenizer_sha256": tokenizer_sha256, "template_sha256": template_sha256, "eos_id": eos_id,
        "packing_metadata": PACKING_METADATA_NAME, "splits": body,
    }


# --- checks on written shards ----------------------------------------------------------------------------------------


def packed_shard_problems(packed_path: Path, samples_path: Path, pack_size: int, limit: int = 10) -> list[str]:
    """Bin capacity, seq_start_id and mask rules of every bin, and the samples file agreeing with the bins."""
    problems: list[str] = []
    samples = pq.read_table(samples_path, columns=["bin", "offset", "length"])
    listed = iter(zip(*(samples.column(name).to_pylist() for name in ("bin", "offset", "length"))))
    rows = 0
    for row, (input_ids, loss_mask, seq_start_id) in enumerate(iter_packed_bins(packed_path)):
        rows += 1
        problems.extend(bin_problems(input_ids, loss_mask, seq_start_id, pack_size, f"{packed_path} bin {row}"))
        bounds = np.append(seq_start_id, len(input_ids)).tolist()
        for start, end in zip(bounds[:-1], bounds[1:]):
            entry = next(listed, None)
            if entry != (row, start, end - start):
                problems.append(f"{samples_path}: expected (bin {row}, offset {start}, length {end - start}), "
                                f"found {entry}")
                break
        if len(problems) >= limit:
            return problems[:limit]
    if next(listed, None) is not None:
        problems.append(f"{samples_path}: lists more samples than the {rows} bins of {packed_path} hold")
    return problems[:limit]


def stored_samples(packed_path: Path, samples_path: Path) -> Iterator[tuple[SampleKey, str]]:
    """((dataset, id, sample, copy), digest) of every sample stored in a shard, for `packing.compare_samples`."""
    table = pq.read_table(samples_path, columns=["bin", "offset", "length", "id", "dataset", "sample", "copy"])
    entries = iter(zip(*(table.column(name).to_pylist() for name in table.column_names)))
    for input_ids, loss_mask, seq_start_id in iter_packed_bins(packed_path):
        for _ in seq_start_id:
            entry = next(entries, None)
            if entry is None:
                raise ValueError(f"{samples_path}: lists fewer samples than the bins of {packed_path} hold")
            _, offset, length, sample_id, dataset, sample, copy = entry
            yield (dataset, sample_id, sample, copy), sample_digest(input_ids[offset:offset + length],
                                                                    loss_mask[offset:offset + length])
