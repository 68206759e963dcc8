"""A Harmony shard normalized on two cores (defs/harmony/build.py, "On several cores") is the shard one process
writes: the same bytes, the same counts and examples in the same order, and when it fails, the same error.

The threshold is lowered (``PARALLEL_BYTES = 0``) and the pieces made small, so that inputs of a few dozen rows
are cut into many pieces whose ends do not line up with the batches'.
"""

import dataclasses
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemotron_assets.core import workers
from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.defs.harmony import build
from nemotron_assets.defs.sources.manifest import build_manifest, read_options
from nemotron_assets.sources import readers

FIXTURES = Path(__file__).parents[2] / "normalize" / "fixtures"
#: Lines a JSONL reader refuses (with on_error: skip, counted by reason).
BAD_LINES = [b"{not json\n", b"[1, 2]\n", b"\n", b"\xff\xfe{}\n", b'"a string"\n']


@pytest.fixture
def pieces(monkeypatch) -> list[int]:
    """Every shard of at least one byte goes to two workers, in pieces of ~300 bytes; Parquet record batches of 5
    rows. Yields how many pieces each build on two cores sent (none: it ran in one process)."""
    sent: list[int] = []

    def counted_in_order(function, tasks, processes, **options):
        sent.append(0)

        def counted():
            for task in tasks:
                sent[-1] += 1
                yield task

        return workers.in_order(function, counted(), processes, **options)

    monkeypatch.setattr(build, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(build, "PIECE_BYTES", 300)
    monkeypatch.setattr(build, "in_order", counted_in_order)
    monkeypatch.setattr(readers, "PARQUET_BATCH_ROWS", 5)
    return sent


def jsonl(rows: list) -> list[bytes]:
    return [json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in rows]


def fixture_rows(family: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()]


def shard(path: Path, family: str, *, on_error: str = "skip", batch_bytes: int = 700, num_shards: int = 1):
    """(manifest, read options) of the dataset at ``path`` (a file or a folder of files)."""
    entry = DatasetEntry(name="ds", path=str(path), family=family, num_shards=num_shards)
    blend = Blend(name="b", on_error=on_error, datasets=[entry])
    options = dataclasses.replace(read_options(blend, entry), batch_bytes=batch_bytes)
    return build_manifest(blend, entry, path.parent), options


def built(manifest, family: str, options, out: Path, cores: int, index: int = 0) -> tuple:
    """(file bytes, the stats as JSON: key order counts), or ("error", its type and message)."""
    try:
        stats = build.build_harmony_shard(manifest, index, family, None, options, out, cores=cores)
    except build.READ_ERRORS as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    return out.read_bytes(), json.dumps(stats.as_dict())


def one_and_two_cores(tmp_path: Path, manifest, family: str, options, index: int = 0) -> tuple[tuple, tuple]:
    return tuple(built(manifest, family, options, tmp_path / f"cores{cores}.parquet", cores, index)
                 for cores in (1, 2))


def mixed_rows(copies: int) -> list[dict]:
    """The Open Math Reasoning fixture rows (a row the mapper cannot read, one it skips, invalid ones), ``copies``
    times."""
    return fixture_rows("open_math_reasoning") * copies


def write_jsonl_with_bad_lines(path: Path, rows: list[dict]) -> None:
    lines = jsonl(rows)
    for at, bad in zip(range(3, len(lines), 7), BAD_LINES * len(lines)):
        lines.insert(at, bad)
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize(("suffix", "files", "num_shards", "index"), [
    ("jsonl", 1, 1, 0), ("jsonl", 2, 1, 0), ("jsonl", 1, 2, 1),
    ("parquet", 1, 1, 0), ("parquet", 2, 1, 0), ("parquet", 1, 2, 1)])
def test_two_cores_write_the_bytes_counts_and_examples_of_one(tmp_path, pieces, suffix, files, num_shards, index):
    folder = tmp_path / "data"
    folder.mkdir()
    for number in range(files):
        rows = mixed_rows(6 + number)
        if suffix == "jsonl":
            write_jsonl_with_bad_lines(folder / f"part{number}.jsonl", rows)
        else:
            pq.write_table(pa.Table.from_pylist(rows), folder / f"part{number}.parquet", row_group_size=7)
    manifest, options = shard(folder, "open_math_reasoning", num_shards=num_shards)
    one, two = one_and_two_cores(tmp_path, manifest, "open_math_reasoning", options, index)
    assert pieces and pieces[0] >= 5  # the two-core build ran in pieces
    stats = json.loads(one[1])
    assert pq.ParquetFile(tmp_path / "cores1.parquet").num_row_groups >= 3
    assert {"unreadable:pass_rate_72b_tir", "skipped:no_solution"} <= set(stats["dropped"])
    if suffix == "jsonl":
        assert {"malformed_json", "not_an_object", "invalid_utf8"} & set(stats["dropped"])
    assert two == one


# --- any mix of rows --------------------------------------------------------------------------------------------
TEXT_ROWS = {  # the text family: a row per kind
    "written": st.text(min_size=1, max_size=60).filter(str.strip).map(lambda text: jsonl([{"text": text}])[0]),
    "skipped": st.just(jsonl([{"text": " "}])[0]),  # skipped:empty_text
    "unreadable": st.just(jsonl([{"text": 42}])[0]),  # unreadable:text
    "bad line": st.sampled_from(BAD_LINES),
}


# 40 examples, each forking two workers: ~8 s on the 2-core CI machine (100 took 21 s)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(*TEXT_ROWS.values()), min_size=1, max_size=60),
       last_without_newline=st.booleans(), on_error=st.sampled_from(["skip", "raise"]),
       batch_bytes=st.integers(1, 500), piece_bytes=st.integers(1, 500))
