"""Reading local data files (readers.py, files.py), resolving local paths (discovery.py) and measuring a
dataset (manifest.build_manifest). Fixture files are written here with the standard library, pyarrow and
zstandard, so expectations never come from the code under test."""

import gzip
import json
import string
from collections import Counter
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.defs.sources.manifest import build_manifest, read_options
from nemotron_assets.sources.discovery import resolve_files
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile, detect_format
from nemotron_assets.sources.manifest import iter_shard_texts
from nemotron_assets.sources.readers import (
    INVALID_UTF8,
    MALFORMED_JSON,
    MISSING_FIELD,
    NON_STRING_TEXT,
    NOT_AN_OBJECT,
    ReadOptions,
    ReadStats,
    content_digest,
    count_newlines,
    count_rows_and_hash,
    iter_text_batches,
)
from nemotron_assets.sources.selection import matches_subset_split

DATASET = "wiki"
TEXTS = [f"document {i}: " + string.ascii_lowercase[: i % 26] + " é✓" * (i % 3) for i in range(40)]


# --- helpers -------------------------------------------------------------------------------------------------


def jsonl_bytes(records: list, trailing_newline: bool = True) -> bytes:
    body = b"\n".join(json.dumps(r, ensure_ascii=False).encode() for r in records)
    return body + b"\n" if trailing_newline and records else body


def write_data(path: Path, texts: list[str], field: str = "text", trailing_newline: bool = True,
               row_group_size: int = 7) -> Path:
    """``texts`` as a data file whose format follows the suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.table({"id": list(range(len(texts))), field: texts}), path, row_group_size=row_group_size)
        return path
    raw = jsonl_bytes([{"id": i, field: t} for i, t in enumerate(texts)], trailing_newline)
    write_bytes(path, raw)
    return path


def write_bytes(path: Path, raw: bytes) -> Path:
    """Store ``raw`` (JSONL content) compressed as the suffix says."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        raw = gzip.compress(raw)
    elif path.suffix == ".zst":
        raw = zstandard.ZstdCompressor().compress(raw)
    path.write_bytes(raw)
    return path


def source_of(path: Path) -> SourceFile:
    fmt, compression = detect_format(path.name)
    return SourceFile(url=str(path), size=path.stat().st_size, format=fmt, compression=compression)


def read(path: Path, row_start: int = 0, row_end: int = 10**9, stats: ReadStats | None = None,
         **options) -> list[list[str]]:
    opts = ReadOptions(dataset=DATASET, **options)
    return list(iter_text_batches(source_of(path), row_start, row_end, opts, stats or ReadStats()))


def read_texts(path: Path, *args, **kwargs) -> list[str]:
    return [t for batch in read(path, *args, **kwargs) for t in batch]


def blend_with(path: Path, on_error: str = "raise", **entry) -> tuple[Blend, DatasetEntry]:
    dataset = DatasetEntry(name=DATASET, path=str(path), **entry)
    return Blend(name="t", on_error=on_error, num_shards=3, datasets=[dataset]), dataset


SUFFIXES = [".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet"]


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("data")
    return {suffix: write_data(folder / f"docs{suffix}", TEXTS) for suffix in SUFFIXES}


# --- reading in order ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_full_read_returns_every_text_in_order(data_files, suffix):
    assert read_texts(data_files[suffix]) == TEXTS


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize(("start", "end"), [(0, 1), (3, 17), (6, 8), (7, 14), (13, 40), (39, 40), (5, 5)])
def test_row_range_crossing_batches_returns_exactly_those_rows(data_files, suffix, start, end):
    stats = ReadStats()
    batches = read(data_files[suffix], start, end, stats, batch_bytes=64)
    assert [t for batch in batches for t in batch] == TEXTS[start:end]
    assert all(batches)  # no empty batch is yielded
    assert stats.rows == end - start and not stats.dropped


@pytest.mark.parametrize("suffix", SUFFIXES)
@settings(max_examples=40, deadline=None)
@given(start=st.integers(0, 45), length=st.integers(0, 45), batch_bytes=st.integers(1, 400))
def test_any_row_range_in_any_batch_size(data_files, suffix, start, length, batch_bytes):
    texts = read_texts(data_files[suffix], start, start + length, batch_bytes=batch_bytes)
    assert texts == TEXTS[start:start + length]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_batch_bytes_controls_batch_size(data_files, suffix):
    small = read(data_files[suffix], batch_bytes=1)
    assert [len(batch) for batch in small] == [1] * len(TEXTS)
    assert len(read(data_files[suffix], batch_bytes=10**9)) == 1


