"""The checks of a packed SFT shard, on the committed files (the asset checks of ``sft_packed``, and ``verify``):

- ``bins_within_capacity``: every bin's samples satisfy ``sum(L - 1) <= pack_size``, ``seq_start_id`` starts at 0
  and cuts the bin into samples of at least 2 tokens, the loss mask is 0/1 with each sample's last position 0, and
  the ``.meta/shard_NNNNN.samples.parquet`` lists exactly the bins' samples (`packed_sft.packed_shard_problems`);
- ``samples_match_plan``: the bins unpacked are exactly the planned samples: each stored sample's digest (ids, then
  shifted mask) equals the digest of its samples-file sample prepared as planned (truncation, padding), none
  missing, none extra (`packing.compare_samples`);
- ``no_trained_token_on_masked_role``: on the unshifted mask of each stored sample, no token of a system,
  developer, user or tool message is trained (the spans recorded at render time, `masked_roles.py`;
  `packing.masked_role_problems`).

All three are first decided at once (`_all_pass`): one read of each committed file, the bins a batch at a time
(`packed_sft.bin_batches`), compared with the shard the plan describes (the samples prepared as planned, end to end,
masks shifted inside each sample).
Those comparisons are at least as strict as the checks above (a shard passes them only if it is exactly the
planned one), so a shard that passes them passes every check; any difference sends the shard through the checks
above, which say what is wrong, sample by sample.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.core.records import Receipt, stored_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft.layout import SftShardKey, packed_samples_path, sft_packed_prefix
from nemotron_assets.defs.sft.pack_step import (
    ShardSamples,
    StoredSample,
    collector_paused,
    plan_rows,
    read_samples,
    settings_of,
    stored_as_they_are,
    truncate_of,
)
from nemotron_assets.formats.packed_sft import bin_batches, iter_packed_bins, packed_shard_problems, stored_samples
from nemotron_assets.formats.packing import (
    PackSettings,
    PackStats,
    compare_samples,
    masked_role_problems,
    planned_digest,
    prepare_sample,
    shift_end_to_end,
    unshift_mask,
)

BINS_WITHIN_CAPACITY = "bins_within_capacity"
SAMPLES_MATCH_PLAN = "samples_match_plan"
NO_TRAINED_TOKEN_ON_MASKED_ROLE = "no_trained_token_on_masked_role"
CHECKS = {
    BINS_WITHIN_CAPACITY: "every bin: sum(len - 1) <= pack_size, seq_start_id valid, each sample's last loss_mask 0",
    SAMPLES_MATCH_PLAN: "the bins unpacked are exactly the planned samples (ids and shifted mask, by digest)",
    NO_TRAINED_TOKEN_ON_MASKED_ROLE: "no token of a system, developer, user or tool message is trained (unshifted)",
}
SHOWN = 10


@contextlib.contextmanager
def local_files(store: Storage, relatives: list[str]) -> Iterator[list[Path]]:
    """Local paths of stored files: themselves on a local root, downloaded copies on S3 (so messages name them)."""
    if not store.is_s3:
        yield [Path(store.url(relative)) for relative in relatives]
        return
    with store.staging() as folder:
        paths = []
        for relative in relatives:
            local = folder / relative.replace("/", "__")
            store.fs.get_file(store.url(relative), str(local))
            paths.append(local)
        yield paths


def check_packed_shard(store: Storage, base: str, key: SftShardKey, plan: Receipt,
                       samples: ShardSamples | None = None) -> dict[str, list[str]]:
    """Check name -> problems (empty: passed) of the committed shard ``key``, against the ``plan`` (its receipt).
    ``samples``: what the build just read from the samples files (`PackedOutcome.samples`), else read here."""
    with collector_paused():
        return _check_packed_shard(store, base, key, plan, samples)


def _check_packed_shard(store: Storage, base: str, key: SftShardKey, plan: Receipt,
                        samples: ShardSamples | None) -> dict[str, list[str]]:
    prefix = sft_packed_prefix(base, key)
    settings, truncate = settings_of(plan), truncate_of(plan)
    rows = plan_rows(store, base, key)
    samples = read_samples(store, base, rows) if samples is None else samples
    listing_path = stored_path(store, packed_samples_path(base, key))  # its legacy place in a tree not moved yet
    with local_files(store, [f"{prefix}.parquet", listing_path]) as (packed, listing):
        if _all_pass(packed, listing, rows, samples, settings, truncate):
            return {name: [] for name in CHECKS}
        capacity = packed_shard_problems(packed, listing, settings.pack_size, limit=SHOWN)
        planned = []
        by_key = {}
        by_position = samples.by_position(rows)
        for file, row, copy in zip(*(rows.column(name).to_pylist() for name in ("file", "row", "copy"))):
            stored = by_position[(file, row)]
            planned.append(((stored.dataset, stored.id, stored.sample, copy),
                            planned_digest(stored.pack_sample(copy), settings, truncate)))
            by_key[(stored.dataset, stored.id, stored.sample)] = stored
        matches = compare_samples(stored_samples(packed, listing), planned, limit=SHOWN)
        masked = _masked_role_problems(packed, listing, by_key) if not capacity else []
    return {BINS_WITHIN_CAPACITY: capacity, SAMPLES_MATCH_PLAN: matches, NO_TRAINED_TOKEN_ON_MASKED_ROLE: masked}


def _masked_role_problems(packed: Path, listing: Path, samples: dict) -> list[str]:
    """Trained tokens on masked-role spans, per stored sample (the listing says where each one is)."""
    table = pq.read_table(listing, columns=["bin", "offset", "length", "dataset", "id", "sample"])
    entries = list(zip(*(table.column(name).to_pylist() for name in table.column_names)))
    problems: list[str] = []
    at = 0
    for row, (_, loss_mask, _) in enumerate(iter_packed_bins(packed)):
        while at < len(entries) and entries[at][0] == row:
            _, offset, length, dataset, sample_id, sample = entries[at]
            at += 1
            stored = samples.get((dataset, sample_id, sample))
            if stored is None:
                continue  # not planned: samples_match_plan says so
            spans = [(int(a), min(int(b), length)) for a, b in stored.masked_spans.reshape(-1, 2) if a < length]
            mask = unshift_mask(loss_mask[offset : offset + length])
            problems += masked_role_problems(mask, spans, f"{packed} bin {row} sample {sample_id}#{sample}")
        if len(problems) >= SHOWN:
            return problems[:SHOWN]
    return problems


# --- every check at once, on whole arrays --------------------------------------------------------------------------
@dataclass
class _PlannedShard:
    """The shard the plan describes: per stored sample (plan order) its key and stored length, its masked-role spans
    (flat, ``span_bounds`` saying whose), and every sample's ids and shifted loss mask end to end."""

    keys: list[tuple]
    lengths: np.ndarray  # int64
    input_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # uint8, shifted inside each sample
    spans: np.ndarray  # int64, every sample's flat [start, end) spans end to end
    span_bounds: np.ndarray  # int64, samples + 1