def test_any_rows_give_on_two_cores_what_they_give_on_one(tmp_path_factory, pieces, monkeypatch, lines,
                                                          last_without_newline, on_error, batch_bytes, piece_bytes):
    monkeypatch.setattr(build, "PIECE_BYTES", piece_bytes)
    tmp_path = tmp_path_factory.mktemp("rows")
    data = b"".join([*jsonl([{"text": "a first row"}]), *lines])  # a file of no rows has no shard
    (tmp_path / "data.jsonl").write_bytes(data[:-1] if last_without_newline and data.endswith(b"\n") else data)
    manifest, options = shard(tmp_path / "data.jsonl", "text", on_error=on_error, batch_bytes=batch_bytes)
    one, two = one_and_two_cores(tmp_path, manifest, "text", options)
    assert two == one


# --- the error a shard fails with --------------------------------------------------------------------------------
def chat_rows(count: int, unreadable: tuple[int, ...]) -> list[dict]:
    """``count`` OpenAI chat rows, those at ``unreadable`` without their messages."""
    good = {"messages": [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]}
    return [{"id": row} if row in unreadable else {"id": row, **good} for row in range(count)]


def test_the_first_bad_row_fails_the_shard_even_when_a_later_piece_fails_first(tmp_path, pieces, monkeypatch):
    """Row 0 takes its time, so the worker of the later pieces reaches their bad row first."""
    normalize_row = build.normalize_row

    def slow_first_row(family, raw, **where):
        if where["row_index"] == 0:
            time.sleep(0.5)
        return normalize_row(family, raw, **where)

    monkeypatch.setattr(build, "normalize_row", slow_first_row)  # the forked workers inherit it
    source = tmp_path / "chat.jsonl"
    source.write_bytes(b"".join(jsonl(chat_rows(60, unreadable=(2, 40)))))
    manifest, options = shard(source, "openai_chat", on_error="raise", batch_bytes=100_000)
    one, two = one_and_two_cores(tmp_path, manifest, "openai_chat", options)
    assert pieces[0] >= 3
    assert two == one == ("error", f"InputError: dataset 'ds': {source}:3 field 'messages': missing")


