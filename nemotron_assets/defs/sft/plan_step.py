"""``sft_plan``: which sample goes to which split, how many times, and into which bin of which packed shard.

It reads only the metadata columns of every samples file (`samples_file.METADATA_COLUMNS`, never the token
arrays, except those of over-long samples under ``overlong: truncate``), in blend order, then shard, then row, and
decides for each sample:

1. **selection** — left out, counted by reason (``excluded``): a row the dataset's dedup result marks as a duplicate
   (``duplicate``); with ``from: [pools]``, a row whose id is in none of the pools (``not_in_pools``) or whose id an
   earlier row already took (``repeated_id``: the union is deduplicated by id, first occurrence in blend, shard
   and row order wins); with ``used_in``, a row listing none of the values (``used_in``);
2. **split** — `splits.assign_split` of the conversation's split key (its first user prompt) under the blend's
   ``holdout``, or the split of a dataset listed under the blend's ``valid:``/``test:``;
3. **copies** — `splits.repeat_count` of the dataset's ``weight`` (a repeat factor) for the row's id and
   ``sft.seed``, in ``train``; valid and test take a row at most once (a repeated evaluation sample would only
   weight the metric). A weight that gives no copy leaves the row out (``weight``);
4. **stored length** — a sample of ``L`` tokens takes ``L - 1`` positions (Megatron-Bridge's rule); over the limit
   (`PackSettings.max_positions`) it is dropped (``overlong``) or, with ``overlong: truncate``, cut to the limit
   ending on the template's end-of-turn (`masks.truncate_sample`; dropped as
   ``overlong_truncated_nothing_trained`` if nothing trained is left); fewer than 2 tokens: ``too_short``; then
   padded so ``L - 1`` is a multiple of ``pad_to_multiple``. Drops are counted per split.

Then, per split: the samples in order (every row's first copy, then every second copy, ...: copies spread over
the split instead of sharing a bin), cut into windows of ``pack_window`` samples, each packed by
`packing.plan_bins` (deterministic for ``sft.seed``); bins are numbered across windows and cut into as few shards
as hold at most ``sft.bins_per_shard`` bins each (``shard_tokens // pack_size``: about 64 MiB of int32 ids by
default), of even sizes (`shard_bounds`).

Output ``<base>/sft/plan.parquet`` (`SCHEMA`), one row per packed sample in split, shard, bin, position order, a row
group per shard; its receipt's stats list each shard's bins, samples, tokens, the samples files it reads and the
sha256 of its plan rows (a packed shard's input: `inputs.packed_inputs`). Memory: ~20 bytes per sample plus one
window's plan.
"""

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.chat.masks import truncate_sample
from nemotron_assets.core.records import stored_path
from nemotron_assets.core.step import Outcome, Output, Staged, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import duplicates_path, pool_dir
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.inputs import (
    PackedSft,
    SamplesFile,
    chat_identity,
    pack_settings,
    packing_settings,
    plan_inputs,
)
from nemotron_assets.defs.sft.layout import SftShardKey, sft_plan_prefix
from nemotron_assets.formats.packing import OVERLONG, OVERLONG_NOTHING_TRAINED, TOO_SHORT, PackSettings, plan_bins
from nemotron_assets.formats.splits import SPLITS, assign_split, repeat_count
from nemotron_assets.sources.errors import InputError

SCHEMA = pa.schema([
    ("split", pa.string()), ("shard", pa.int32()), ("bin", pa.int64()),  # bin: row of the bin in its shard
    ("position", pa.int32()),  # order of the sample in its bin
    ("file", pa.string()),  # the samples file: <dataset>/shard_NNNNN
    ("row", pa.int64()),  # row of the sample in that file
    ("copy", pa.int32()), ("length", pa.int32()),  # tokens stored (after truncation and padding)
    ("truncated", pa.bool_()),
])
READ_COLUMNS = ["id", "row", "split_key", "used_in", "length"]
SPLIT_CODES = {name: code for code, name in enumerate(SPLITS)}


