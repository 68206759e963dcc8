#!/usr/bin/env python3
"""How fast the curation steps could be while their files stay the same bytes: the pools and views of a kept build,
written again from memory with the steps' own settings, timed, beside the read the views' target divides by.

    .venv/bin/python bench/bench_posttrain.py --rows 600000 --curation all --keep-outputs   # prints the data root
    .venv/bin/python bench/bench_curation_floor.py <data root>/posttrain_bench [--cores 2]

Each file is rebuilt in memory first (untimed), then only the part named is timed; every rewritten file is compared
with the committed one, byte for byte, so what is timed is exactly the work the step cannot skip:

- **read:** pyarrow reading every pool (all columns): what ``embedding_view`` is judged against (issue 28: at most
  1.5x), as ``bench_posttrain.py`` measures it;
- **pool files:** polars writing every pool's rows (zstd, the pool's row-group size) from a DataFrame, as the
  ``candidate_pool`` sinks do (issue 28: the step at most 8 s);
- **the views' columns:** pyarrow reading only what ``embedding_view`` reads of every pool (``id``, ``messages``
  and the pass-through columns, not the Harmony text);
- **view texts:** the texts and word counts of every pool row, as the step computes them, and of every distinct row
  once (pools overlap: a row's texts are the same in every pool it is in);
- **view files:** pyarrow writing the three view files of every pool (zstd, one row group per ``BATCH_ROWS`` rows)
  from their tables, as ``write_view_files`` does.

CPU seconds are this process's (polars writes on several threads); "/ cores" is the wall time the work would take
spread perfectly over ``--cores``, the floor of a step that does it.
"""

import argparse
import io
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nemotron_assets.defs.harmony.views import (  # noqa: E402 - the checkout's own views
    BATCH_ROWS,
    PASS_THROUGH,
    VIEWS,
    view_schema,
    views_from_messages,
)


@contextmanager
def timed(into: dict, name: str):
    """Wall and CPU seconds (this process, every thread) of the block, added to ``into[name]``."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu, started = usage.ru_utime + usage.ru_stime, time.monotonic()
    yield
    usage = resource.getrusage(resource.RUSAGE_SELF)
    wall, used = into.get(name, (0.0, 0.0))
    into[name] = (wall + time.monotonic() - started, used + usage.ru_utime + usage.ru_stime - cpu)


def pool_files(base: Path) -> dict[str, Path]:
    """Each non-empty pool's file (one part: what ``candidate_pool`` writes)."""
    return {path.parent.name: path for path in sorted(base.glob("pools/*/part-00000.parquet"))
            if pq.read_metadata(path).num_rows}


def rewrite_pool(path: Path, times: dict) -> bool:
    """Write the pool's rows again as the sink does; whether the bytes are the committed file's."""
    rows = pl.read_parquet(path)
    group_rows = pq.read_metadata(path).row_group(0).num_rows
    out = io.BytesIO()
    with timed(times, "pool files"):
        rows.write_parquet(out, compression="zstd", row_group_size=group_rows)
    return out.getvalue() == path.read_bytes()


def view_columns(rows: pa.RecordBatch) -> list[tuple[pa.Array, pa.Array]]:
    """Each view's ``embed_text`` and ``word_count`` arrays of some pool rows, as ``write_view_files`` makes them."""
    views = views_from_messages(0, rows)
    return [views[view] for view in VIEWS]


def view_tables(path: Path, times: dict, seen: set[str]) -> dict[str, list[pa.Table]]:
    """The tables ``write_view_files`` writes for one pool, per view; their texts are timed for every row, and apart
    for the rows whose id is not in ``seen`` (which then holds them)."""
    pool = pq.ParquetFile(path)
    schema = view_schema(pool.schema_arrow)
    tables: dict[str, list[pa.Table]] = {view: [] for view in VIEWS}
    with timed(times, "read the views' columns"):
        batches = list(pool.iter_batches(batch_size=BATCH_ROWS, columns=["id", "messages", *PASS_THROUGH]))
    for batch in batches:
        with timed(times, "view texts, every pool row"):
            columns = view_columns(batch)
        ids = batch.column("id").to_pylist()
        new = batch.filter(pa.array([row_id not in seen for row_id in ids]))
        seen.update(ids)
        with timed(times, "view texts, each distinct row once"):
            view_columns(new)
        for view, (embed, words) in zip(VIEWS, columns):
            tables[view].append(pa.Table.from_arrays([batch.column("id"), embed, words,
                                                      *(batch.column(name) for name in PASS_THROUGH)], schema=schema))
    return tables


def rewrite_views(base: Path, pool: str, tables: dict[str, list[pa.Table]], times: dict) -> bool:
    """Write the pool's three view files again; whether each is the committed file's bytes."""
    same = True
    for view, parts in tables.items():
        out = io.BytesIO()
        with timed(times, "view files"):
            with pq.ParquetWriter(out, parts[0].schema, compression="zstd") as writer:
                for table in parts:
                    writer.write_table(table)
        same &= out.getvalue() == (base / "embedding" / view / pool / "part-00000.parquet").read_bytes()
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="a kept build's <data root>/<blend> with pools and views")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    pools = pool_files(args.base)
    if not pools:
        print(f"no pool under {args.base / 'pools'}: build with --curation all --keep-outputs first", file=sys.stderr)
        return 2
    times: dict[str, tuple[float, float]] = {}
    with timed(times, "read every pool (pyarrow)"):
        for path in pools.values():
            pq.read_table(path)
    identical, seen, rows = True, set(), 0
    for pool, path in pools.items():
        rows += pq.read_metadata(path).num_rows
        identical &= rewrite_pool(path, times)
        identical &= rewrite_views(args.base, pool, view_tables(path, times, seen), times)
    print(f"{len(pools)} non-empty pools, {rows:,} pool rows, {len(seen):,} distinct; every rewritten file "
          f"{'identical to the committed one' if identical else 'DIFFERENT from the committed one'}")
    print(f"  {'work':<36} {'wall s':>7} {'CPU s':>7} {'CPU / ' + str(args.cores) + ' cores':>15}")
    for name, (wall, cpu) in times.items():
        print(f"  {name:<36} {wall:7.2f} {cpu:7.2f} {cpu / args.cores:15.2f}")
    read = times["read every pool (pyarrow)"][0]
    views_floor = sum(times[name][1] for name in ("read the views' columns", "view texts, each distinct row once",
                                                  "view files")) / args.cores
    print(f"  pools step floor: writing the files, {times['pool files'][0]:.2f} s wall (target 8 s)")
    print(f"  views step floor: reading its columns + texts once per row + writing, {views_floor:.2f} s / read "
          f"{read:.2f} s = {views_floor / read:.2f}x (target 1.5x)")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
