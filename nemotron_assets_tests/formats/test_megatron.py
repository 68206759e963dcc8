"""Megatron .bin/.idx (docs/architecture.md §4.1): golden bytes derived by hand, round trips through the independent
reader in ``nemotron_assets_tests/megatron_reader.py``, and the structural checks of ``parse_index``."""

import hashlib
import json
import struct
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemotron_assets.formats.megatron import (
    DType,
    FormatError,
    Index,
    IndexedDatasetWriter,
    blend_json,
    check_bin_size,
    data_path_args,
    dtype_for_vocab,
    parse_index,
)
from nemotron_assets_tests.megatron_blend_reader import read_blend_per_split
from nemotron_assets_tests.megatron_reader import read_dataset, read_raw

# The golden case: documents [[5, 6, 7], [], [9]], written out field by field from the spec.
MAGIC_HEX = "4d4d4944494458 0000"  # b"MMIDIDX" + two NUL bytes
VERSION_HEX = "0100000000000000"  # <Q 1
TAIL_HEX = (
    "0200000000000000"  # <Q S = 2 sequences (the empty document has none)
    "0400000000000000"  # <Q D = 3 documents + 1
    "03000000 01000000"  # int32 lengths [3, 1]
    "{pointers}"  # int64 pointers [0, 3 * itemsize]
    "0000000000000000 0100000000000000 0100000000000000 0200000000000000"  # int64 doc indices [0, 1, 1, 2]
)
GOLDEN_DOCS = [[5, 6, 7], [], [9]]
GOLDEN = {
    DType.uint16: (
        MAGIC_HEX + VERSION_HEX + "08" + TAIL_HEX.format(pointers="0000000000000000 0600000000000000"),
        "0500 0600 0700 0900",
    ),
    DType.int32: (
        MAGIC_HEX + VERSION_HEX + "04" + TAIL_HEX.format(pointers="0000000000000000 0c00000000000000"),
        "05000000 06000000 07000000 09000000",
    ),
}


def write(prefix, dtype: DType, batches: list[list[list[int]]]) -> IndexedDatasetWriter:
    """Write documents given as batches (each batch a list of documents) and close the writer."""
    writer = IndexedDatasetWriter(prefix, dtype)
    for batch in batches:
        flat = [t for doc in batch for t in doc]
        writer.add_documents(np.array(flat, dtype=np.int64), np.array([len(d) for d in batch], dtype=np.int64))
    writer.close()
    return writer


def files(prefix) -> tuple[bytes, bytes]:
    return prefix.with_name(prefix.name + ".idx").read_bytes(), prefix.with_name(prefix.name + ".bin").read_bytes()


def golden_idx(dtype: DType = DType.uint16) -> bytes:
    return bytes.fromhex(GOLDEN[dtype][0])


# --- golden bytes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [DType.uint16, DType.int32], ids=lambda d: d.name)
def test_golden_bytes_for_three_documents_one_empty(tmp_path, dtype):
    prefix = tmp_path / "golden"
    write(prefix, dtype, [GOLDEN_DOCS])
    idx, binary = files(prefix)
    assert idx == bytes.fromhex(GOLDEN[dtype][0])
    assert binary == bytes.fromhex(GOLDEN[dtype][1])


def test_golden_bytes_with_one_document_per_batch(tmp_path):
    prefix = tmp_path / "golden"
    write(prefix, DType.uint16, [[doc] for doc in GOLDEN_DOCS])
    assert files(prefix) == (golden_idx(), bytes.fromhex(GOLDEN[DType.uint16][1]))


def test_no_documents_gives_header_and_a_single_zero_document_index(tmp_path):
    prefix = tmp_path / "nothing"
    write(prefix, DType.uint16, [])
    idx, binary = files(prefix)
    expected = bytes.fromhex(MAGIC_HEX + VERSION_HEX + "08" + "0000000000000000" + "0100000000000000"
                             + "0000000000000000")
    assert idx == expected
    assert binary == b""