def _planned_shard(rows: pa.Table, samples: ShardSamples, settings: PackSettings, truncate) -> _PlannedShard | None:
    """None when the per-sample checks must decide (a sample the packer would not store as it is, a key planned
    twice, one key naming two different samples)."""
    if not stored_as_they_are(rows, samples, settings):
        return _planned_sample_by_sample(rows, samples.by_position(rows), settings, truncate)
    keys = list(zip(*(samples.column(name).to_pylist() for name in ("dataset", "id", "sample")),
                    rows.column("copy").to_pylist()))
    if len(set(keys)) != len(keys) or not _one_sample_per_key(rows, keys):
        return None
    bounds, input_ids = samples.list_parts("input_ids")
    lengths = np.diff(bounds)
    span_bounds, spans = samples.list_parts("masked_spans")
    loss_mask = shift_end_to_end(samples.list_parts("assistant_mask")[1], bounds[1:])
    return _PlannedShard(keys, lengths, input_ids, loss_mask, spans.astype(np.int64), span_bounds)


def _one_sample_per_key(rows: pa.Table, keys: list[tuple]) -> bool:
    """Whether each (dataset, id, sample) comes from one (samples file, row): the per-sample check looks a key's
    masked spans up by key."""
    source: dict[tuple, tuple] = {}
    for key, position in zip(keys, zip(rows.column("file").to_pylist(), rows.column("row").to_pylist())):
        if source.setdefault(key[:3], position) != position:
            return False
    return True


def _planned_sample_by_sample(rows: pa.Table, samples: dict[tuple[str, int], StoredSample], settings: PackSettings,
                              truncate) -> _PlannedShard | None:
    """`_planned_shard` for samples the packer prepares one by one (padding, truncation)."""
    plan = list(zip(*(rows.column(name).to_pylist() for name in ("file", "row", "copy"))))
    by_key = {}
    for file, row, _ in plan:  # the spans the per-sample check reads: the last stored sample of each key
        stored = samples[(file, row)]
        by_key[(stored.dataset, stored.id, stored.sample)] = stored
    keys, ids, masks, spans = [], [], [], []
    stats = PackStats(pack_size=settings.pack_size)
    for file, row, copy in plan:
        stored = samples[(file, row)]
        ready = prepare_sample(stored.pack_sample(copy), settings, stats, truncate)
        if ready is None:
            return None
        keys.append((stored.dataset, stored.id, stored.sample, copy))
        ids.append(np.asarray(ready.input_ids, dtype=np.int32))
        masks.append(np.asarray(ready.mask, dtype=np.uint8))
        spans.append(by_key[(stored.dataset, stored.id, stored.sample)].masked_spans)
    if len(set(keys)) != len(keys):
        return None
    lengths = np.array([len(part) for part in ids], dtype=np.int64)
    unshifted = np.concatenate(masks) if masks else np.zeros(0, dtype=np.uint8)
    span_bounds = np.zeros(len(spans) + 1, dtype=np.int64)
    np.cumsum([len(part) for part in spans], out=span_bounds[1:])
    return _PlannedShard(keys, lengths, np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32),
                         shift_end_to_end(unshifted, np.cumsum(lengths)),
                         np.concatenate(spans).astype(np.int64) if spans else np.zeros(0, dtype=np.int64),
                         span_bounds)