@dataclass
class Candidates:
    """The packed samples of one split, in order, as compact arrays (a few bytes each)."""

    file: list[np.ndarray] = field(default_factory=list)  # int32: index into the plan's samples files
    row: list[np.ndarray] = field(default_factory=list)  # int64
    copies: list[np.ndarray] = field(default_factory=list)  # int32
    length: list[np.ndarray] = field(default_factory=list)  # int32, stored
    truncated: list[np.ndarray] = field(default_factory=list)  # bool

    def add(self, file: int, rows: list[int], copies: list[int], lengths: list[int], truncated: list[bool]) -> None:
        if rows:
            self.file.append(np.full(len(rows), file, dtype=np.int32))
            self.row.append(np.asarray(rows, dtype=np.int64))
            self.copies.append(np.asarray(copies, dtype=np.int32))
            self.length.append(np.asarray(lengths, dtype=np.int32))
            self.truncated.append(np.asarray(truncated, dtype=bool))

    def arrays(self) -> tuple[np.ndarray, ...]:
        def joined(parts: list[np.ndarray], dtype) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        return (joined(self.file, np.int32), joined(self.row, np.int64), joined(self.copies, np.int32),
                joined(self.length, np.int32), joined(self.truncated, bool))


@dataclass
class SplitStats:
    samples: int = 0  # packed samples, copies included
    rows: int = 0  # distinct (file, row, sample) packed at least once
    bins: int = 0
    shards: int = 0
    tokens: int = 0  # stored, padding included
    positions: int = 0  # sum(L - 1)
    truncated: int = 0
    dropped: Counter = field(default_factory=Counter)

    def as_dict(self, pack_size: int) -> dict:
        efficiency = self.positions / (self.bins * pack_size) if self.bins else 0.0
        return {"samples": self.samples, "rows": self.rows, "bins": self.bins, "shards": self.shards,
                "tokens": self.tokens, "positions": self.positions, "truncated": self.truncated,
                "packing_efficiency": round(efficiency, 6), "dropped": dict(sorted(self.dropped.items()))}


@dataclass
class PlanResult:
    stats: dict
    shard_keys: list[str]


def plan_pack_settings(sft: PackedSft, eos_id: int | None) -> PackSettings:
    if sft.sft.pad_to_multiple > 1 and eos_id is None:
        raise InputError("pad_to_multiple > 1 pads with the tokenizer's EOS token, and its config names none",
                         field="sft.pad_to_multiple")
    return pack_settings(packing_settings(sft.sft), eos_id)


def chat_constants(samples: list[SamplesFile]) -> tuple[int | None, list[int]]:
    """(EOS id, end-of-turn ids) the samples were rendered with; every file agrees (same chat identity)."""
    found = {(f.receipt.stats["eos_id"], tuple(f.receipt.stats["end_of_turn_ids"])) for f in samples}
    if len(found) > 1:
        raise RuntimeError(f"samples files disagree on the EOS and end-of-turn ids: {sorted(found)}")
    eos, end_of_turn = found.pop() if found else (None, ())
    return eos, list(end_of_turn)


class Selection:
    """Which rows the plan takes (steps 1-3 of the module docstring)."""

    def __init__(self, store: Storage, packed: PackedSft, base: str) -> None:
        sft = packed.sft
        self.sft = sft
        self.holdout = packed.holdout_split
        self.fixed = packed.fixed_splits
        self.weights = packed.weights
        self.used_in = set(sft.used_in_values)
        self.pool_ids = _pool_ids(store, base, sft.from_) if isinstance(sft.from_, list) else None
        self.taken: dict[str, tuple[int, int]] = {}  # id -> (file, row) that took it, with from: [pools]
        self.duplicates = {name: _duplicate_rows(store, base, name) for name in packed.datasets}
        self.excluded: Counter = Counter()

    def exclusion(self, dataset: str, shard: int, file: int, row: int, row_id: str, used_in: list[str]) -> str | None:
        if row in self.duplicates[dataset].get(shard, ()):
            return "duplicate"
        if self.used_in and not self.used_in.intersection(used_in or ()):
            return "used_in"
        if self.pool_ids is not None:
            if row_id not in self.pool_ids:
                return "not_in_pools"
            if self.taken.setdefault(row_id, (file, row)) != (file, row):
                return "repeated_id"
        return None

    def split_and_copies(self, dataset: str, key: str, row_id: str) -> tuple[str, int]:
        split = assign_split(key, self.holdout, self.fixed[dataset])
        copies = repeat_count(self.weights[dataset], row_id, self.sft.seed)
        return split, copies if split == "train" else min(copies, 1)


