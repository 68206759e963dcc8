"""``sft_packed``: one packed shard, ``<split>/shard_NNNNN``, built exactly as the plan says.

The shard's plan rows (a row group of ``plan.parquet``) name, bin by bin and position by position, which sample
(samples file, row) and which copy goes where, and how long it is stored. The step reads just those samples (a row
group of each samples file at a time, keeping the rows it needs), prepares each one as the packer does
(`packing.prepare_sample`: truncation to the template's end-of-turn, padding to ``pad_to_multiple``), lays the bins
out (`packing.build_bin`: ids end to end, the loss mask shifted inside each sample, ``seq_start_id`` from 0) and
writes them with `writers.PackedShardWriter`: ``<base>/sft/<split>/shard_NNNNN.parquet`` (Megatron-Bridge's packed
Parquet, a row per bin) and ``shard_NNNNN.samples.parquet`` ((bin, offset) -> id, sample, dataset, source row,
copy). A sample the plan placed but the packer would drop means the plan and the samples disagree: an error, never a
silently different shard. Memory: the shard's samples (ids + masks + their objects, ~8 bytes a token: about
140 MB at the default ``shard_tokens``) plus two row groups being written.

Receipt inputs: `inputs.packed_inputs` (the digest of the shard's plan rows, the versions of the samples files they
read, the packing settings, the chat identity).
"""

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.blend import Blend
from nemotron_assets.layout import SftShardKey, ShardKey, sft_packed_prefix, sft_plan_prefix, sft_samples_prefix
from nemotron_assets.records import Receipt, freshness, rebuild_reason, receipt_path, write_receipt
from nemotron_assets.sft.masks import truncate_sample
from nemotron_assets.sft.packing import PackSample, PackSettings, PackStats, PreparedSample, build_bin, prepare_sample
from nemotron_assets.sft.steps.inputs import current_plan, packed_inputs
from nemotron_assets.sft.steps.plan_step import shard_rows_digest
from nemotron_assets.sft.steps.stats import log2_histogram
from nemotron_assets.sft.writers import PackedShardWriter
from nemotron_assets.storage import Storage

