"""What a dataset is made of: its files, how each is stored, and how to open it.

A ``SourceFile`` is one entry of a dataset's immutable manifest. ``url`` is a local absolute path or an
fsspec URL (``s3://...``); ``fingerprint`` is the content hash (local files, hf files) or the S3 ETag, so
a later run can tell whether the input changed under it.
"""

import gzip
import io
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import BinaryIO

import zstandard

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True)
class SourceFile:
    url: str
    size: int
    format: str
    compression: str | None
    rows: int = 0
    fingerprint: str = ""
    # (line, byte offset) of some line starts of an uncompressed file, about every 32 MB, found by the pass that
    # counted and hashed it: a reader of rows deep into the file seeks there instead of counting every line before.
    # Not part of the file's identity (``fingerprint`` is): a manifest without them reads the same rows.
    line_starts: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "line_starts", tuple((int(line), int(at)) for line, at in self.line_starts))

    def as_dict(self) -> dict:
        return asdict(self)


def detect_format(name: str, declared: str | None = None, any_suffix: bool = False) -> tuple[str, str | None] | None:
    """``(format, compression)`` from the file name (``x.jsonl.zst`` -> jsonl, zstd); None if not data.

    ``.json`` is data only when the entry declares ``format: jsonl`` (HF repos keep metadata in .json files);
    any other suffix only when ``any_suffix`` (the blend names that one file) and a format is declared.
    """
    suffixes = [s.lower() for s in PurePosixPath(name).suffixes]
    compression = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression:
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    if suffix in FORMATS:
        fmt = declared or FORMATS[suffix]
    elif suffix == ".json" and declared == "jsonl":
        fmt = "jsonl"
    elif any_suffix and declared is not None:
        fmt = declared
    else:
        return None
    if fmt == "parquet" and compression:
        return None  # parquet compresses internally; a .parquet.gz is not readable as parquet
    return fmt, compression


def is_remote(url: str) -> bool:
    return "://" in url


def open_raw(url: str, storage_options: dict | None = None) -> BinaryIO:
    """Open a local path or an fsspec URL for binary reading."""
    if not is_remote(url):
        return open(url, "rb")
    import fsspec

    return fsspec.open(url, "rb", **(storage_options or {})).open()


def open_decompressed(raw: BinaryIO, compression: str | None) -> BinaryIO:
    if compression is None:
        return raw
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "zstd":
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
    raise ValueError(f"unknown compression {compression!r}")
