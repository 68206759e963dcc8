#!/usr/bin/env python3
"""Harmony normalization through the real CLI: raw post-training rows of mixed families -> normalized shards, on
one core and on two, in one invocation.

    .venv/bin/python bench/bench_normalize.py [--rows 200000] [--row-bytes 2000] [--runs 1]
        [--compare-tree /path/to/another/checkout]

The input: ``--rows`` rows of the eight NVIDIA post-training families (Llama-Nemotron and the seven
Nemotron-* ones), equally many of each, cycling the readable rows of ``blends/sample_data/posttrain/`` with the
first user prompt padded so that a row is about ``--row-bytes`` (chat-like ~2 KB rows). One JSONL file and one
dataset (``num_shards: 1``) per family: 8 shards. Generated once into ``--cache``.

Each measurement is ``python -m nemotron_assets materialize <blend> --select source_split,harmony_shard
--build-processes N`` (a checkout from before the step built its shards in parallel: ``--jobs N``) in a fresh temp
instance and data root (``cli_runs.py``). The rate is source rows / the ``harmony_shard`` step's
wall time (from the end of the source split to the end of the last shard run, so starting the worker processes
counts). Printed: each rate, their ratio (target: 2 processes >= 1.7x 1), the peak RSS of the largest
process during the step (target: <= 1 GiB per worker), and, for reference, reading + parsing the same files with
orjson. ``--compare-tree`` measures another checkout's CLI the same way in the same invocation.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import orjson
from cli_runs import print_run, run_cli

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "blends" / "sample_data" / "posttrain"
FAMILIES = ("llama_nemotron", "nemotron_agentic", "nemotron_competitive_programming", "nemotron_if_chat",
            "nemotron_math_proofs", "nemotron_math_v2", "nemotron_post_training", "nemotron_science")
BLEND = "normalize_bench"
TARGET_SPEEDUP = 1.7
TARGET_RSS_MB = 1024


def padded(row: dict, target: int) -> dict:
    """The row with its first user prompt (or problem) lengthened to make the row about ``target`` bytes."""
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


def generate(folder: Path, rows: int, row_bytes: int) -> list[Path]:
    """One JSONL file per family (already there when generated before with the same parameters)."""
    done = folder / "generated.json"
    expected = {"rows": rows, "row_bytes": row_bytes, "families": FAMILIES}
    if done.exists() and json.loads(done.read_text()) == expected:
        return [folder / f"{family}.jsonl" for family in FAMILIES]
    folder.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        source = [row for line in (SAMPLE / f"{family}.jsonl").open() if readable(family, row := json.loads(line))]
        with (folder / f"{family}.jsonl").open("w") as out:
            for i in range(rows // len(FAMILIES)):
                out.write(json.dumps(padded(source[i % len(source)], row_bytes), ensure_ascii=False) + "\n")
    done.write_text(json.dumps(expected))
    return [folder / f"{family}.jsonl" for family in FAMILIES]


def write_blend(blends: Path, files: list[Path]) -> None:
    blends.mkdir(parents=True, exist_ok=True)
    datasets = [{"name": path.stem, "path": str(path), "family": path.stem, "num_shards": 1} for path in files]
    (blends / f"{BLEND}.yaml").write_text(json.dumps({"on_error": "skip", "datasets": datasets}, indent=1))


def read_and_parse(files: list[Path]) -> float:
    started = time.monotonic()
    for path in files:
        for line in path.read_bytes().splitlines():
            orjson.loads(line)
    return time.monotonic() - started


def processes_option(tree: Path) -> str:
    """``--build-processes``; a checkout whose CLI ran shards in its own worker pool took ``--jobs``."""
    return "--build-processes" if (tree / "nemotron_assets" / "cli").is_dir() else "--jobs"


def measure(tree: Path, blends: Path, jobs: int, rows: int) -> tuple[float, float]:
    """(rows/s of the harmony_shard step, its peak RSS in MB) of one CLI build on ``jobs`` processes."""
    option = processes_option(tree)
    run = run_cli(tree, blends, BLEND, ["--select", "source_split,harmony_shard", option, str(jobs),
                                        "--log-level", "WARNING"])
    print_run(f"{option} {jobs} ({tree})", run)
    step = run.steps["harmony_shard"]
    return rows / step["wall_s"], step["peak_rss_mb"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--row-bytes", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "nemotron-bench-normalize"))
    parser.add_argument("--compare-tree", default=None, help="another checkout, measured the same way")
    args = parser.parse_args()

    cache = Path(args.cache)
    files = generate(cache / "input", args.rows, args.row_bytes)
    write_blend(cache / "blends", files)
    rows = args.rows // len(FAMILIES) * len(FAMILIES)
    size = sum(path.stat().st_size for path in files)
    print(f"input: {rows:,} rows of {len(FAMILIES)} families in {len(files)} shards, {size / 1e6:.0f} MB "
          f"({size / rows:.0f} B/row)")
    trees = [REPO] + ([Path(args.compare_tree).resolve()] if args.compare_tree else [])
    for run in range(1, args.runs + 1):
        print(f"\nrun {run}: read + parse with orjson: {rows / read_and_parse(files):,.0f} rows/s")
        for tree in trees:
            one, one_rss = measure(tree, cache / "blends", 1, rows)
            two, two_rss = measure(tree, cache / "blends", 2, rows)
            speedup = two / one
            print(f"\nrun {run}, {tree}: harmony_shard on 1 process: {one:,.0f} rows/s (peak {one_rss:.0f} MB); "
                  f"on 2: {two:,.0f} rows/s (peak {two_rss:.0f} MB, largest process)")
            met = "met" if speedup >= TARGET_SPEEDUP else "NOT met"
            within = "<=" if max(one_rss, two_rss) <= TARGET_RSS_MB else ">"
            print(f"  speedup {speedup:.2f}x (target >= {TARGET_SPEEDUP}x: {met}); "
                  f"peak RSS {within} {TARGET_RSS_MB} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