@pytest.mark.parametrize("batch_bytes", [1, 300, 100_000])
def test_a_bad_line_and_an_unreadable_row_fail_the_shard_in_the_order_one_process_meets_them(
        tmp_path, pieces, batch_bytes):
    """One process reads a whole batch before it normalizes it: a bad line later in the batch of an unreadable row
    fails the shard first; once that batch is written, the unreadable row does."""
    source = tmp_path / "chat.jsonl"
    lines = jsonl(chat_rows(30, unreadable=(4,)))
    lines.insert(12, b"{not json\n")
    source.write_bytes(b"".join(lines))
    manifest, options = shard(source, "openai_chat", on_error="raise", batch_bytes=batch_bytes)
    one, two = one_and_two_cores(tmp_path, manifest, "openai_chat", options)
    assert two == one
    if batch_bytes == 100_000:  # one batch
        assert one[1].startswith(f"InputError: dataset 'ds': {source}:13: malformed JSON")
    else:
        assert one[1] == f"InputError: dataset 'ds': {source}:5 field 'messages': missing"


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_file_cut_short_fails_the_shard_after_the_rows_read_before_it(tmp_path, pieces, monkeypatch, on_error):
    """The file is decompressed a megabyte at a time, so its first rows are read before the error: one process
    normalizes their batches first, and fails at row 20 (on_error: raise), or at the cut (skip); two cores too,
    although the error comes in the middle of the first piece."""
    monkeypatch.setattr(build, "PIECE_BYTES", 4 << 20)
    source = tmp_path / "chat.jsonl.gz"
    rows = [{**row, "filler": "x" * 800} for row in chat_rows(1500, unreadable=(20,))]  # 1.3 MB
    source.write_bytes(gzip.compress(b"".join(jsonl(rows))))
    manifest, options = shard(source, "openai_chat", on_error=on_error, batch_bytes=20_000)
    source.write_bytes(source.read_bytes()[:-100])  # after it was measured
    one, two = one_and_two_cores(tmp_path, manifest, "openai_chat", options)
    assert two == one
    if on_error == "raise":
        assert one[1] == f"InputError: dataset 'ds': {source}:21 field 'messages': missing"
    else:
        assert one[1].startswith(f"InputError: dataset 'ds': {source}: cannot decompress (gzip)")


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_damaged_parquet_file_fails_the_shard_after_the_record_batches_read_before_it(tmp_path, pieces, on_error):
    source = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist(chat_rows(1000, unreadable=(20,))), source, row_group_size=100,
                   compression="none")
    manifest, options = shard(source, "openai_chat", on_error=on_error, batch_bytes=300)
    data = bytearray(source.read_bytes())
    data[len(data) // 2:len(data) // 2 + 200] = b"\xff" * 200  # after it was measured
    source.write_bytes(bytes(data))
    one, two = one_and_two_cores(tmp_path, manifest, "openai_chat", options)
    assert two == one and one[0] == "error"
    if on_error == "raise":
        assert one[1] == f"InputError: dataset 'ds': {source} row 20 field 'messages': is null"


# --- when it runs on several cores -------------------------------------------------------------------------------
def test_a_small_shard_or_one_core_normalizes_in_this_process(tmp_path, pieces, monkeypatch):
    source = tmp_path / "chat.jsonl"
    source.write_bytes(b"".join(jsonl(chat_rows(20, unreadable=()))))
    manifest, options = shard(source, "openai_chat")
    built(manifest, "openai_chat", options, tmp_path / "one_core.parquet", cores=1)
    monkeypatch.setattr(build, "PARALLEL_BYTES", source.stat().st_size + 1)
    built(manifest, "openai_chat", options, tmp_path / "small.parquet", cores=2)
    assert pieces == []
    monkeypatch.setattr(build, "PARALLEL_BYTES", source.stat().st_size)
    built(manifest, "openai_chat", options, tmp_path / "large.parquet", cores=2)
    assert len(pieces) == 1


def test_a_batch_of_many_pieces_is_written_as_one_batch_of_one_process(tmp_path, pieces, monkeypatch):
    """Megabytes per column in a batch: the writer cuts pages where its 1 MB limit falls, and a table in chunks (one
    per piece) would be cut at other places."""
    monkeypatch.setattr(build, "PIECE_BYTES", 100_000)
    source = tmp_path / "docs.jsonl"
    source.write_bytes(b"".join(jsonl([{"text": f"document {row}: " + "lorem ipsum " * 300} for row in range(1200)])))
    manifest, options = shard(source, "text", batch_bytes=3 << 20)
    one, two = one_and_two_cores(tmp_path, manifest, "text", options)
    assert pieces[0] >= 40 and pq.ParquetFile(tmp_path / "cores1.parquet").num_row_groups == 2
    assert two == one


STOPPED_BUILD = """
import json, os, signal, sys, threading, time
from pathlib import Path
from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.defs.harmony import build
from nemotron_assets.defs.sources.manifest import build_manifest, read_options

class Stop(Exception):
    pass

def stop(signum, frame):  # as Dagster's handler does: an exception in the main thread
    raise Stop

def slow(family, raw, **where):
    time.sleep(0.05)
    return normalize_row(family, raw, **where)

signal.signal(signal.SIGTERM, stop)
normalize_row, build.normalize_row, build.PARALLEL_BYTES, build.PIECE_BYTES = build.normalize_row, slow, 1, 2000
folder = Path(sys.argv[1])
row = {"messages": [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]}
(folder / "chat.jsonl").write_text((json.dumps(row) + "\\n") * 400)
entry = DatasetEntry(name="ds", path=str(folder / "chat.jsonl"), family="openai_chat", num_shards=1)
blend = Blend(name="b", datasets=[entry])
manifest = build_manifest(blend, entry, folder)
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    build.build_harmony_shard(manifest, 0, "openai_chat", None, read_options(blend, entry), folder / "out.parquet",
                              cores=2)
except Stop:
    print("stopped")
children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
print("children:", children)
"""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="lists a process's children from /proc (Linux)")
def test_a_stopped_build_leaves_no_worker_behind(tmp_path):
    done = subprocess.run([sys.executable, "-c", STOPPED_BUILD, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["stopped", "children: []"]