def _pool_ids(store: Storage, base: str, pools: list[str]) -> set[str]:
    ids: set[str] = set()
    for pool in pools:
        for part in store.list(pool_dir(base, pool)):
            if part.endswith(".parquet") and part.rsplit("/", 1)[-1].startswith("part-"):
                with store.open(part) as stream:
                    ids.update(pq.read_table(stream, columns=["id"]).column("id").to_pylist())
    return ids


def _duplicate_rows(store: Storage, base: str, dataset: str) -> dict[int, set[int]]:
    with store.open(stored_path(store, duplicates_path(base, dataset))) as stream:  # legacy place until moved
        table = pq.read_table(stream, columns=["shard", "row"])
    rows: dict[int, set[int]] = {}
    for shard, row in zip(table.column("shard").to_pylist(), table.column("row").to_pylist()):
        rows.setdefault(int(shard), set()).add(int(row))
    return rows


def _stored_length(length: int, settings: PackSettings) -> int:
    """Tokens stored for a sample of `length` tokens that fits: padded until ``L - 1`` is a multiple."""
    return length + (-(length - 1) % settings.pad_to_multiple)


def _truncation_keeps_training(store: Storage, path: str, rows: list[int], settings: PackSettings,
                               end_of_turn: list[int]) -> dict[int, bool]:
    """For over-long rows under ``overlong: truncate``: whether anything trained is left after the cut (reads just
    those rows' ids and masks, a record batch at a time)."""
    wanted, kept, start = set(rows), {}, 0
    with store.open(path) as stream:
        for batch in samples_file.batches(stream, ["input_ids", "assistant_mask"]):
            for i in sorted(r - start for r in wanted if start <= r < start + batch.num_rows):
                ids = np.asarray(batch.column("input_ids")[i].values, dtype=np.int32)
                mask = np.asarray(batch.column("assistant_mask")[i].values, dtype=np.uint8)
                _, cut = truncate_sample(ids, mask, settings.max_positions + 1, end_of_turn)
                kept[start + i] = bool(cut[1:].any())
            start += batch.num_rows
    return kept


