"""An independent reader of Megatron indexed datasets (``P.bin`` + ``P.idx``), written from docs/architecture.md §4.1.

It shares no code with ``nemotron_assets.formats`` so tests can check what the writer produces against the spec,
not against itself. ``.idx`` layout, little-endian: magic ``b"MMIDIDX\\x00\\x00"`` | u64 version 1 | u8 dtype code |
u64 S | u64 D | int32[S] lengths | int64[S] byte pointers | int64[D] document indices. Nothing follows.
"""

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f4", 8: "<u2"}


@dataclass
class RawDataset:
    version: int
    dtype_code: int
    num_sequences: int  # S
    num_document_indices: int  # D = documents + 1
    sequence_lengths: np.ndarray  # int32[S]
    sequence_pointers: np.ndarray  # int64[S]
    document_indices: np.ndarray  # int64[D]
    tokens: np.ndarray  # the whole .bin, in the header's dtype


def read_raw(prefix: str | Path) -> RawDataset:
    """Header fields and arrays of ``prefix.idx`` plus the ``prefix.bin`` tokens; ValueError if malformed."""
    idx = Path(f"{prefix}.idx").read_bytes()
    if idx[:9] != MAGIC:
        raise ValueError(f"bad magic {idx[:9]!r}")
    (version,) = struct.unpack_from("<Q", idx, 9)
    (dtype_code,) = struct.unpack_from("<B", idx, 17)
    (s,) = struct.unpack_from("<Q", idx, 18)
    (d,) = struct.unpack_from("<Q", idx, 26)
    offset = 34
    lengths = np.frombuffer(idx, dtype="<i4", count=s, offset=offset)
    offset += 4 * s
    pointers = np.frombuffer(idx, dtype="<i8", count=s, offset=offset)
    offset += 8 * s
    doc_indices = np.frombuffer(idx, dtype="<i8", count=d, offset=offset)
    offset += 8 * d
    if offset != len(idx):
        raise ValueError(f"{len(idx) - offset} bytes after the document indices")
    dtype = np.dtype(DTYPES[dtype_code])
    bin_path = Path(f"{prefix}.bin")
    if bin_path.stat().st_size == 0:  # numpy cannot memory-map an empty file
        tokens = np.zeros(0, dtype=dtype)
    else:
        tokens = np.memmap(bin_path, dtype=dtype, mode="r")
    return RawDataset(version, dtype_code, s, d, lengths, pointers, doc_indices, tokens)


def read_dataset(prefix: str | Path) -> tuple[int, list[list[int]]]:
    """``(dtype code, documents)``: each document is the list of its tokens, an empty document is ``[]``."""
    raw = read_raw(prefix)
    itemsize = raw.tokens.dtype.itemsize
    documents = []
    for doc in range(raw.num_document_indices - 1):
        first, last = int(raw.document_indices[doc]), int(raw.document_indices[doc + 1])
        tokens: list[int] = []
        for seq in range(first, last):
            start = int(raw.sequence_pointers[seq]) // itemsize
            tokens.extend(int(t) for t in raw.tokens[start:start + int(raw.sequence_lengths[seq])])
        documents.append(tokens)
    return raw.dtype_code, documents