def test_parquet_row_range_reads_only_overlapping_row_groups(data_files):
    # Row groups of 7 rows: rows 7..13 are exactly the second group, 6..8 straddles the first two.
    assert read(data_files[".parquet"], 7, 14) == [TEXTS[7:14]]
    assert read(data_files[".parquet"], 6, 8) == [[TEXTS[6]], [TEXTS[7]]]


def test_non_default_text_field(tmp_path):
    for suffix in SUFFIXES:
        path = write_data(tmp_path / f"content{suffix}", TEXTS[:5], field="content")
        assert read_texts(path, text_field="content") == TEXTS[:5]


def test_file_without_trailing_newline_keeps_its_last_row(tmp_path):
    path = write_data(tmp_path / "no_newline.jsonl", TEXTS[:3], trailing_newline=False)
    assert not path.read_bytes().endswith(b"\n")
    assert read_texts(path) == TEXTS[:3]


def test_crlf_line_endings_are_read(tmp_path):
    path = write_bytes(tmp_path / "crlf.jsonl", b'{"text": "a"}\r\n{"text": "b"}\r\n')
    assert read_texts(path) == ["a", "b"]


# --- counting and hashing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
@pytest.mark.parametrize("trailing_newline", [True, False])
@pytest.mark.parametrize("count", [0, 1, 2, 40])
def test_row_count_and_content_hash_of_stored_bytes(tmp_path, suffix, trailing_newline, count):
    path = write_data(tmp_path / f"f{suffix}", TEXTS[:count], trailing_newline=trailing_newline)
    rows, digest = count_rows_and_hash(source_of(path), ReadOptions(dataset=DATASET))
    assert rows == count
    assert digest == blake3.blake3(path.read_bytes()).hexdigest()


def test_the_content_hash_is_blake3():
    # The published BLAKE3 test vectors (the spec's empty input, and "abc"), written down by hand.
    for data, expected in ((b"", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"),
                           (b"abc", "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85")):
        digest = content_digest()
        digest.update(data)
        assert digest.hexdigest() == expected


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=7))
def test_count_newlines_counts_every_newline_byte(data, misalign):
    padded = b"x" * misalign + data  # a view that does not start on an aligned address
    assert count_newlines(padded) == padded.count(b"\n")
    assert count_newlines(memoryview(padded)[misalign:]) == data.count(b"\n")


def test_parquet_row_count_and_content_hash(data_files):
    path = data_files[".parquet"]
    rows, digest = count_rows_and_hash(source_of(path), ReadOptions(dataset=DATASET))
    assert rows == len(TEXTS)
    assert digest == blake3.blake3(path.read_bytes()).hexdigest()


def test_content_hash_covers_a_large_compressed_file_completely(tmp_path):
    # Bigger than one 8 MiB read chunk once decompressed, so hashing must follow every compressed byte.
    texts = ["x" * 1000 + str(i) for i in range(9000)]
    for suffix in (".jsonl.gz", ".jsonl.zst"):
        path = write_data(tmp_path / f"big{suffix}", texts)
        rows, digest = count_rows_and_hash(source_of(path), ReadOptions(dataset=DATASET))
        assert (rows, digest) == (len(texts), blake3.blake3(path.read_bytes()).hexdigest())


# --- bad input -----------------------------------------------------------------------------------------------

