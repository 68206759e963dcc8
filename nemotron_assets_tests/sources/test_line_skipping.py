"""A shard that starts deep into a JSONL file: the rows before it are counted block by block, never parsed, and
the rows from it on come out exactly as a plain split of the file gives them. Blocks are made tiny here so every
row boundary falls at every position of a block (and for compressed files, of a decompressed block). The expected
rows come from ``bytes.split`` and ``json`` on the bytes written, never from the reader."""

import gzip
import json

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.sources import readers
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.readers import ReadOptions, ReadStats, iter_lines, iter_text_batches

COMPRESS = {"": lambda raw: raw, ".gz": gzip.compress, ".zst": lambda raw: zstandard.ZstdCompressor().compress(raw)}
COMPRESSION = {"": None, ".gz": "gzip", ".zst": "zstd"}


def stored(tmp_path, raw: bytes, suffix: str = "") -> SourceFile:
    path = tmp_path / f"rows.jsonl{suffix}"
    path.write_bytes(COMPRESS[suffix](raw))
    return SourceFile(url=str(path), size=path.stat().st_size, format="jsonl", compression=COMPRESSION[suffix])


texts = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=30)


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
@settings(max_examples=60, deadline=None)
@given(rows=texts, skip=st.integers(0, 35), block=st.integers(1, 40), trailing_newline=st.booleans())
def test_lines_after_a_skip_are_the_lines_of_the_file_from_there(tmp_path_factory, suffix, rows, skip, block,
                                                                  trailing_newline):
    raw = b"\n".join(json.dumps({"text": t}).encode() for t in rows) + (b"\n" if trailing_newline and rows else b"")
    source = stored(tmp_path_factory.mktemp("f"), raw, suffix)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(readers, "READ_CHUNK", block)
        lines = list(iter_lines(source, ReadOptions(dataset="d"), skip=skip))

    expected = raw.split(b"\n")
    if expected[-1] == b"":
        expected.pop()  # a trailing newline ends the last line, it does not start another
    assert [line.removesuffix(b"\n") for line in lines] == expected[skip:]
    assert [json.loads(line)["text"] for line in lines] == rows[skip:]


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_row_range_deep_into_a_file_read_in_tiny_blocks(tmp_path, monkeypatch, suffix):
    monkeypatch.setattr(readers, "READ_CHUNK", 7)
    rows = [f"row {i} " + "é" * (i % 5) for i in range(200)]
    source = stored(tmp_path, "".join(json.dumps({"text": t}) + "\r\n" for t in rows).encode(), suffix)
    stats = ReadStats()

    got = [t for batch in iter_text_batches(source, 150, 170, ReadOptions(dataset="d", batch_bytes=50), stats)
           for t in batch]

    assert got == rows[150:170]
    assert stats.rows == 20


def test_bad_rows_after_a_skip_keep_their_line_number_and_message(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "READ_CHUNK", 5)
    raw = b'{"text": "a"}\n' * 40 + b'{"text": "unterminated\n' + b'{"text": "b"}\n'
    source = stored(tmp_path, raw)
    with pytest.raises(InputError) as caught:
        list(iter_text_batches(source, 30, 42, ReadOptions(dataset="d"), ReadStats()))
    assert caught.value.line == 41
    # described without the line's newline, as the line reads in the file
    assert "malformed JSON: " in str(caught.value) and "control character" not in str(caught.value)


def test_a_skip_past_the_end_gives_nothing(tmp_path):
    source = stored(tmp_path, b'{"text": "a"}\n{"text": "b"}\n')
    assert list(iter_lines(source, ReadOptions(dataset="d"), skip=5)) == []
    assert list(iter_text_batches(source, 2, 9, ReadOptions(dataset="d"), ReadStats())) == []
