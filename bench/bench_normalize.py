#!/usr/bin/env python3
"""Harmony normalization benchmark: raw rows of mixed families -> normalized Harmony Parquet shards.

    .venv/bin/python bench/bench_normalize.py [--rows 200000] [--row-bytes 2000]

Generates ``--rows`` raw rows (the readable bundled post-training sample rows of every family, cycled, with their user
prompt padded to about ``--row-bytes`` so rows are chat-like ~2 KB), writes one JSONL per family, and runs the
real shard builder (``posttrain/harmony_shard.py``: read, map, render, validate, write Parquet) on each file as
one shard, in this process. Prints rows/s, and the baseline of only reading + parsing the same JSONL (the part
any tool pays) as a ratio, and the peak RSS.
"""

import argparse
import json
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "blends" / "sample_data" / "posttrain"


def padded(row: dict, target: int) -> dict:
    """The row with its first user prompt (or text) lengthened to make the row about ``target`` bytes."""
    row = json.loads(json.dumps(row))
    missing = target - len(json.dumps(row, ensure_ascii=False).encode())
    if missing <= 0:
        return row
    filler = " ".join(["the quick brown fox jumps over the lazy dog"] * (missing // 44 + 1))[:missing]
    for message in row.get("messages") or row.get("input") or []:
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            message["content"] += " " + filler
            return row
    for key in ("problem", "text"):
        if isinstance(row.get(key), str):
            row[key] += " " + filler
            return row
    return row


def readable(family: str, row: dict) -> bool:
    """The sample also holds rows a mapper must refuse; the benchmark measures rows that get normalized."""
    from nemotron_assets.normalize.base import RowError
    from nemotron_assets.normalize.families import map_row

    try:
        map_row(family, row)
    except RowError:
        return False
    return True


def generate(folder: Path, rows: int, row_bytes: int) -> dict[str, Path]:
    families = sorted(p.stem for p in SAMPLE.glob("*.jsonl"))
    per_family = rows // len(families)
    files = {}
    for family in families:
        source = [row for line in (SAMPLE / f"{family}.jsonl").open() if readable(family, row := json.loads(line))]
        path = folder / f"{family}.jsonl"
        with path.open("w") as out:
            for i in range(per_family):
                out.write(json.dumps(padded(source[i % len(source)], row_bytes), ensure_ascii=False) + "\n")
        files[family] = path
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--row-bytes", type=int, default=2000)
    args = parser.parse_args()

    from nemotron_assets.blend import Blend, DatasetEntry
    from nemotron_assets.posttrain.harmony_shard import build_harmony_shard
    from nemotron_assets.sources.manifest import build_manifest, read_options
    from nemotron_assets.sources.readers import ReadStats, iter_record_batches

    work = Path(tempfile.mkdtemp(prefix="nemotron-bench-normalize-"))
    files = generate(work, args.rows, args.row_bytes)
    total_bytes = sum(p.stat().st_size for p in files.values())
    entries = [DatasetEntry(name=f, path=str(p), family=f, num_shards=1) for f, p in files.items()]
    blend = Blend(name="bench", on_error="skip", datasets=entries)
    manifests = {e.name: build_manifest(blend, e, work) for e in entries}

    started = time.monotonic()
    parsed = 0
    for entry in entries:
        manifest = manifests[entry.name]
        for r in manifest.shards[0].ranges:
            for batch in iter_record_batches(manifest.files[r.file_index], r.row_start, r.row_end,
                                             read_options(blend, entry), ReadStats()):
                parsed += len(batch)
    baseline_s = time.monotonic() - started

    started = time.monotonic()
    written = source_rows = 0
    for entry in entries:
        stats = build_harmony_shard(manifests[entry.name], 0, entry.family, entry.split, read_options(blend, entry),
                                    work / f"{entry.name}.parquet")
        written += stats.records
        source_rows += stats.rows
    normalize_s = time.monotonic() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # The same shards over two worker processes, as two concurrent shard runs would use both cores.
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(build_harmony_shard, manifests[e.name], 0, e.family, e.split, read_options(blend, e),
                            work / f"{e.name}.2.parquet") for e in entries]
        parallel_rows = sum(job.result().rows for job in jobs)
    parallel_s = time.monotonic() - started
    worker_peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    print(f"input: {source_rows:,} rows of {len(files)} families, {total_bytes / 1e6:.1f} MB "
          f"({total_bytes / source_rows:.0f} B/row); {written:,} rows written")
    print(f"read + parse only (baseline): {parsed / baseline_s:,.0f} rows/s ({baseline_s:.2f} s)")
    print(f"normalize to Harmony Parquet: {source_rows / normalize_s:,.0f} rows/s ({normalize_s:.2f} s)")
    print(f"ratio normalize / read+parse time: {normalize_s / baseline_s:.2f}x")
    print(f"normalize, 2 worker processes: {parallel_rows / parallel_s:,.0f} rows/s ({parallel_s:.2f} s)")
    print(f"peak RSS: {peak_mb:.0f} MB (one process), {worker_peak_mb:.0f} MB (largest worker)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