def select_samples(store: Storage, base: str, files: list[SamplesFile], settings: PackSettings,
                   end_of_turn: list[int], stats: dict[str, SplitStats], selection: Selection
                   ) -> dict[str, Candidates]:
    """Steps 1-4 of the module docstring over every samples file: the packed samples of each split, in order."""
    candidates = {split: Candidates() for split in SPLITS}
    for index, source in enumerate(files):
        dataset = source.key.dataset
        taken: dict[str, tuple[list, list, list, list]] = {split: ([], [], [], []) for split in SPLITS}
        overlong: list[tuple[str, int, int, int]] = []  # (split, row in file, copies, position in taken)
        decided: dict[int, tuple[str | None, str, int]] = {}  # Harmony row -> (exclusion, split, copies)
        file_row = 0
        with store.open(source.path) as stream:
            for batch in samples_file.batches(stream, READ_COLUMNS):
                for row_id, row, key, used_in, length in zip(*(batch.column(c).to_pylist() for c in READ_COLUMNS)):
                    here, file_row = file_row, file_row + 1
                    if row not in decided:
                        why = selection.exclusion(dataset, source.key.index, index, row, row_id, used_in)
                        split, copies = selection.split_and_copies(dataset, key, row_id) if why is None else ("", 0)
                        decided[row] = (why or ("weight" if copies == 0 else None), split, copies)
                    why, split, copies = decided[row]
                    if why is not None:
                        selection.excluded[why] += 1
                        continue
                    split_stats = stats[split]
                    if length < 2:
                        split_stats.dropped[TOO_SHORT] += copies
                        continue
                    rows, copy_counts, lengths, truncated = taken[split]
                    if length - 1 > settings.max_positions:
                        if settings.overlong == "drop":
                            split_stats.dropped[OVERLONG] += copies
                            continue
                        overlong.append((split, here, copies, len(rows)))
                    rows.append(here)
                    copy_counts.append(copies)
                    lengths.append(_stored_length(length, settings) if length - 1 <= settings.max_positions
                                   else settings.max_positions + 1)
                    truncated.append(length - 1 > settings.max_positions)
        if overlong:
            keeps = _truncation_keeps_training(store, source.path, [row for _, row, _, _ in overlong], settings,
                                               end_of_turn)
            for split, row, copies, position in overlong:
                if not keeps[row]:
                    taken[split][1][position] = 0  # no copy: nothing trained is left
                    stats[split].dropped[OVERLONG_NOTHING_TRAINED] += copies
        for split, (rows, copy_counts, lengths, truncated) in taken.items():
            candidates[split].add(index, rows, copy_counts, lengths, truncated)
    return candidates


def shard_rows_digest(table: pa.Table) -> str:
    """sha256 of a shard's plan rows: every column's values in order (a packed shard's input)."""
    digest = hashlib.sha256()
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_string(column.type):
            digest.update("\0".join(column.to_pylist()).encode())
        else:
            digest.update(np.ascontiguousarray(column.to_numpy(zero_copy_only=False)).tobytes())
        digest.update(b"\1")
    return digest.hexdigest()