def test_header_offsets_match_the_spec(tmp_path):
    prefix = tmp_path / "golden"
    write(prefix, DType.uint16, [GOLDEN_DOCS])
    idx, _ = files(prefix)
    assert idx[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<QBQQ", idx, 9) == (1, 8, 2, 4)
    assert len(idx) == 34 + 2 * 4 + 2 * 8 + 4 * 8


# --- documents and dtypes ------------------------------------------------------------------------------------


def test_empty_document_adds_no_sequence(tmp_path):
    prefix = tmp_path / "empties"
    write(prefix, DType.uint16, [[[], [1, 2]], [[], []]])
    raw = read_raw(prefix)
    assert raw.num_sequences == 1
    assert raw.sequence_lengths.tolist() == [2]
    assert raw.document_indices.tolist() == [0, 0, 1, 1, 1]
    assert read_dataset(prefix) == (8, [[], [1, 2], [], []])


def test_header_document_count_is_documents_plus_one(tmp_path):
    prefix = tmp_path / "count"
    documents = [[1], [2, 3], [], [4], [5, 6, 7]]
    write(prefix, DType.int32, [documents[:2], documents[2:]])
    raw = read_raw(prefix)
    assert raw.num_document_indices == len(documents) + 1
    assert _read_index(prefix).num_documents == len(documents)


@pytest.mark.parametrize(
    ("vocab_size", "expected"),
    [(1, DType.uint16), (32000, DType.uint16), (65499, DType.uint16), (65500, DType.int32),
     (65536, DType.int32), (128256, DType.int32)],
)
def test_dtype_for_vocab_switches_to_int32_at_65500(vocab_size, expected):
    assert dtype_for_vocab(vocab_size) is expected


@pytest.mark.parametrize(
    ("dtype", "bad_id"),
    [(DType.uint16, 65536), (DType.uint16, 70000), (DType.uint16, -1), (DType.int32, 2**31), (DType.int32, -5)],
)
def test_token_id_that_does_not_fit_raises_and_writes_nothing(tmp_path, dtype, bad_id):
    writer = IndexedDatasetWriter(tmp_path / "bad", dtype)
    with pytest.raises(FormatError, match=f"token id {bad_id} does not fit dtype {dtype.name}"):
        writer.add_documents(np.array([1, bad_id, 2], dtype=np.int64), np.array([3]))
    writer.abort()
    assert (tmp_path / "bad.bin").read_bytes() == b""


@pytest.mark.parametrize(("dtype", "top"), [(DType.uint16, 65535), (DType.int32, 2**31 - 1)])
def test_largest_id_of_the_dtype_round_trips(tmp_path, dtype, top):
    prefix = tmp_path / "top"
    write(prefix, dtype, [[[0, top]]])
    assert read_dataset(prefix) == (int(dtype), [[0, top]])


def test_lengths_that_do_not_sum_to_the_ids_raise(tmp_path):
    writer = IndexedDatasetWriter(tmp_path / "x", DType.uint16)
    with pytest.raises(ValueError, match="lengths sum to 4 but 3 ids"):
        writer.add_documents(np.array([1, 2, 3]), np.array([2, 2]))
    writer.abort()


def test_bin_sha256_and_token_count_describe_the_written_bin(tmp_path):
    prefix = tmp_path / "hash"
    writer = write(prefix, DType.uint16, [[[1, 2], [3]], [[], [4, 5, 6]]])
    _, binary = files(prefix)
    assert writer.bin_sha256 == hashlib.sha256(binary).hexdigest()
    assert writer.tokens == 6


# --- round trips ---------------------------------------------------------------------------------------------

DOCUMENT_LISTS = {
    DType.uint16: st.lists(st.lists(st.integers(0, 65535), max_size=12), max_size=25),
    DType.int32: st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=12), max_size=25),
}


def batches_of(documents: list, cuts: list[int]) -> list[list]:
    """Split ``documents`` into consecutive batches at the given cut positions (empty batches allowed)."""
    bounds = [0, *sorted(c % (len(documents) + 1) for c in cuts), len(documents)]
    return [documents[a:b] for a, b in pairwise(bounds)]


