"""A run that views several pools computes each distinct row's texts once (defs/harmony/row_texts.py). Its view
files are the bytes each pool gives when it computes its own rows' texts from their ``messages``
(views.py `write_view_files` without texts), whatever the pools' overlaps, order, parts, row groups and read batches,
and in one process or two."""

import contextlib
import functools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony import row_texts
from nemotron_assets.defs.harmony.build import SCHEMA
from nemotron_assets.defs.harmony.layout import pool_part_path
from nemotron_assets.defs.harmony.row_texts import RowTexts
from nemotron_assets.defs.harmony.views import VIEWS, write_view_files
from nemotron_assets_tests.defs.harmony.test_view_texts import normalized_records

BASE = "blend"


@functools.cache
def distinct_rows() -> list[dict]:
    """Valid Harmony rows of the sample data and the fixtures, each id once, in a fixed order (the blend's)."""
    rows = {}
    for record in normalized_records():
        if record["quality_valid_harmony"]:
            rows.setdefault(record["id"], record)
    return list(rows.values())


def write_pool(store: Storage, pool: str, parts: list[list[dict]], row_group_rows: int) -> None:
    for number, rows in enumerate(parts):
        path = Path(store.root) / pool_part_path(BASE, pool, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, row_group_size=row_group_rows)


def view_files(store: Storage, pool: str, parts: int, folder: Path, batch_rows: int, views_of=None) -> dict[str, bytes]:
    folder.mkdir()
    out = {view: folder / f"{view}.parquet" for view in VIEWS}
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(Path(store.root) / pool_part_path(BASE, pool, part), "rb"))
                 for part in range(parts)]
        write_view_files(files, out, batch_rows=batch_rows, views_of=views_of)
    return {view: path.read_bytes() for view, path in out.items()}


@st.composite
def overlapping_pools(draw) -> dict[str, list[list[dict]]]:
    """1-4 pools, each a subsequence of the blend's rows (possibly empty), in one or two part files."""
    rows = distinct_rows()
    pools = {}
    for number in range(draw(st.integers(1, 4))):
        chosen = [rows[i] for i in sorted(draw(st.sets(st.integers(0, len(rows) - 1), max_size=len(rows))))]
        if chosen and draw(st.booleans()):  # in two part files
            cut = draw(st.integers(1, len(chosen)))
            pools[f"pool{number}"] = [chosen[:cut], chosen[cut:]]
        else:
            pools[f"pool{number}"] = [chosen]
    return pools


@settings(max_examples=20, deadline=None)
@given(pools=overlapping_pools(), row_group_rows=st.integers(1, 9), batch_rows=st.integers(1, 7),
       processes=st.sampled_from([1, 2]))
def test_views_from_texts_computed_once_are_the_bytes_of_each_pool_computing_its_own(
        tmp_path_factory, pools, row_group_rows, batch_rows, processes):
    root = tmp_path_factory.mktemp("overlapping")
    store = Storage(str(root))
    for pool, parts in pools.items():
        write_pool(store, pool, parts, row_group_rows)
    texts_folder = root / "texts"
    texts_folder.mkdir()
    texts = RowTexts.compute(store, BASE, list(pools), texts_folder, processes, log=lambda line: None)

    distinct = {row["id"] for parts in pools.values() for rows in parts for row in rows}
    computed = sum(pa.ipc.open_file(str(piece.path)).read_all().num_rows for piece in texts.pieces)
    assert computed == len(distinct)  # each distinct row once
    for pool, parts in pools.items():
        own = view_files(store, pool, len(parts), root / f"{pool}-own", batch_rows)
        shared = view_files(store, pool, len(parts), root / f"{pool}-shared", batch_rows,
                            texts.views_of(pool))
        assert shared == own, pool


def test_a_pool_rewritten_after_its_texts_were_computed_is_refused_naming_it(tmp_path):
    store = Storage(str(tmp_path))
    rows = distinct_rows()
    write_pool(store, "first", [rows[:6]], 4)
    write_pool(store, "second", [rows[3:9]], 4)
    texts = RowTexts.compute(store, BASE, ["first", "second"], tmp_path, 1, log=lambda line: None)
    write_pool(store, "second", [rows[9:15]], 4)  # other rows, same count
    with pytest.raises(RuntimeError, match="pool 'second': the view texts computed for rows 0..5 are of other rows"):
        view_files(store, "second", 1, tmp_path / "views", 6, texts.views_of("second"))


def test_pools_of_more_rows_than_the_limit_compute_their_own_texts_and_say_so(tmp_path, monkeypatch):
    store = Storage(str(tmp_path))
    rows = distinct_rows()
    write_pool(store, "first", [rows[:6]], 4)
    write_pool(store, "second", [rows[3:9]], 4)
    monkeypatch.setattr(row_texts, "MAX_SHARED_ROWS", 11)
    lines = []
    assert RowTexts.compute(store, BASE, ["first", "second"], tmp_path, 1, log=lines.append) is None
    assert lines == ["view texts: 12 pool rows, more than 11: each pool computes its own rows' texts (finding the "
                     "rows the pools share would hold every row's id in memory)"]
    monkeypatch.setattr(row_texts, "MAX_SHARED_ROWS", 12)
    assert RowTexts.compute(store, BASE, ["first", "second"], tmp_path, 1, log=lines.append) is not None
