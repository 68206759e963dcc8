"""Megatron-LM indexed dataset (MMIDIDX) and Megatron-Bridge blend files, byte for byte.

A dataset is a path prefix ``P`` with ``P.bin`` and ``P.idx`` (docs/architecture.md §4.1).

``.bin``: every token id concatenated, little-endian, in the header's dtype; no header, no padding.

``.idx``, little-endian::

    offset 0   magic            9 bytes  b"MMIDIDX\\x00\\x00"
           9   version          u64      1
          17   dtype code       u8       DType below
          18   S sequences      u64
          26   D doc indices    u64      = documents + 1
          34   lengths          i32[S]   tokens per sequence
               pointers         i64[S]   byte offset of each sequence in .bin (cumulative, from 0)
               document_indices i64[D]   0, then after each document the number of sequences so far
    Nothing follows.

One document is one sequence. An empty document adds no sequence (its document index repeats the previous
one) and gets no EOD. ``uint16`` is used when the vocabulary has fewer than 65,500 entries, else ``int32``
(Megatron's rule); a token id that does not fit is an error, never a silent wrap.
"""

import hashlib
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, S, D
UINT16_VOCAB_LIMIT = 65500


class DType(IntEnum):
    """dtype codes of the .idx header (Megatron's ``DType``)."""

    uint8 = 1
    int8 = 2
    int16 = 3
    int32 = 4
    int64 = 5
    float64 = 6
    float32 = 7
    uint16 = 8

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.name).newbyteorder("<")

    @property
    def max_token_id(self) -> int:
        return int(np.iinfo(self.numpy).max)


class FormatError(Exception):
    """A .bin/.idx pair that is not a valid Megatron indexed dataset."""


def dtype_for_vocab(vocab_size: int) -> DType:
    """Megatron's rule: uint16 below 65,500 entries, else int32."""
    return DType.uint16 if vocab_size < UINT16_VOCAB_LIMIT else DType.int32


def encode_index(dtype: DType, sequence_lengths: np.ndarray, document_indices: np.ndarray) -> bytes:
    """The whole .idx file for the given lengths and document indices."""
    lengths = np.ascontiguousarray(sequence_lengths, dtype="<i4")
    doc_indices = np.ascontiguousarray(document_indices, dtype="<i8")
    pointers = np.zeros(len(lengths), dtype="<i8")
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype("<i8") * dtype.numpy.itemsize, out=pointers[1:])
    header = HEADER.pack(MAGIC, VERSION, int(dtype), len(lengths), len(doc_indices))
    return header + lengths.tobytes() + pointers.tobytes() + doc_indices.tobytes()


class IndexedDatasetWriter:
    """Streams documents into ``<prefix>.bin`` and writes ``<prefix>.idx`` at the end.

    Documents arrive in batches as one flat id array plus one length per document (0 = empty document), so
    no per-token Python objects exist. Memory held: 12 bytes per sequence plus 8 per document.
    """

    def __init__(self, prefix: str | Path, dtype: DType) -> None:
        self.prefix = Path(prefix)
        self.dtype = dtype
        self._bin: BinaryIO = open(self.prefix.with_name(self.prefix.name + ".bin"), "wb")
        self._lengths: list[np.ndarray] = []
        self._doc_indices: list[np.ndarray] = [np.zeros(1, dtype="<i8")]
        self._sequences = 0
        self._bin_hash = hashlib.sha256()
        self.tokens = 0

    def add_documents(self, flat_ids: np.ndarray, lengths: np.ndarray, sequences: np.ndarray | None = None) -> None:
        """Append documents: ``flat_ids`` holds them concatenated, ``lengths[i]`` tokens each. With ``sequences``
        (documents cut into sentences), ``lengths`` are the sequences' (each > 0) and document ``i`` has
        ``sequences[i]`` of them (0: an empty document)."""
        if sequences is not None:
            self._add_sequences(flat_ids, np.asarray(lengths, dtype=np.int64), np.asarray(sequences, dtype=np.int64))
            return
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size and int(lengths.max()) > np.iinfo(np.int32).max:
            raise FormatError("a document has more than 2**31-1 tokens; Megatron stores lengths as int32")
        if int(lengths.sum()) != len(flat_ids):
            raise ValueError(f"lengths sum to {int(lengths.sum())} but {len(flat_ids)} ids were given")
        data = memoryview(np.ascontiguousarray(to_token_dtype(flat_ids, self.dtype))).cast("B")  # no extra copy
        self._bin.write(data)
        self._bin_hash.update(data)
        nonempty = lengths[lengths > 0]
        self._lengths.append(nonempty.astype("<i4"))
        self._doc_indices.append(self._sequences + np.cumsum(lengths > 0, dtype=np.int64))
        self._sequences += len(nonempty)
        self.tokens += len(flat_ids)

    def _add_sequences(self, flat_ids: np.ndarray, lengths: np.ndarray, sequences: np.ndarray) -> None:
        if int(lengths.sum()) != len(flat_ids) or int(sequences.sum()) != len(lengths) or np.any(lengths <= 0):
            raise ValueError(f"{len(flat_ids)} ids, {len(lengths)} sequence lengths summing to {int(lengths.sum())} "
                             f"and {int(sequences.sum())} sequences in the documents do not fit together")
        if lengths.size and int(lengths.max()) > np.iinfo(np.int32).max:
            raise FormatError("a sequence has more than 2**31-1 tokens; Megatron stores lengths as int32")
        data = memoryview(np.ascontiguousarray(to_token_dtype(flat_ids, self.dtype))).cast("B")
        self._bin.write(data)
        self._bin_hash.update(data)
        self._lengths.append(lengths.astype("<i4"))
        self._doc_indices.append(self._sequences + np.cumsum(sequences, dtype=np.int64))
        self._sequences += len(lengths)
        self.tokens += len(flat_ids)

    @property
    def bin_sha256(self) -> str:
        """sha256 of everything written to the .bin so far."""
        return self._bin_hash.hexdigest()

    def close(self) -> None:
        """Finish the .bin and write the .idx."""
        self._bin.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype="<i4")
        doc_indices = np.concatenate(self._doc_indices)
        idx_path = self.prefix.with_name(self.prefix.name + ".idx")
        idx_path.write_bytes(encode_index(self.dtype, lengths, doc_indices))

    def abort(self) -> None:
        self._bin.close()