@pytest.mark.parametrize("dtype", [DType.uint16, DType.int32], ids=lambda d: d.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_round_trip_through_independent_reader(tmp_path, dtype, data):
    documents = data.draw(DOCUMENT_LISTS[dtype])
    cuts = data.draw(st.lists(st.integers(0, 100), max_size=5))
    prefix = tmp_path / "rt"
    write(prefix, dtype, batches_of(documents, cuts))
    assert read_dataset(prefix) == (int(dtype), documents)
    raw = read_raw(prefix)
    assert raw.num_sequences == sum(1 for d in documents if d)
    assert raw.num_document_indices == len(documents) + 1
    index = _read_index(prefix)  # our own parser accepts what we wrote
    assert index.num_tokens == sum(len(d) for d in documents)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents=DOCUMENT_LISTS[DType.uint16], cuts_a=st.lists(st.integers(0, 100), max_size=6),
       cuts_b=st.lists(st.integers(0, 100), max_size=6))
def test_batch_split_does_not_change_the_bytes(tmp_path, documents, cuts_a, cuts_b):
    write(tmp_path / "a", DType.uint16, batches_of(documents, cuts_a))
    write(tmp_path / "b", DType.uint16, batches_of(documents, cuts_b))
    assert files(tmp_path / "a") == files(tmp_path / "b")


# --- parse_index ---------------------------------------------------------------------------------------------


def patched(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


# Offsets in the golden uint16 index: lengths at 34, pointers at 42, document indices at 58.
POINTERS, DOC_INDICES = 34 + 2 * 4, 34 + 2 * 4 + 2 * 8


def test_parse_index_reads_the_golden_index():
    index = parse_index(golden_idx())
    assert index.dtype is DType.uint16
    assert index.sequence_lengths.tolist() == [3, 1]
    assert index.sequence_pointers.tolist() == [0, 6]
    assert index.document_indices.tolist() == [0, 1, 1, 2]
    assert (index.num_documents, index.num_tokens) == (3, 4)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (patched(golden_idx(), 0, b"NMIDIDX"), "bad magic b'NMIDIDX"),
        (patched(golden_idx(), 9, struct.pack("<Q", 2)), "version 2, expected 1"),
        (patched(golden_idx(), 17, b"\x09"), "unknown dtype code 9"),
        (patched(golden_idx(), 17, b"\x00"), "unknown dtype code 0"),
        (golden_idx()[:-1], r"89 bytes, header \(S=2, D=4\) implies 90"),
        (golden_idx() + b"\x00", r"91 bytes, header \(S=2, D=4\) implies 90"),
        (golden_idx()[:20], "20 bytes, shorter than the 34-byte header"),
        (b"", "0 bytes, shorter than the 34-byte header"),
        (patched(golden_idx(), POINTERS + 8, struct.pack("<q", 4)), "pointer 1 is 4, cumulative lengths give 6"),
        (patched(golden_idx(), POINTERS, struct.pack("<q", 2)), "pointer 0 is 2, cumulative lengths give 0"),
        (patched(golden_idx(), DOC_INDICES + 24, struct.pack("<q", 1)), "last document index 1 != 2 sequences"),
        (patched(golden_idx(), DOC_INDICES, struct.pack("<q", 1)), "document indices must start with 0"),
        (patched(golden_idx(), DOC_INDICES + 8, struct.pack("<q", 2)), "document indices decrease"),
        (patched(golden_idx(), 34, struct.pack("<i", -3)), "negative sequence length"),
    ],
    ids=["magic", "version", "dtype-9", "dtype-0", "truncated", "trailing", "short-header", "empty",
         "pointer-1", "pointer-0", "last-doc-index", "first-doc-index", "decreasing", "negative-length"],
)
def test_parse_index_rejects_malformed_index(data, message):
    with pytest.raises(FormatError, match=message):
        parse_index(data, name="shard_00000.idx")
    with pytest.raises(FormatError, match="^shard_00000.idx: "):
        parse_index(data, name="shard_00000.idx")