def _list_parts(column: pa.ListArray, dtype: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets from 0, values) of a list column without nulls, values cast as `iter_packed_bins` does."""
    if column.null_count:
        return None
    offsets = column.offsets.to_numpy().astype(np.int64)
    values = column.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]].astype(dtype, copy=False)
    return offsets - offsets[0], values


def _all_pass(packed: Path, listing: Path, rows: pa.Table, samples: ShardSamples, settings: PackSettings,
              truncate) -> bool:
    """Whether the committed shard is exactly the planned one and breaks no rule (module docstring); False means
    "look sample by sample", not necessarily a problem."""
    planned = _planned_shard(rows, samples, settings, truncate)
    if planned is None:
        return False
    parquet = pq.ParquetFile(packed)
    if {"input_ids", "loss_mask", "seq_start_id"} - set(parquet.schema_arrow.names):
        return False
    table = pq.read_table(listing, columns=["bin", "offset", "length", "dataset", "id", "sample", "copy"])
    if table.num_rows != len(planned.keys) or any(table.column(name).null_count for name in table.column_names):
        return False
    listed = [table.column(name).to_numpy() for name in ("bin", "offset", "length")]
    if list(zip(*(table.column(name).to_pylist() for name in ("dataset", "id", "sample", "copy")))) != planned.keys:
        return False
    if not np.array_equal(listed[2], planned.lengths):
        return False
    first_bin = first_sample = first_value = 0
    for bins in bin_batches(parquet):
        if not bins.num_rows:
            continue
        parts = [_list_parts(bins.column(name), dtype) for name, dtype in
                 (("input_ids", "int32"), ("loss_mask", "uint8"), ("seq_start_id", "int64"))]
        if any(part is None for part in parts):
            return False
        (id_offsets, ids), (mask_offsets, mask), (start_offsets, starts) = parts  # type: ignore[misc]
        sizes, counts = np.diff(id_offsets), np.diff(start_offsets)
        if not np.array_equal(sizes, np.diff(mask_offsets)) or (counts < 1).any():
            return False
        if (starts[start_offsets[:-1]] != 0).any() or (sizes - counts > settings.pack_size).any():
            return False
        ends = np.empty_like(starts)
        ends[:-1] = starts[1:]
        ends[start_offsets[1:] - 1] = sizes
        stored = len(starts)
        here = slice(first_sample, first_sample + stored)
        if ((ends - starts) < 2).any() or not (
                np.array_equal(listed[0][here], np.repeat(np.arange(first_bin, first_bin + bins.num_rows), counts))
                and np.array_equal(listed[1][here], starts) and np.array_equal(listed[2][here], ends - starts)):
            return False
        values = slice(first_value, first_value + len(ids))
        if not (np.array_equal(ids, planned.input_ids[values]) and np.array_equal(mask, planned.loss_mask[values])):
            return False
        if (mask > 1).any() or mask[np.repeat(id_offsets[:-1], counts) + ends - 1].any():
            return False
        first_bin, first_sample, first_value = first_bin + bins.num_rows, first_sample + stored, first_value + len(ids)
    if first_sample != len(planned.keys) or first_value != len(planned.input_ids):
        return False
    return not _trains_a_masked_span(planned)


def _trains_a_masked_span(planned: _PlannedShard) -> bool:
    """Whether a masked-role span of a stored sample holds a trained token of its unshifted mask (or a span the
    per-sample check must look at: negative, or a flat span list of odd length)."""
    counts = np.diff(planned.span_bounds)
    if (counts % 2).any():
        return True
    pairs = planned.spans.reshape(-1, 2)
    if (pairs < 0).any():
        return True
    owner = np.repeat(np.arange(len(planned.keys)), counts // 2)
    length, start = planned.lengths[owner], (np.cumsum(planned.lengths) - planned.lengths)[owner]
    # unshifted[p] = shifted[p - 1] for p >= 1 and 0 at p = 0: trained tokens of [a, b) are shifted[max(a, 1) - 1
    # : min(b, length) - 1] of the sample, looked at over the whole shard's mask at once (reduceat takes the maximum
    # of a[i:j] for each consecutive pair i < j of indices: the even entries are the spans')
    low, high = np.maximum(pairs[:, 0], 1), np.minimum(pairs[:, 1], length)
    counted = (pairs[:, 0] < length) & (high > low)
    if not counted.any():
        return False
    bounds = np.empty(2 * int(np.count_nonzero(counted)), dtype=np.int64)
    bounds[0::2] = start[counted] + low[counted] - 1
    bounds[1::2] = start[counted] + high[counted] - 1
    return bool(np.maximum.reduceat(planned.loss_mask, bounds)[0::2].any())