GOOD = b'{"text": "good"}'
BAD_LINES = {
    "malformed_json": (b'{"text": "unterminated', MALFORMED_JSON, None, "malformed JSON"),
    "invalid_utf8": (b'{"text": "caf\xe9"}', INVALID_UTF8, None, "invalid UTF-8 at byte 13 of the line"),
    "blank_line": (b"", MALFORMED_JSON, None, "blank line"),
    "whitespace_line": (b"   ", MALFORMED_JSON, None, "blank line"),
    "not_an_object": (b'["text", "x"]', NOT_AN_OBJECT, None, "expected a JSON object, got list"),
    "number_line": (b"42", NOT_AN_OBJECT, None, "expected a JSON object, got int"),
    "missing_field": (b'{"content": "x"}', MISSING_FIELD, "text", "missing"),
    "null_text": (b'{"text": null}', NON_STRING_TEXT, "text", "expected a string, got null"),
    "number_text": (b'{"text": 3.5}', NON_STRING_TEXT, "text", "expected a string, got number"),
    "list_text": (b'{"text": ["a", "b"]}', NON_STRING_TEXT, "text", "expected a string, got array"),
    "object_text": (b'{"text": {"a": 1}}', NON_STRING_TEXT, "text", "expected a string, got object"),
    "bool_text": (b'{"text": true}', NON_STRING_TEXT, "text", "expected a string, got boolean"),
}


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_bad_jsonl_line_raises_naming_dataset_file_line_and_field(tmp_path, suffix, case):
    bad, _, field, reason = BAD_LINES[case]
    path = write_bytes(tmp_path / f"bad{suffix}", GOOD + b"\n" + GOOD + b"\n" + bad + b"\n" + GOOD + b"\n")
    with pytest.raises(InputError) as caught:
        read(path)
    error = caught.value
    assert (error.dataset, error.path, error.line, error.field, error.row) == (DATASET, str(path), 3, field, None)
    message = str(error)
    assert message.startswith(f"dataset '{DATASET}': {path}:3")
    assert reason in message
    if field is not None:
        assert f"field '{field}'" in message


def test_bad_line_numbers_are_absolute_in_a_partial_range(tmp_path):
    path = write_bytes(tmp_path / "bad.jsonl", b"\n".join([GOOD] * 10 + [b"{oops"] + [GOOD] * 3) + b"\n")
    assert read_texts(path, 0, 10) == ["good"] * 10  # the bad line is outside the range
    with pytest.raises(InputError, match=r"bad.jsonl:11: malformed JSON"):
        read(path, 8, 12)


def test_skip_counts_each_bad_line_under_its_reason_and_keeps_good_rows_in_order(tmp_path):
    lines, expected_texts, expected_drops = [], [], Counter()
    for i, case in enumerate(sorted(BAD_LINES)):
        bad, reason, _, _ = BAD_LINES[case]
        lines += [json.dumps({"text": f"good {i}"}).encode(), bad]
        expected_texts.append(f"good {i}")
        expected_drops[reason] += 1
    for suffix in (".jsonl", ".jsonl.zst"):
        path = write_bytes(tmp_path / f"mixed{suffix}", b"\n".join(lines) + b"\n")
        stats = ReadStats()
        assert read_texts(path, stats=stats, on_error="skip", batch_bytes=16) == expected_texts
        assert stats.dropped == expected_drops
        assert stats.rows == len(lines)


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_skip_counts_a_single_bad_line(tmp_path, case):
    bad, reason, _, _ = BAD_LINES[case]
    path = write_bytes(tmp_path / "one.jsonl", GOOD + b"\n" + bad + b"\n" + b'{"text": "last"}\n')
    stats = ReadStats()
    assert read_texts(path, stats=stats, on_error="skip") == ["good", "last"]
    assert stats.dropped == Counter({reason: 1})


def parquet_with_nulls(path: Path) -> Path:
    pq.write_table(pa.table({"text": ["a", "b", None, "d", None, "f"]}), path, row_group_size=4)
    return path


def test_parquet_null_text_raises_naming_dataset_file_row_and_field(tmp_path):
    path = parquet_with_nulls(tmp_path / "nulls.parquet")
    with pytest.raises(InputError) as caught:
        read(path)
    error = caught.value
    assert (error.dataset, error.path, error.row, error.field, error.line) == (DATASET, str(path), 2, "text", None)
    assert str(error) == f"dataset '{DATASET}': {path} row 2 field 'text': null"


def test_parquet_null_row_number_is_absolute_in_a_later_row_group(tmp_path):
    path = parquet_with_nulls(tmp_path / "nulls.parquet")
    assert read_texts(path, 3, 4) == ["d"]
    with pytest.raises(InputError, match=r"row 4 field 'text': null"):
        read(path, 3, 6)


