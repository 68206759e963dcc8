"""Reading committed JSONL shard files back (the jsonl_shard check and verify): each way a file can disagree with
its receipt is named, with the file."""

import zstandard

from nemotron_assets.core.records import Receipt, receipt_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.jsonl.files import shard_problems

PREFIX = "b/jsonl/d/shard_00000"


def _receipt(rows: dict, files: dict, rows_in: int | None = None, dropped: dict | None = None) -> Receipt:
    stats = {"rows_in": sum(rows.values()) if rows_in is None else rows_in, "rows": rows, "dropped": dropped or {},
             "files": {split: {"path": path, "bytes": 0, "sha256": ""} for split, path in files.items()}}
    return Receipt("jsonl_shard", "d/shard_00000", {}, {}, stats)


def _write(root, relative: str, data: bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_files_that_match_their_receipt_have_no_problem(tmp_path):
    _write(tmp_path, "b/jsonl/d/train/shard_00000.jsonl", b'{"a": 1}\n{"b": [2]}\n')
    _write(tmp_path, "b/jsonl/d/valid/shard_00000.jsonl.zst", zstandard.ZstdCompressor().compress(b'{"c": 3}\n'))
    receipt = _receipt({"train": 2, "valid": 1}, {"train": "train/shard_00000.jsonl",
                                                  "valid": "valid/shard_00000.jsonl.zst"}, rows_in=4,
                       dropped={"missing:x": 1})
    assert shard_problems(Storage(str(tmp_path)), PREFIX, receipt) == {}


def test_each_disagreement_is_named_with_its_file(tmp_path):
    _write(tmp_path, "b/jsonl/d/train/shard_00000.jsonl", b'{"a": 1}\n{"b": 2}\n')
    _write(tmp_path, "b/jsonl/d/valid/shard_00000.jsonl", b'{"a": 1}\n[1, 2]\n')
    _write(tmp_path, "b/jsonl/d/test/shard_00000.jsonl", b'{"a": 1}\n{"b": \n')
    frame = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(b'{"c": 3}\n' * 50))
    frame[-2] ^= 0xFF  # the content checksum no longer matches
    _write(tmp_path, "b/jsonl/e/train/shard_00000.jsonl.zst", bytes(frame))
    receipt = _receipt({"train": 3, "valid": 2, "test": 2}, {"train": "train/shard_00000.jsonl",
                                                             "valid": "valid/shard_00000.jsonl",
                                                             "test": "test/shard_00000.jsonl"}, rows_in=9)
    problems = shard_problems(Storage(str(tmp_path)), PREFIX, receipt)
    assert problems[receipt_path(PREFIX)] == "counts do not add up: 9 row(s) read, 7 written, 0 dropped"
    assert problems["b/jsonl/d/train/shard_00000.jsonl"] == "holds 2 line(s), its receipt says 3"
    assert problems["b/jsonl/d/valid/shard_00000.jsonl"] == "line 2 is not a JSON object"
    assert problems["b/jsonl/d/test/shard_00000.jsonl"].startswith("line 2 is not JSON: ")
    damaged = _receipt({"train": 50}, {"train": "train/shard_00000.jsonl.zst"})
    [(path, why)] = shard_problems(Storage(str(tmp_path)), "b/jsonl/e/shard_00000", damaged).items()
    assert path == "b/jsonl/e/train/shard_00000.jsonl.zst" and why.startswith("cannot be decompressed: ")