SAMPLE_COLUMNS = ["id", "dataset", "sample", "license", "source_row", "input_ids", "assistant_mask", "masked_spans"]
SAMPLE_TYPES = {"input_ids": pa.list_(pa.int32()), "assistant_mask": pa.list_(pa.uint8())}


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector off for a block that makes many objects and no reference cycles (the shard's samples,
    their arrays and bins: freed by reference counting alone). Each full collection would walk every object of the
    process, a Dagster run's included: a third of the packing step's time, measured (bench/README.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class StoredSample:
    """One sample as its samples file holds it (what packing and the checks need)."""

    id: str
    dataset: str
    sample: int
    license: str | None
    source_row: int
    input_ids: np.ndarray
    assistant_mask: np.ndarray
    masked_spans: np.ndarray  # flat [start, end) token ranges

    def pack_sample(self, copy: int) -> PackSample:
        return PackSample(self.id, self.dataset, self.source_row, self.input_ids, self.assistant_mask, copy,
                          self.license, self.sample, checked=True)  # read_samples validated the columns


def settings_of(plan: Receipt) -> PackSettings:
    """The packing settings the plan was made with (its inputs) and the pad id it recorded."""
    packing = plan.inputs["packing"]
    return PackSettings(pack_size=packing["pack_size"], packing=packing["packing"],
                        pack_window=packing["pack_window"], pad_to_multiple=packing["pad_to_multiple"],
                        overlong=packing["overlong"], seed=packing["seed"], pad_id=plan.stats["pad_id"])


def truncate_of(plan: Receipt):
    end_of_turn = plan.stats["end_of_turn_ids"]
    return lambda ids, mask, max_tokens: truncate_sample(ids, mask, max_tokens, end_of_turn)


def plan_rows(store: Storage, base: str, key: SftShardKey) -> pa.Table:
    """The shard's rows of ``plan.parquet``, in bin and position order."""
    with store.open(sft_plan_prefix(base) + ".parquet") as stream:
        return pq.read_table(stream, filters=[("split", "=", key.split), ("shard", "=", key.index)])


def read_samples(store: Storage, base: str, rows: pa.Table) -> dict[tuple[str, int], StoredSample]:
    """(samples file, row) -> the sample, for every row the plan rows name.

    Only the row groups holding a wanted row are read, one at a time, and each one's token columns are validated
    whole (ids non-negative, mask 0/1: `_validated`), so packing does not check sample by sample again."""
    wanted: dict[str, set[int]] = {}
    for file, row in zip(rows.column("file").to_pylist(), rows.column("row").to_pylist()):
        wanted.setdefault(file, set()).add(row)
    found: dict[tuple[str, int], StoredSample] = {}
    for file, needed in sorted(wanted.items()):
        path = sft_samples_prefix(base, ShardKey.parse(file)) + ".parquet"
        order = np.array(sorted(needed), dtype=np.int64)
        with store.open(path) as stream:
            parquet = pq.ParquetFile(stream)
            start = 0
            for group in range(parquet.num_row_groups):
                count = parquet.metadata.row_group(group).num_rows
                here = order[(order >= start) & (order < start + count)] - start
                if len(here):
                    table = _validated(parquet.read_row_group(group, columns=SAMPLE_COLUMNS), store.url(path), start)
                    taken = table.take(pa.array(here)).combine_chunks()
                    for offset, values in zip(here.tolist(), _rows_of(taken)):
                        found[(file, start + offset)] = values
                start += count
        missing = [r for r in needed if (file, r) not in found]
        if missing:
            raise RuntimeError(f"{store.url(path)} has no row {min(missing)}, which the plan names")
    return found


def _validated(group: pa.Table, url: str, first_row: int) -> pa.Table:
    """The row group, after checking its token columns whole; a bad value is an error naming the file and row (the
    samples file was not written by this code, or was damaged in a way its checksum did not catch)."""
    group = group.combine_chunks()
    for name, bad in (("input_ids", lambda values: values < 0), ("assistant_mask", lambda values: values > 1)):
        column = group.column(name).chunk(0) if group.column(name).num_chunks else None
        if column is None or column.type != SAMPLE_TYPES[name]:
            raise RuntimeError(f"{url}: column {name} is {group.schema.field(name).type}, not {SAMPLE_TYPES[name]}")
        offsets, values = column.offsets.to_numpy(), column.values.to_numpy(zero_copy_only=False)
        flagged = np.flatnonzero(bad(values[offsets[0]:offsets[-1]]))
        if len(flagged):
            row = int(np.searchsorted(offsets, offsets[0] + flagged[0], side="right")) - 1
            raise RuntimeError(f"{url} row {first_row + row}: {name} holds {values[offsets[0] + flagged[0]]}, "
                               "outside its range")
    return group


def _rows_of(table: pa.Table) -> Iterator[StoredSample]:
    """The samples of a one-chunk table; the arrays are views into its buffers."""
    def lists(name: str) -> list[np.ndarray]:
        column = table.column(name).chunk(0)
        offsets = column.offsets.to_numpy()
        values = column.values.to_numpy(zero_copy_only=False)
        return [values[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]

    scalars = zip(*(table.column(name).to_pylist() for name in SAMPLE_COLUMNS[:5]))
    for (sample_id, dataset, sample, license_, source_row), ids, mask, masked in zip(
            scalars, lists("input_ids"), lists("assistant_mask"), lists("masked_spans")):
        yield StoredSample(sample_id, dataset, sample, license_, source_row, ids, mask, masked)


def prepared_samples(rows: pa.Table, samples: dict[tuple[str, int], StoredSample], settings: PackSettings,
                     truncate, stats: PackStats) -> Iterator[tuple[int, PreparedSample, StoredSample]]:
    """(bin, prepared sample, stored sample) of every plan row, in order; a sample the packer would drop, or store
    at another length than planned, is an error (the plan and the samples disagree)."""
    columns = [rows.column(name).to_pylist() for name in ("bin", "file", "row", "copy", "length")]
    for bin_index, file, row, copy, length in zip(*columns):
        stored = samples[(file, row)]
        ready = prepare_sample(stored.pack_sample(copy), settings, stats, truncate)
        if ready is None or len(ready.input_ids) != length:
            got = "drops it" if ready is None else f"stores {len(ready.input_ids)} tokens"
            raise RuntimeError(f"the plan stores sample {file} row {row} copy {copy} as {length} tokens, the packer "
                               f"{got}: re-materialize the plan")
        yield bin_index, ready, stored


def bins_of(prepared: Iterator[tuple[int, PreparedSample, StoredSample]]) -> Iterator[list[PreparedSample]]:
    """Consecutive plan rows of one bin, together."""
    current, members = None, []
    for bin_index, ready, _ in prepared:
        if bin_index != current and members:
            yield members
            members = []
        current = bin_index
        members.append(ready)
    if members:
        yield members


@dataclass
class PackedStats:
    stats: PackStats
    sample_histogram: list[int]
    bin_histogram: list[int]
    files: dict

    def as_dict(self) -> dict:
        return {**self.stats.as_dict(), "sample_histogram": self.sample_histogram,
                "bin_histogram": self.bin_histogram}


def build_packed_shard(rows: pa.Table, samples: dict[tuple[str, int], StoredSample], settings: PackSettings,
                       truncate, packed_path: Path, samples_path: Path) -> PackedStats:
    """Write the shard's bins (local paths) and count them."""
    stats = PackStats(pack_size=settings.pack_size)
    sample_lengths, bin_positions = [], []
    with PackedShardWriter(packed_path, samples_path) as writer:
        for members in bins_of(prepared_samples(rows, samples, settings, truncate, stats)):
            packed = build_bin(members)
            stats.count_bin(packed, (ready.sample.license for ready in members))
            sample_lengths += [len(ready.input_ids) for ready in members]
            bin_positions.append(packed.positions)
            writer.write(packed)
        written = writer.close()
    files = {".parquet": {"bytes": written.packed.bytes, "sha256": written.packed.sha256},
             ".samples.parquet": {"bytes": written.samples_file.bytes, "sha256": written.samples_file.sha256}}
    return PackedStats(stats, log2_histogram(sample_lengths), log2_histogram(bin_positions), files)


# --- the step ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PackedOutcome:
    key: SftShardKey
    status: str
    receipt: Receipt
    seconds: float = 0.0
    rebuilt_because: str = ""
    #: The samples a build read (None when up to date): the shard's checks, run next in the same step, take them
    #: instead of reading the samples files again (pack_checks.check_packed_shard).
    samples: dict[tuple[str, int], StoredSample] | None = field(default=None, repr=False, compare=False)


def materialize_packed(store: Storage, blend: Blend, base: str, key: SftShardKey, force: bool = False,
                       log: Callable[[str], None] = print, plan: Receipt | None = None) -> PackedOutcome:
    """Packed shard ``key`` under ``base``: skipped when up to date, else built from the current plan (``plan``: its
    receipt, when the caller has checked it already) and committed, the receipt last."""
    started = time.monotonic()
    plan = current_plan(store, blend, base) if plan is None else plan
    inputs = packed_inputs(plan, str(key))
    prefix = sft_packed_prefix(base, key)
    current = freshness(store, prefix, inputs)
    because = rebuild_reason(current, force)
    if because is None:
        return PackedOutcome(key, "up to date", current.receipt, time.monotonic() - started)
    if because:
        log(f"{key}: rebuilding: {because}")
    rows = plan_rows(store, base, key)
    if shard_rows_digest(rows) != plan.stats["shards"][str(key)]["rows_sha256"]:
        raise RuntimeError(f"the plan rows of {key} in {store.url(sft_plan_prefix(base) + '.parquet')} do not match "
                           "the plan's receipt: re-materialize the plan")
    with cyclic_gc_paused():
        samples = read_samples(store, base, rows)
    with store.staging() as folder:
        packed_path, samples_path = folder / "shard.parquet", folder / "shard.samples.parquet"
        with cyclic_gc_paused():
            built = build_packed_shard(rows, samples, settings_of(plan), truncate_of(plan), packed_path,
                                       samples_path)
        receipt = Receipt(kind="sft_packed", key=str(key), inputs=inputs, files=built.files, stats=built.as_dict(),
                          extra={"blend": blend.name})
        store.delete(receipt_path(prefix))
        store.commit(packed_path, f"{prefix}.parquet")
        store.commit(samples_path, f"{prefix}.samples.parquet")
        receipt = write_receipt(store, prefix, receipt)
    return PackedOutcome(key, "built", receipt, time.monotonic() - started, because, samples)