def test_parquet_skip_counts_nulls_and_keeps_good_rows_in_order(tmp_path):
    path = parquet_with_nulls(tmp_path / "nulls.parquet")
    stats = ReadStats()
    assert read_texts(path, stats=stats, on_error="skip") == ["a", "b", "d", "f"]
    assert stats.dropped == Counter({NON_STRING_TEXT: 2})
    assert stats.rows == 6


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_parquet_missing_column_raises_naming_file_and_column(tmp_path, on_error):
    # A whole file without the column is a configuration error (wrong text_field), not a bad row.
    path = tmp_path / "cols.parquet"
    pq.write_table(pa.table({"content": ["a"], "id": [1]}), path)
    with pytest.raises(InputError) as caught:
        read(path, on_error=on_error)
    assert (caught.value.dataset, caught.value.path, caught.value.field) == (DATASET, str(path), "text")
    assert str(caught.value) == f"dataset '{DATASET}': {path} field 'text': no such column (columns: content, id)"


def test_parquet_non_string_column_raises(tmp_path):
    path = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), path)
    with pytest.raises(InputError, match=r"ints.parquet field 'text': column type is int64, expected string"):
        read(path)


@pytest.mark.parametrize(
    "array",
    [pa.array(["a", "b", "a"], type=pa.large_string()), pa.array(["a", "b", "a"], type=pa.string_view()),
     pa.array(["a", "b", "a"]).dictionary_encode()],
    ids=["large_string", "string_view", "dictionary"],
)
def test_parquet_string_column_variants_are_text(tmp_path, array):
    # All three are a plain UTF-8 column in Parquet; they differ only in the Arrow type stored in the metadata
    # (polars writes large_string, categorical columns come back as dictionaries).
    path = tmp_path / "variant.parquet"
    pq.write_table(pa.table({"text": array}), path)
    assert read_texts(path) == ["a", "b", "a"]


@pytest.mark.parametrize(
    ("name", "raw"),
    [("corrupt.jsonl.gz", b"this is not gzip at all\n"),
     ("truncated.jsonl.gz", gzip.compress(b'{"text": "a"}\n' * 1000, mtime=0)[:40]),
     ("corrupt.jsonl.zst", b"this is not zstd either\n")],
    ids=["corrupt_gzip", "truncated_gzip", "corrupt_zstd"],
)
def test_corrupt_compressed_file_raises_naming_the_file(tmp_path, name, raw):
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(InputError, match=rf"^dataset '{DATASET}': {path}: cannot decompress"):
        count_rows_and_hash(source_of(path), ReadOptions(dataset=DATASET))
    with pytest.raises(InputError, match=rf"^dataset '{DATASET}': {path}: cannot decompress"):
        read(path)


def test_corrupt_parquet_raises_naming_the_file(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match=rf"^dataset '{DATASET}': {path}: not a readable Parquet file"):
        count_rows_and_hash(source_of(path), ReadOptions(dataset=DATASET))


# --- formats -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "declared", "expected"),
    [("a.jsonl", None, ("jsonl", None)), ("a.jsonl.gz", None, ("jsonl", "gzip")),
     ("a.JSONL.ZST", None, ("jsonl", "zstd")), ("part.v2.parquet", None, ("parquet", None)),
     ("train-00000-of-00002.parquet", None, ("parquet", None)), ("README.md", None, None),
     ("a.txt", None, None), ("a.gz", None, None), ("a.parquet.gz", None, None),
     ("meta.json", None, None), ("train.json", "jsonl", ("jsonl", None)), ("data.bin", "jsonl", None)],
)
def test_detect_format(name, declared, expected):
    assert detect_format(name, declared) == expected


@pytest.mark.parametrize(("name", "expected"), [("data.bin", ("jsonl", None)), ("data.gz", ("jsonl", "gzip"))])
def test_a_declared_format_applies_to_any_suffix_of_a_named_file(name, expected):
    assert detect_format(name, "jsonl", any_suffix=True) == expected


# --- discovery (local) ---------------------------------------------------------------------------------------


def resolved(path: str, base_dir: Path, root: Path | None = None, **entry) -> list[str]:
    """The resolved files' paths relative to ``root`` (default ``base_dir``), in manifest order."""
    files = resolve_files(DatasetEntry(name=DATASET, path=path, **entry), base_dir).files
    return [Path(f.url).relative_to((root or base_dir).resolve()).as_posix() for f in files]