def to_token_dtype(ids: np.ndarray, dtype: DType) -> np.ndarray:
    """Ids in the dataset dtype, refusing any id that does not fit.

    One pass finds the range (unsigned ids need no minimum). Ids of the same width and byte order are then
    reinterpreted rather than copied: fastokens' uint32 ids below 2**31 are already the int32 bytes."""
    ids = np.asarray(ids)
    target = dtype.numpy
    if ids.size:
        high = int(ids.max())
        low = 0 if ids.dtype.kind == "u" else int(ids.min())
        if low < 0 or high > dtype.max_token_id:
            bad = high if high > dtype.max_token_id else low
            raise FormatError(
                f"token id {bad} does not fit dtype {dtype.name} (max {dtype.max_token_id}); "
                "set dtype: int32 in the blend or check the tokenizer's vocabulary size"
            )
    if ids.dtype.kind in "iu" and ids.dtype.itemsize == target.itemsize and ids.dtype.str[0] == target.str[0]:
        return ids.view(target)  # every value fits both types (checked above), so the bytes are the same
    return ids.astype(target, copy=False)


@dataclass(frozen=True)
class Index:
    """A parsed .idx file."""

    dtype: DType
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))


def parse_index(data: bytes, name: str = ".idx") -> Index:
    """Parse and structurally validate an .idx file; FormatError says what is wrong."""
    if len(data) < HEADER.size:
        raise FormatError(f"{name}: {len(data)} bytes, shorter than the {HEADER.size}-byte header")
    magic, version, code, n_seq, n_doc = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise FormatError(f"{name}: bad magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FormatError(f"{name}: version {version}, expected {VERSION}")
    try:
        dtype = DType(code)
    except ValueError:
        raise FormatError(f"{name}: unknown dtype code {code}") from None
    expected = HEADER.size + 4 * n_seq + 8 * n_seq + 8 * n_doc
    if len(data) != expected:
        raise FormatError(f"{name}: {len(data)} bytes, header (S={n_seq}, D={n_doc}) implies {expected}")
    offset = HEADER.size
    lengths = np.frombuffer(data, dtype="<i4", count=n_seq, offset=offset)
    offset += 4 * n_seq
    pointers = np.frombuffer(data, dtype="<i8", count=n_seq, offset=offset)
    offset += 8 * n_seq
    doc_indices = np.frombuffer(data, dtype="<i8", count=n_doc, offset=offset)
    index = Index(dtype, lengths, pointers, doc_indices)
    _validate_index(index, name)
    return index


def _validate_index(index: Index, name: str) -> None:
    lengths, pointers, docs = index.sequence_lengths, index.sequence_pointers, index.document_indices
    if len(lengths) and int(lengths.min()) < 0:
        raise FormatError(f"{name}: negative sequence length")
    expected = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * index.dtype.numpy.itemsize, out=expected[1:])
    if not np.array_equal(pointers, expected):
        at = int(np.nonzero(pointers != expected)[0][0])
        raise FormatError(f"{name}: pointer {at} is {pointers[at]}, cumulative lengths give {expected[at]}")
    if len(docs) == 0 or docs[0] != 0:
        raise FormatError(f"{name}: document indices must start with 0")
    if docs[-1] != len(lengths):
        raise FormatError(f"{name}: last document index {docs[-1]} != {len(lengths)} sequences")
    if np.any(np.diff(docs) < 0):
        raise FormatError(f"{name}: document indices decrease")


def check_bin_size(index: Index, bin_size: int, name: str = ".bin") -> None:
    expected = index.num_tokens * index.dtype.numpy.itemsize
    if bin_size != expected:
        raise FormatError(f"{name}: {bin_size} bytes, the index describes {expected}")


SPLITS = ("train", "valid", "test")


def blend_json(splits: dict[str, list[tuple[float, str]]]) -> dict[str, list[str] | None]:
    """Megatron-Bridge per-split blend: flat alternating weight strings and prefixes (no extension).

    Every split key is written, ``null`` for a split without data: Megatron-LM's and Megatron-Bridge's
    ``get_blend_and_blend_per_split`` index ``train``, ``valid`` and ``test`` unconditionally (a missing key is a
    ``KeyError``) and their ``get_blend_from_list`` fails on an empty list, but returns "no dataset" for ``None``.
    """
    return {split: [item for weight, prefix in splits[split] for item in (repr(float(weight)), prefix)]
            if splits.get(split) else None for split in SPLITS}


def data_path_args(splits: dict[str, list[tuple[float, str]]], flat: bool = False) -> str:
    """The same blend as Megatron-LM arguments.

    A flat blend (one ``datasets`` list) becomes ``--data-path w p ...``, which Megatron divides into
    train/valid/test with ``--split``; a per-split blend becomes ``--train-data-path ...`` etc.
    """
    parts = []
    for split, pairs in splits.items():
        flag = "--data-path" if flat else f"--{split}-data-path"
        parts.append(f"{flag} " + " ".join(f"{float(w)!r} {p}" for w, p in pairs))
    return "\n".join(parts) + "\n"