def shard_bounds(bins: int, bins_per_shard: int) -> list[tuple[int, int]]:
    """[first, end) bins of each packed shard of a split: as few shards as hold ``bins_per_shard`` bins at most,
    their sizes even (differing by one bin at most). Even shards are packed in about the same time, so the runs
    that pack them in parallel end together (a split cut into full shards and a small tail kept one process busy
    while the other waited)."""
    shards = -(-bins // bins_per_shard)
    if not shards:
        return []
    cuts = [shard * bins // shards for shard in range(shards + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


class PlanWriter:
    """Writes one split's bins, shard by shard, into the plan file, and records each shard."""

    def __init__(self, writer: pq.ParquetWriter, file_keys: list[str], bins_per_shard: int) -> None:
        self.writer, self.file_keys, self.bins_per_shard = writer, file_keys, bins_per_shard
        self.shards: dict[str, dict] = {}

    def write_split(self, split: str, files: np.ndarray, rows: np.ndarray, copies: np.ndarray, lengths: np.ndarray,
                    truncated: np.ndarray, bins: list[list[int]], stats: SplitStats) -> None:
        for shard, (first, end) in enumerate(shard_bounds(len(bins), self.bins_per_shard)):
            shard_bins = bins[first:end]
            members = np.fromiter((m for b in shard_bins for m in b), dtype=np.int64,
                                  count=sum(len(b) for b in shard_bins))
            bin_of = np.repeat(np.arange(len(shard_bins), dtype=np.int64), [len(b) for b in shard_bins])
            position = np.concatenate([np.arange(len(b), dtype=np.int32) for b in shard_bins])
            table = pa.Table.from_arrays([
                pa.array(np.full(len(members), split, dtype=object), type=pa.string()),
                pa.array(np.full(len(members), shard, dtype=np.int32)), pa.array(bin_of), pa.array(position),
                pa.array([self.file_keys[i] for i in files[members]], type=pa.string()),
                pa.array(rows[members]), pa.array(copies[members]), pa.array(lengths[members]),
                pa.array(truncated[members]),
            ], schema=SCHEMA)
            self.writer.write_table(table, row_group_size=max(1, len(members)))
            key = str(SftShardKey(split, shard))
            self.shards[key] = {"rows_sha256": shard_rows_digest(table), "bins": len(shard_bins),
                                "samples": len(members), "tokens": int(lengths[members].sum()),
                                "files": sorted({self.file_keys[i] for i in np.unique(files[members])})}
            stats.shards += 1


def plan_split(candidates: Candidates, settings: PackSettings, stats: SplitStats
               ) -> tuple[tuple[np.ndarray, ...], list[list[int]]]:
    """The split's packed samples in order (each row's copies spread: every first copy, then every second, ...)
    and its bins (indices into them), window by window."""
    files, rows, copies, lengths, truncated = candidates.arrays()
    order = np.concatenate([np.flatnonzero(copies > k) for k in range(int(copies.max()) if len(copies) else 0)]
                           or [np.zeros(0, dtype=np.int64)])
    copy_number = np.zeros(len(order), dtype=np.int32)
    at = 0
    for k in range(int(copies.max()) if len(copies) else 0):
        count = int(np.count_nonzero(copies > k))
        copy_number[at : at + count] = k
        at += count
    arrays = (files[order], rows[order], copy_number, lengths[order], truncated[order])
    stored = arrays[3]
    bins: list[list[int]] = []
    for window, start in enumerate(range(0, len(order), settings.pack_window)):
        planned = plan_bins((stored[start : start + settings.pack_window] - 1).tolist(), settings, window)
        bins += [[start + i for i in members] for members in planned]
    stats.samples += len(order)
    stats.rows += int(np.count_nonzero(copies))
    stats.bins += len(bins)
    stats.tokens += int(stored.sum())
    stats.positions += int(stored.sum()) - len(order)
    stats.truncated += int(arrays[4].sum())
    return arrays, bins


def build_plan(store: Storage, packed: PackedSft, base: str, files: list[SamplesFile], out) -> PlanResult:
    """Plan every split into the local Parquet file ``out`` (see the module docstring)."""
    sft = packed.sft
    eos, end_of_turn = chat_constants(files)
    settings = plan_pack_settings(packed, eos)
    selection = Selection(store, packed, base)
    stats = {split: SplitStats() for split in SPLITS}
    candidates = select_samples(store, base, files, settings, end_of_turn, stats, selection)
    file_keys = [str(f.key) for f in files]
    with pq.ParquetWriter(out, SCHEMA, compression="zstd") as writer:
        plan_writer = PlanWriter(writer, file_keys, sft.bins_per_shard)
        for split in SPLITS:
            arrays, bins = plan_split(candidates[split], settings, stats[split])
            plan_writer.write_split(split, *arrays, bins, stats[split])
    considered = sum(f.receipt.stats["samples"] for f in files)
    summary = {
        "samples_considered": considered, "excluded": dict(sorted(selection.excluded.items())),
        "splits": {split: stats[split].as_dict(settings.pack_size) for split in SPLITS},
        "shards": plan_writer.shards, "eos_id": eos, "end_of_turn_ids": end_of_turn,
        "pad_id": settings.pad_id, "bins_per_shard": sft.bins_per_shard,
    }
    return PlanResult(summary, list(plan_writer.shards))


# --- the step ----------------------------------------------------------------------------------------------------
def materialize_plan(store: Storage, packed: PackedSft, base: str, force: bool = False,
                     log: Callable[[str], None] = print) -> Outcome:
    """The plan under ``base``: skipped when up to date, else rebuilt and committed (the receipt last). The packed
    shards it plans are its receipt's ``stats["shards"]``."""
    planned = plan_inputs(store, packed, base, chat_identity(packed))
    prefix = sft_plan_prefix(base)

    def build(folder: Path) -> Staged:
        result = build_plan(store, packed, base, planned.samples, folder / "plan.parquet")
        return Staged({".parquet": folder / "plan.parquet"}, result.stats)

    return build_output(store, Output(prefix, planned.inputs, "sft_plan", prefix, extra={"blend": packed.blend}),
                        build, force, log)