@pytest.fixture
def layout(tmp_path) -> Path:
    for name in ["d/b.jsonl", "d/a.jsonl", "d/sub/c.jsonl.gz", "d/sub/deeper/e.parquet", "d/README.md",
                 "d/notes.txt", "d/.hidden.jsonl", "d/.cache/huggingface/x.jsonl", "d/sub/.partial.jsonl.zst"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(GOOD + b"\n")
    return tmp_path


def test_single_file(layout):
    files = resolve_files(DatasetEntry(name=DATASET, path="d/a.jsonl"), layout).files
    assert [(f.url, f.size, f.format, f.compression) for f in files] == [
        (str((layout / "d/a.jsonl").resolve()), len(GOOD) + 1, "jsonl", None)]


def test_directory_is_recursive_sorted_and_ignores_non_data_and_hidden_files(layout):
    assert resolved("d", layout) == ["d/a.jsonl", "d/b.jsonl", "d/sub/c.jsonl.gz", "d/sub/deeper/e.parquet"]


def test_absolute_directory_path(layout):
    assert resolved(str(layout / "d"), Path("/nonexistent"), root=layout) == resolved("d", layout)


def test_directory_order_is_path_string_order(tmp_path):
    # The same order as the s3:// and hf:// listings (sorted key strings): "-" < "." < "/".
    for name in ["ds/a/z.jsonl", "ds/a-b/y.jsonl", "ds/a.jsonl", "ds/B.jsonl"]:
        write_data(tmp_path / name, ["t"])
    assert resolved("ds", tmp_path) == ["ds/B.jsonl", "ds/a-b/y.jsonl", "ds/a.jsonl", "ds/a/z.jsonl"]


def test_glob(layout):
    assert resolved("d/*.jsonl", layout) == ["d/a.jsonl", "d/b.jsonl"]
    assert resolved("d/**/*.jsonl*", layout) == ["d/a.jsonl", "d/b.jsonl", "d/sub/c.jsonl.gz"]


@pytest.mark.parametrize("path", ["missing", "d/missing.jsonl"])
def test_missing_path_names_dataset_and_path(layout, path):
    with pytest.raises(InputError) as caught:
        resolve_files(DatasetEntry(name=DATASET, path=path), layout)
    message = str(caught.value)
    assert message.startswith(f"dataset '{DATASET}': field 'path': no such file or directory")
    assert str(layout / path) in message


def test_folder_without_data_files_raises(layout):
    (layout / "empty").mkdir()
    (layout / "empty" / "README.md").write_text("x")
    with pytest.raises(InputError, match=f"dataset '{DATASET}'.*no data files.*found at empty"):
        resolve_files(DatasetEntry(name=DATASET, path="empty"), layout)


def test_glob_matching_nothing_raises(layout):
    with pytest.raises(InputError, match=r"no data files .* found at d/\*.parquet"):
        resolve_files(DatasetEntry(name=DATASET, path="d/*.parquet"), layout)


def test_explicit_non_data_file_raises(layout):
    with pytest.raises(InputError, match=r"README.md is not a data file"):
        resolve_files(DatasetEntry(name=DATASET, path="d/README.md"), layout)


def test_unsupported_url_scheme_raises(layout):
    with pytest.raises(InputError, match=r"unsupported URL scheme in 'ftp://host/x.jsonl'"):
        resolve_files(DatasetEntry(name=DATASET, path="ftp://host/x.jsonl"), layout)


def test_subset_4plus_does_not_match_4plus_MIND(tmp_path):
    for name in ["data/4plus/a.parquet", "data/4plus/nested/b.parquet", "data/4plus_MIND/a.parquet",
                 "data/MIND_4plus/c.parquet", "data/x4plus/d.parquet", "data/4plus.parquet"]:
        write_data(tmp_path / name, ["t"])
    assert resolved("data", tmp_path, subset="4plus") == ["data/4plus/a.parquet", "data/4plus/nested/b.parquet"]
    assert resolved("data", tmp_path, subset="4plus_MIND") == ["data/4plus_MIND/a.parquet"]
    assert resolved("data/**/*.parquet", tmp_path, subset="4plus") == [
        "data/4plus/a.parquet", "data/4plus/nested/b.parquet"]


def test_split_matches_file_stem_or_folder_exactly(tmp_path):
    for name in ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet", "training.jsonl",
                 "train.jsonl", "test-00000-of-00001.parquet", "trains/x.jsonl", "train/y.jsonl",
                 "validation-00000-of-00001.parquet"]:
        write_data(tmp_path / "ds" / name, ["t"])
    assert resolved("ds", tmp_path, split="train") == [
        "ds/train-00000-of-00002.parquet", "ds/train-00001-of-00002.parquet", "ds/train.jsonl", "ds/train/y.jsonl"]
    assert resolved("ds", tmp_path, split="validation") == ["ds/validation-00000-of-00001.parquet"]


