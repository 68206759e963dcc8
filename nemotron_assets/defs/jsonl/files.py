"""Read committed JSONL shard files back: what the ``jsonl_shard`` check and ``verify`` look at beyond the hashes.

For each file a shard's receipt lists: it decompresses (zstd frames carry a content checksum, so a damaged frame
is an error, not garbage), every line is one JSON object, and the lines number what the receipt says its split
received. And the receipt's own counts add up: rows read = rows written + rows dropped.
"""

import io
from collections.abc import Iterator

import orjson
import zstandard

from nemotron_assets.core.records import Receipt, output_path, receipt_path
from nemotron_assets.core.storage import Storage

READ_BUFFER = 1 << 20


def iter_lines(store: Storage, relative: str) -> Iterator[bytes]:
    """The lines of a committed ``.jsonl`` or ``.jsonl.zst`` file, decompressed, streaming."""
    with store.open(relative) as raw:
        stream = zstandard.ZstdDecompressor().stream_reader(raw) if relative.endswith(".zst") else raw
        yield from io.BufferedReader(stream, READ_BUFFER)


def file_problem(store: Storage, relative: str, lines_expected: int) -> str | None:
    """Why one file is not what its receipt says (None when it is)."""
    lines = 0
    try:
        for lines, line in enumerate(iter_lines(store, relative), start=1):
            try:
                parsed = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                return f"line {lines} is not JSON: {exc}"
            if not isinstance(parsed, dict):
                return f"line {lines} is not a JSON object"
    except zstandard.ZstdError as exc:
        return f"cannot be decompressed: {exc}"
    if lines != lines_expected:
        return f"holds {lines:,} line(s), its receipt says {lines_expected:,}"
    return None


def shard_problems(store: Storage, prefix: str, receipt: Receipt) -> dict[str, str]:
    """Problems of one shard (``prefix`` as in layout.py ``jsonl_shard_prefix``): file path (relative to the
    storage root) -> why; empty when every file reads back as its receipt says."""
    stats = receipt.stats
    problems = {}
    written = sum(stats["rows"].values())
    if stats["rows_in"] != written + sum(stats["dropped"].values()):
        problems[receipt_path(prefix)] = (f"counts do not add up: {stats['rows_in']:,} row(s) read, {written:,} "
                                          f"written, {sum(stats['dropped'].values()):,} dropped")
    for split, recorded in stats["files"].items():
        relative = output_path(prefix, recorded["path"])
        problem = file_problem(store, relative, stats["rows"].get(split, 0))
        if problem:
            problems[relative] = problem
    return problems
