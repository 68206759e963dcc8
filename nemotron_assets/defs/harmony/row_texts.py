"""Each distinct row's view texts, computed once for all the pools a run views.

Pools overlap by design (pools.py): on the 600,000-row post-training bench, 7 pools hold 1.38 M rows. A row's views
are the same in every pool that holds it, so a run that views several pools computes them once per distinct row
(`RowTexts.compute`) and then writes each pool's view files from them (views.py `write_view_files`):

1. **Owners.** The ``id`` column of every pool the run views, read in the run's order: a row is computed by the
   first pool that holds it, its *owner*. Every row of every pool gets its *place*: where its texts are among the
   computed rows.
2. **Texts.** Each row group of an owner gives a *piece*: the texts and word counts of the rows it owns, in an Arrow
   file of its own. Processes forked from the step compute the pieces, the largest first; here, one after another,
   on S3 (an S3 client must not cross a fork) or with one process.
3. **Look-ups.** A pool's view build takes the texts of each batch of its rows from the pieces by their places
   (`RowTexts.views_of`). Every pool is a subsequence of the blend's rows (polars' sinks keep their order, pools.py),
   so a pool reads each owner's pieces in order, and a few pieces in memory at a time suffice.

The view files are the bytes of computing each pool's texts itself: the same texts, written in the same batches.
Pools of more than `MAX_SHARED_ROWS` rows in all compute their own texts, as before, in memory that does not grow
with them.
"""

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nemotron_assets.core.storage import Storage
from nemotron_assets.core.workers import ForkedCalls, fork_available
from nemotron_assets.defs.harmony.layout import pool_part_path
from nemotron_assets.defs.harmony.pools import pool_part_numbers
from nemotron_assets.defs.harmony.views import VIEWS, ViewArrays, ViewsOf, view_arrays, view_texts

#: Pool rows (of one run's pools, counted once per pool that holds them) above which the pools compute their own
#: texts. Finding each row's owner holds every pool row's id and place at once: 1.38 M pool rows raised the peak of
#: the step's process by 110-150 MB (280 MB in a script of its own), so this bounds it to ~200-400 MB.
MAX_SHARED_ROWS = 2_000_000
#: Each piece's columns: the row's id, then per view its text and its word count (as the view files hold them).
PIECE_SCHEMA = pa.schema([pa.field("id", pa.string()),
                          *(field for view in VIEWS for field in (pa.field(view, pa.string()),
                                                                  pa.field(f"{view}_words", pa.int64())))])


@dataclass(frozen=True)
class RowGroup:
    """One row group of a pool's part file, and which of its rows its piece computes."""

    path: str  # the part file, relative to the storage root
    index: int
    owned: np.ndarray  # positions within the row group of the rows it owns


@dataclass(frozen=True)
class Piece:
    path: Path  # the Arrow file holding its rows' texts, in row order
    start: int  # the place of its first row


