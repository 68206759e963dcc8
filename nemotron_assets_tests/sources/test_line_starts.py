"""Line starts in the manifest: the counting pass records where some lines of an uncompressed JSONL file start, and a
reader of rows deep into the file seeks there instead of counting its way through every line before.

The expected offsets come from ``bytes.split`` on the bytes written, never from the reader; the rows read are
compared with the rows written. ``LINE_START_EVERY`` and ``READ_CHUNK`` are made tiny so a small file has many."""

import gzip
import json

import pytest

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.defs.sources.manifest import build_manifest
from nemotron_assets.sources import readers
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.readers import ReadOptions, ReadStats, count_rows_and_hash, iter_lines, iter_text_batches

TEXTS = [f"row {i} " + "é" * (i % 7) + "x" * (i * 13 % 50) for i in range(300)]
RAW = "".join(json.dumps({"text": t}) + "\n" for t in TEXTS).encode()
LINE_OFFSETS = [0]  # where each line of RAW starts, from the bytes alone
for line in RAW.split(b"\n")[:-2]:
    LINE_OFFSETS.append(LINE_OFFSETS[-1] + len(line) + 1)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(readers, "READ_CHUNK", 97)
    monkeypatch.setattr(readers, "LINE_START_EVERY", 1000)


def stored(tmp_path, raw: bytes = RAW, compression: str | None = None, line_starts=()) -> SourceFile:
    path = tmp_path / ("rows.jsonl.gz" if compression else "rows.jsonl")
    path.write_bytes(gzip.compress(raw) if compression else raw)
    return SourceFile(str(path), path.stat().st_size, "jsonl", compression, len(TEXTS), line_starts=line_starts)


def counted_line_starts(source: SourceFile) -> list[tuple[int, int]]:
    starts: list[tuple[int, int]] = []
    rows, _ = count_rows_and_hash(source, ReadOptions(dataset="d"), starts)
    assert rows == len(TEXTS)
    return starts


def test_the_counting_pass_records_true_line_starts_about_every_line_start_every_bytes(tmp_path, small_blocks):
    starts = counted_line_starts(stored(tmp_path))

    assert len(starts) >= len(RAW) // 1000 - 1
    assert all(LINE_OFFSETS[line] == offset for line, offset in starts)
    assert [line for line, _ in starts] == sorted({line for line, _ in starts})  # increasing, no repeats
    assert all(0 < line < len(TEXTS) for line, _ in starts)  # none at the end of the file


def test_a_compressed_file_records_none(tmp_path, small_blocks):
    assert counted_line_starts(stored(tmp_path, compression="gzip")) == []


@pytest.mark.parametrize(("start", "end"), [(0, 300), (150, 170), (299, 300), (37, 38)])
def test_reading_from_a_recorded_line_start_gives_the_same_rows_and_reads_only_from_there(tmp_path, monkeypatch,
                                                                                           small_blocks, start, end):
    source = stored(tmp_path)
    source = stored(tmp_path, line_starts=counted_line_starts(source))
    read = []

    def counting_open(url, storage_options=None):
        stream = open(url, "rb")
        original = stream.read

        def read_counted(size=-1):
            data = original(size)
            read.append(len(data))
            return data

        stream.read = read_counted
        return stream

    monkeypatch.setattr(readers, "open_raw", counting_open)
    stats = ReadStats()
    texts = [t for batch in iter_text_batches(source, start, end, ReadOptions(dataset="d"), stats) for t in batch]

    assert texts == TEXTS[start:end] and stats.rows == end - start
    first = max((offset for line, offset in source.line_starts if line <= start), default=0)
    assert sum(read) <= len(RAW) - first + 1 + 97  # the newline check, and one block past the range at most
    assert [line.rstrip(b"\n") for line in iter_lines(source, ReadOptions(dataset="d"), skip=start)] == \
        RAW.split(b"\n")[start:-1]


def test_a_recorded_line_start_that_is_not_after_a_newline_is_not_trusted(tmp_path, small_blocks):
    wrong = [(200, LINE_OFFSETS[200] + 3), (100, LINE_OFFSETS[150])]  # the file changed: neither is where it says
    for line_start in wrong:
        source = stored(tmp_path, line_starts=(line_start,))
        got = [t for batch in iter_text_batches(source, 210, 220, ReadOptions(dataset="d"), ReadStats()) for t in batch]
        if line_start[1] == LINE_OFFSETS[150]:
            assert got == TEXTS[260:270]  # a line start is trusted when a newline precedes it (the manifest's word)
        else:
            assert got == TEXTS[210:220]


def test_the_manifest_keeps_line_starts_and_reads_manifests_without_them(tmp_path, small_blocks):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "rows.jsonl").write_bytes(RAW)
    dataset = DatasetEntry(name="d", path=str(tmp_path / "ds"))
    manifest = build_manifest(Blend(name="t", num_shards=3, datasets=[dataset]), dataset, tmp_path)

    assert manifest.files[0].line_starts and all(LINE_OFFSETS[line] == at for line, at in manifest.files[0].line_starts)
    again = SourceManifest.from_json(json.loads(manifest.to_bytes()))
    assert again.files[0].line_starts == manifest.files[0].line_starts
    old = json.loads(manifest.to_bytes())
    del old["files"][0]["line_starts"]  # written before line starts existed
    assert SourceManifest.from_json(old).files[0].line_starts == ()
    assert SourceManifest.from_json(old).shard_fingerprint(1) == manifest.shard_fingerprint(1)  # not the identity