def test_parse_index_accepts_a_float_dtype_header_with_its_own_itemsize():
    # dtype 6 (float64, 8 bytes): the pointer after 3 tokens is 24, so 6 is wrong and 24 is right.
    with pytest.raises(FormatError, match="pointer 1 is 6, cumulative lengths give 24"):
        parse_index(patched(golden_idx(), 17, b"\x06"))
    good = patched(patched(golden_idx(), 17, b"\x06"), POINTERS + 8, struct.pack("<q", 24))
    assert parse_index(good).dtype is DType.float64


def test_check_bin_size(tmp_path):
    prefix = tmp_path / "golden"
    write(prefix, DType.int32, [GOLDEN_DOCS])
    index = _read_index(prefix)
    check_bin_size(index, 16)  # 4 tokens * 4 bytes
    for wrong in (0, 15, 17, 8):
        with pytest.raises(FormatError, match=f"golden.bin: {wrong} bytes, the index describes 16"):
            check_bin_size(index, wrong, name="golden.bin")


# --- blend files ---------------------------------------------------------------------------------------------


def test_blend_json_is_flat_alternating_weight_strings_and_prefixes_with_null_for_empty_splits():
    splits = {"train": [(0.7, "wiki/shard_00000"), (1, "code/shard_00000"), (0.25, "code/shard_00001")],
              "valid": [(1.0, "wiki_valid/shard_00000")]}
    assert blend_json(splits) == {
        "train": ["0.7", "wiki/shard_00000", "1.0", "code/shard_00000", "0.25", "code/shard_00001"],
        "valid": ["1.0", "wiki_valid/shard_00000"],
        "test": None,
    }
    assert json.loads(json.dumps(blend_json(splits))) == blend_json(splits)


@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.from_regex(r"[a-z_]{1,8}/shard_\d{5}",
                                                                              fullmatch=True)), max_size=8),
       st.sampled_from(["train", "valid", "test"]))
def test_megatrons_reader_gets_back_every_weight_and_prefix_of_every_split(tmp_path_factory, pairs, split):
    path = tmp_path_factory.mktemp("blend") / "blend.json"
    path.write_text(json.dumps(blend_json({split: pairs})))
    read = dict(zip(("train", "valid", "test"), read_blend_per_split(path), strict=True))
    for name, blend in read.items():
        if name != split or not pairs:
            assert blend is None  # Megatron reads "no dataset", not a crash
            continue
        prefixes, weights = blend
        assert list(zip(weights, prefixes, strict=True)) == [(float(w), p) for w, p in pairs]


def test_megatrons_reader_crashes_on_the_layouts_we_no_longer_write(tmp_path):
    only_train = tmp_path / "only_train.json"
    only_train.write_text(json.dumps({"train": ["1.0", "a/shard_00000"]}))
    with pytest.raises(KeyError, match="valid"):
        read_blend_per_split(only_train)
    empty_list = tmp_path / "empty.json"
    empty_list.write_text(json.dumps({"train": ["1.0", "a/shard_00000"], "valid": [], "test": None}))
    with pytest.raises(ValueError):
        read_blend_per_split(empty_list)


def test_data_path_args_one_flag_per_split_with_alternating_values():
    text = data_path_args({"train": [(0.5, "a/shard_00000"), (2, "b/shard_00000")], "valid": [(1, "v/s")],
                           "test": [(1.0, "t/s")]})
    assert text.splitlines() == [
        "--train-data-path 0.5 a/shard_00000 2.0 b/shard_00000",
        "--valid-data-path 1.0 v/s",
        "--test-data-path 1.0 t/s",
    ]
    assert text.endswith("\n")


def test_data_path_args_train_only_is_a_single_weighted_list():
    text = data_path_args({"train": [(0.5, "a/s"), (0.25, "b/s")]})
    assert text == "--train-data-path 0.5 a/s 0.25 b/s\n"


def test_data_path_args_of_a_flat_blend_is_megatrons_data_path():
    assert data_path_args({"train": [(1, "a/s")]}, flat=True) == "--data-path 1.0 a/s\n"


def _read_index(prefix) -> Index:
    path = Path(f"{prefix}.idx")
    return parse_index(path.read_bytes(), name=str(path))