class RowTexts:
    """The texts of every distinct row of some pools (`compute`), and each pool's rows' places among them."""

    def __init__(self, places: dict[str, np.ndarray], pieces: list[Piece]) -> None:
        self.places = places  # pool -> the place of each of its rows (parts in order), in row order
        self.pieces = pieces
        self._starts = np.array([piece.start for piece in pieces], dtype=np.int64)
        #: pieces read into memory, least recently used first: one per owner pool a lookup is reading
        self._loaded: OrderedDict[int, pa.Table] = OrderedDict()
        self._keep = len(places) + 1

    @classmethod
    def compute(cls, store: Storage, base: str, pools: list[str], folder: Path, processes: int,
                log: Callable[[str], None] = print) -> "RowTexts | None":
        """The texts of the rows of ``pools`` (committed, read in this order), one Arrow file per piece in
        ``folder``, computed in ``processes`` forked processes (1, or on S3: here). None when the pools hold more
        than `MAX_SHARED_ROWS` rows: then each pool computes its own rows' texts, in memory that does not grow with
        the pools."""
        parts_of = {pool: [pool_part_path(base, pool, part) for part in pool_part_numbers(store, base, pool) or [0]]
                    for pool in pools}
        total = 0
        for path in (path for parts in parts_of.values() for path in parts):
            with store.open(path) as stream:
                total += pq.ParquetFile(stream).metadata.num_rows
        if total > MAX_SHARED_ROWS:
            log(f"view texts: {total:,} pool rows, more than {MAX_SHARED_ROWS:,}: each pool computes its own rows' "
                "texts (finding the rows the pools share would hold every row's id in memory)")
            return None
        groups: list[tuple[str, int, int]] = []  # (part file, row group, its rows), in the pools' order
        ids: list[pa.Array] = []
        rows_of: dict[str, int] = dict.fromkeys(pools, 0)
        for pool, parts in parts_of.items():
            for path in parts:
                with store.open(path) as stream:
                    file = pq.ParquetFile(stream)
                    for index in range(file.num_row_groups):
                        ids.append(file.read_row_group(index, columns=["id"]).column("id").combine_chunks()
                                   .cast(pa.string()))
                        groups.append((path, index, len(ids[-1])))
                        rows_of[pool] += len(ids[-1])
        # a row's place: how many distinct ids came before its id's first row (a dictionary's indices), and the
        # first row of each id owns it
        encoded = pc.dictionary_encode(pa.chunked_array(ids, type=pa.string())).chunks
        del ids
        indices = [chunk.indices.to_numpy() for chunk in encoded]
        places = np.concatenate(indices).astype(np.int64) if indices else np.zeros(0, np.int64)
        owned = places > np.concatenate(([-1], np.maximum.accumulate(places)[:-1]))
        offsets = np.cumsum([0, *rows_of.values()])
        pool_places = {pool: places[offsets[n]:offsets[n + 1]] for n, pool in enumerate(pools)}

        pieces: list[Piece] = []
        work: list[tuple[Piece, RowGroup]] = []
        group_start = 0
        for path, index, rows in groups:
            mine = np.flatnonzero(owned[group_start:group_start + rows])
            if len(mine):
                piece = Piece(folder / f"piece-{len(pieces):05d}.arrow", int(places[group_start + mine[0]]))
                pieces.append(piece)
                work.append((piece, RowGroup(path, index, mine)))
            group_start += rows
        work.sort(key=lambda item: -len(item[1].owned))  # the largest first, so a small one ends the step
        calls = {piece.path.name: _piece_call(store, group, piece.path) for piece, group in work}
        processes = min(processes, len(calls))
        forked = processes > 1 and not store.is_s3 and fork_available()
        log(f"view texts: {int(owned.sum()):,} distinct rows of {len(places):,} pool rows, {len(calls)} piece(s)"
            + (f" in {processes} processes" if forked else ""))
        if forked:
            with ForkedCalls(calls, processes, on_message=lambda _name, line: log(line)) as run:
                for name in calls:
                    run.result(name)
        else:
            for call in calls.values():
                call(log)
        return cls(pool_places, pieces)

    def views_of(self, pool: str) -> ViewsOf:
        """For `write_view_files`: the view arrays of the ``pool`` rows of a batch, from the first row's number."""
        places = self.places[pool]

        def views(first_row: int, batch: pa.RecordBatch) -> ViewArrays:
            taken = self._take(places[first_row:first_row + batch.num_rows])
            if not taken["id"].equals(batch.column("id").cast(pa.string())):
                raise RuntimeError(f"pool {pool!r}: the view texts computed for rows {first_row}.."
                                   f"{first_row + batch.num_rows - 1} are of other rows (was the pool rewritten "
                                   "while its views were built?)")
            return {view: (taken[view], taken[f"{view}_words"]) for view in VIEWS}

        return views

    def _take(self, places: np.ndarray) -> dict[str, pa.Array]:
        """The rows at ``places``, in that order: each column as one array."""
        piece_of = np.searchsorted(self._starts, places, side="right") - 1
        order = np.argsort(piece_of, kind="stable")
        parts = [self._piece(piece).take(pa.array(places[piece_of == piece] - self._starts[piece]))
                 for piece in np.unique(piece_of)]
        table = pa.concat_tables(parts) if parts else PIECE_SCHEMA.empty_table()
        back = np.empty_like(order)
        back[order] = np.arange(len(order))  # where each row of ``places`` sits in ``table``
        table = table.take(pa.array(back))
        return {name: table.column(name).combine_chunks() for name in table.column_names}

    def _piece(self, number: int) -> pa.Table:
        if number in self._loaded:
            self._loaded.move_to_end(number)
        else:
            # mapped, not read: a look-up copies only the rows it takes, and a piece dropped from here is unmapped
            self._loaded[number] = pa.ipc.open_file(pa.memory_map(str(self.pieces[number].path))).read_all()
            if len(self._loaded) > self._keep:
                self._loaded.popitem(last=False)
        return self._loaded[number]


def _piece_call(store: Storage, group: RowGroup, out: Path) -> Callable[[Callable], int]:
    return lambda _report: write_piece(store, group, out)


def write_piece(store: Storage, group: RowGroup, out: Path) -> int:
    """The texts of the rows ``group`` owns, into the Arrow file ``out``; returns their number."""
    with store.open(group.path) as stream:
        rows = pq.ParquetFile(stream).read_row_group(group.index, columns=["id", "messages"])
    rows = rows.take(pa.array(group.owned))
    arrays = view_arrays([view_texts(messages) for messages in rows.column("messages").to_pylist()])
    columns = [rows.column("id").combine_chunks().cast(pa.string()), *(a for view in VIEWS for a in arrays[view])]
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, PIECE_SCHEMA) as writer:
        writer.write_table(pa.Table.from_arrays(columns, schema=PIECE_SCHEMA))
    return rows.num_rows