@pytest.mark.parametrize(
    ("relative", "subset", "split", "expected"),
    [("4plus/train-00000-of-00002.parquet", "4plus", "train", True),
     ("4plus_MIND/train-00000-of-00002.parquet", "4plus", "train", False),
     ("4plus/test-00000-of-00002.parquet", "4plus", "train", False),
     ("data/4plus/train/x.parquet", "4plus", "train", True),
     ("training.jsonl", None, "train", False),
     ("train.jsonl.gz", None, "train", True),
     ("x.jsonl", None, None, True),
     ("4plus", "4plus", None, False)],
)
def test_matches_subset_split(relative, subset, split, expected):
    assert matches_subset_split(relative, subset, split) is expected


# --- build_manifest on local files ---------------------------------------------------------------------------


def test_manifest_measures_files_and_its_shards_reproduce_the_input(tmp_path):
    write_data(tmp_path / "ds/part-0.jsonl", TEXTS[:25])
    write_data(tmp_path / "ds/part-1.jsonl.zst", TEXTS[25:])
    blend, entry = blend_with(tmp_path / "ds")
    manifest = build_manifest(blend, entry, tmp_path)
    assert [f.rows for f in manifest.files] == [25, 15]
    assert [f.fingerprint for f in manifest.files] == [
        "blake3:" + blake3.blake3((tmp_path / p).read_bytes()).hexdigest()
        for p in ("ds/part-0.jsonl", "ds/part-1.jsonl.zst")]
    assert (manifest.dataset, manifest.split, manifest.total_rows) == (DATASET, "train", 40)
    assert len(manifest.shards) == 3
    options, stats = read_options(blend, entry), ReadStats()
    texts = [t for i in range(3) for batch in iter_shard_texts(manifest, i, options, stats) for t in batch]
    assert texts == TEXTS
    assert stats.rows == 40


def test_a_file_with_its_recorded_size_and_mtime_is_not_read_again_and_any_other_is(tmp_path):
    import dataclasses
    import os

    from nemotron_assets.defs.sources.manifest import Measured, _unchanged, measure_dataset

    path = tmp_path / "ds/part-0.jsonl"
    write_data(path, TEXTS[:25])
    blend, entry = blend_with(tmp_path / "ds")
    first = measure_dataset(blend, entry, tmp_path)
    assert first.stamps == {str(path): path.stat().st_mtime_ns}
    # same size and modification time, other bytes: provably "the same file" by the rule, so it is not read
    stamp = path.stat().st_mtime_ns
    path.write_bytes(path.read_bytes().replace(b"a", b"b", 1))
    os.utime(path, ns=(stamp, stamp))
    assert measure_dataset(blend, entry, tmp_path, known=first).manifest == first.manifest
    # another modification time: read and hashed again
    os.utime(path, ns=(stamp + 1_000_000, stamp + 1_000_000))
    again = measure_dataset(blend, entry, tmp_path, known=first)
    assert again.manifest.files[0].fingerprint != first.manifest.files[0].fingerprint
    assert again.stamps[str(path)] == stamp + 1_000_000
    # an S3 object: its ETag decides, with no modification time
    before = dataclasses.replace(first.manifest.files[0], url="s3://b/k.jsonl", fingerprint="etag:1")
    known = Measured(first.manifest)
    assert _unchanged(dataclasses.replace(before, rows=0), None, before, known)
    assert not _unchanged(dataclasses.replace(before, fingerprint="etag:2"), None, before, known)
    assert not _unchanged(dataclasses.replace(before, size=before.size + 1), None, before, known)


def test_manifest_max_rows_keeps_the_first_rows(tmp_path):
    write_data(tmp_path / "ds/part-0.jsonl", TEXTS[:25])
    write_data(tmp_path / "ds/part-1.jsonl", TEXTS[25:])
    blend, entry = blend_with(tmp_path / "ds")
    manifest = build_manifest(blend, entry, tmp_path, max_rows=30)
    options = read_options(blend, entry)
    texts = [t for i in range(len(manifest.shards))
             for batch in iter_shard_texts(manifest, i, options, ReadStats()) for t in batch]
    assert texts == TEXTS[:30]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_empty_file_raises_naming_the_file(tmp_path, suffix):
    write_data(tmp_path / "ds/a.jsonl", TEXTS[:3])
    empty = write_data(tmp_path / f"ds/b{suffix}", [])
    blend, entry = blend_with(tmp_path / "ds")
    with pytest.raises(InputError) as caught:
        build_manifest(blend, entry, tmp_path)
    assert caught.value.path == str(empty.resolve())
    assert str(caught.value).startswith(f"dataset '{DATASET}': {empty.resolve()}: empty file")


def test_empty_file_with_skip_is_recorded(tmp_path):
    write_data(tmp_path / "ds/a.jsonl", TEXTS[:3])
    empty = write_data(tmp_path / "ds/b.jsonl.gz", [])
    blend, entry = blend_with(tmp_path / "ds", on_error="skip")
    manifest = build_manifest(blend, entry, tmp_path)
    assert manifest.skipped_empty_files == [str(empty.resolve())]
    assert manifest.total_rows == 3
    assert all(r.file_index == 0 for shard in manifest.shards for r in shard.ranges)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_dataset_of_only_empty_files_always_raises(tmp_path, on_error):
    write_data(tmp_path / "ds/a.jsonl", [])
    write_data(tmp_path / "ds/b.jsonl.zst", [])
    blend, entry = blend_with(tmp_path / "ds", on_error=on_error)
    first_empty = f"dataset '{DATASET}': {(tmp_path / 'ds/a.jsonl').resolve()}: empty file"
    empty_dataset = f"dataset '{DATASET}': field 'path': empty dataset: 2 file(s) at {tmp_path / 'ds'} hold no rows"
    with pytest.raises(InputError) as caught:
        build_manifest(blend, entry, tmp_path)
    assert str(caught.value).startswith(first_empty if on_error == "raise" else empty_dataset)


def test_manifest_uses_the_entry_text_field(tmp_path):
    write_data(tmp_path / "c.parquet", TEXTS[:4], field="content")
    blend, entry = blend_with(tmp_path / "c.parquet", text_field="content")
    manifest = build_manifest(blend, entry, tmp_path)
    options = read_options(blend, entry)
    texts = [t for i in range(len(manifest.shards))
             for batch in iter_shard_texts(manifest, i, options, ReadStats()) for t in batch]
    assert texts == TEXTS[:4]


def test_declared_format_applies_to_a_named_file_but_not_to_stray_files_in_a_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "part.jsonl").write_text('{"text": "a"}\n')
    (folder / "README.md").write_text("# not data\n")
    (folder / "dump.txt").write_text('{"text": "b"}\n')
    in_folder = resolve_files(DatasetEntry(name="d", path=str(folder), format="jsonl"), tmp_path).files
    assert [Path(f.url).name for f in in_folder] == ["part.jsonl"]
    named = resolve_files(DatasetEntry(name="d", path=str(folder / "dump.txt"), format="jsonl"), tmp_path).files
    assert [(Path(f.url).name, f.format) for f in named] == [("dump.txt", "jsonl")]


def test_parquet_row_ranges_stream_across_record_batches(tmp_path):
    path = tmp_path / "big.parquet"
    texts = [f"row {i}" for i in range(10_000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=6000)
    source = SourceFile(str(path), path.stat().st_size, "parquet", None, 10_000)
    options = ReadOptions(dataset="big")
    got = [t for batch in iter_text_batches(source, 4095, 8193, options, ReadStats()) for t in batch]
    assert got == texts[4095:8193]


def test_whole_row_reader_names_the_line_of_non_utf8_and_truncated_json_or_counts_them(tmp_path):
    from nemotron_assets.sources.readers import iter_record_batches

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff\xfe"}\n{"a": 3}\n{"a": [1, 2\n')
    source = SourceFile(str(path), path.stat().st_size, "jsonl", None, 4)
    with pytest.raises(InputError, match=r"rows\.jsonl:2: invalid UTF-8"):
        list(iter_record_batches(source, 0, 4, ReadOptions(dataset="d"), ReadStats()))
    stats = ReadStats()
    rows = [r for batch in iter_record_batches(source, 0, 4, ReadOptions(dataset="d", on_error="skip"), stats)
            for r in batch]
    assert rows == [(0, {"a": 1}), (2, {"a": 3})]
    assert dict(stats.dropped) == {"invalid_utf8": 1, "malformed_json": 1} and stats.rows == 4
