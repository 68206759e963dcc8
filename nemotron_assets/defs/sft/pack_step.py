"""``sft_packed``: one packed shard, ``<split>/shard_NNNNN``, built exactly as the plan says.

The shard's plan rows (a row group of ``plan.parquet``) name, bin by bin and position by position, which sample
(samples file, row) and which copy goes where, and how long it is stored. The step reads just those samples (a
record batch of each samples file at a time, keeping the rows it needs: `read_samples`) and lays the bins out: ids
end to end, the loss mask shifted inside each sample, ``seq_start_id`` from 0. It writes
``<base>/sft/<split>/shard_NNNNN.parquet`` (Megatron-Bridge's packed Parquet, a row per bin) and, in the split's
``.meta/`` folder so the split's folder holds only what Bridge reads, ``shard_NNNNN.samples.parquet`` ((bin, offset)
-> id, sample, dataset, source row, copy).

Two ways to the same bytes:

- **at once** (`build_at_once`), when every sample goes in as it is stored (no ``pad_to_multiple``, nothing
  over-long: `stored_as_they_are`, the default case): the whole shard's arrays are gathered in plan order and laid
  out with a few NumPy operations (`packing.lay_out_bins`, `packed_sft.write_laid_out_shard`);
- **sample by sample** (`build_sample_by_sample`) otherwise: each sample is prepared as the packer does
  (`packing.prepare_sample`: truncation to the template's end-of-turn, padding), each bin laid out by
  `packing.build_bin` and streamed by `packed_sft.PackedShardWriter`.

A sample the plan placed but the packer would drop means the plan and the samples disagree: an error, never a
silently different shard. Memory: the shard's samples as read (ids and masks, ~5 bytes a token) and, at once, their
copy in plan order plus the row groups being written; building a 14.8 M-token shard raised peak RSS by 24-25 bytes
a token, its checks by 4-7 more (the sample-by-sample way: 22 and 9; bench/README.md).

Receipt inputs: `inputs.packed_inputs` (the digest of the shard's plan rows, the versions of the samples files they
read, the packing settings, the chat identity).
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.chat.masks import truncate_sample
from nemotron_assets.core.allocator import collector_paused
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import Receipt
from nemotron_assets.core.step import Output, ShardBuild, Staged
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.inputs import pack_settings, packed_inputs
from nemotron_assets.defs.sft.layout import (
    SftShardKey,
    packed_samples_name,
    sft_packed_prefix,
    sft_plan_prefix,
    sft_samples_prefix,
)
from nemotron_assets.defs.sft.plan_step import shard_rows_digest
from nemotron_assets.defs.sft.stats import log2_histogram
from nemotron_assets.formats.packed_sft import ROW_GROUP_BINS, PackedShardWriter, ShardFiles, write_laid_out_shard
from nemotron_assets.formats.packing import (
    PackSample,
    PackSettings,
    PackStats,
    PreparedSample,
    build_bin,
    lay_out_bins,
    prepare_sample,
)

#: The columns of a samples file (samples_file.SCHEMA) that packing and its checks read.
SAMPLE_SCHEMA = pa.schema([
    ("id", pa.string()), ("dataset", pa.string()), ("sample", pa.int32()), ("license", pa.string()),
    ("source_row", pa.int64()), ("input_ids", pa.list_(pa.int32())), ("assistant_mask", pa.list_(pa.uint8())),
    ("masked_spans", pa.list_(pa.int32())),
])
SAMPLE_COLUMNS = SAMPLE_SCHEMA.names
SAMPLE_TYPES = {name: SAMPLE_SCHEMA.field(name).type for name in ("input_ids", "assistant_mask")}


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
    return pack_settings(plan.inputs["packing"], plan.stats["pad_id"])


def truncate_of(plan: Receipt):
    end_of_turn = plan.stats["end_of_turn_ids"]
    return lambda ids, mask, max_tokens: truncate_sample(ids, mask, max_tokens, end_of_turn)


def plan_rows(store: Storage, base: str, key: SftShardKey) -> pa.Table:
    """The shard's rows of ``plan.parquet``, in bin and position order."""
    with store.open(sft_plan_prefix(base) + ".parquet") as stream:
        return pq.read_table(stream, filters=[("split", "=", key.split), ("shard", "=", key.index)])


@dataclass(frozen=True)
class ShardSamples:
    """The samples a shard's plan rows name, as read: the wanted rows of each record batch read (``parts``: tables of
    `SAMPLE_COLUMNS`, one chunk each), and for plan row ``i`` its part and row there. A sample placed twice, as two
    copies, is read once. Columns come out in plan order (`column`, `list_parts`): gathering them ourselves is
    several times faster than Arrow's ``take`` of list columns."""

    parts: list[pa.Table]
    part_of: np.ndarray  # int64, per plan row
    row_in_part: np.ndarray  # int64, per plan row
    #: list columns gathered already (the build, then the checks, read ids and masks)
    _gathered: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.part_of)

    def _read_rows(self) -> np.ndarray:
        """Per plan row, its row among every row read (the parts end to end)."""
        first_rows = np.cumsum([0] + [part.num_rows for part in self.parts[:-1]], dtype=np.int64)
        return first_rows[self.part_of] + self.row_in_part

    def column(self, name: str) -> pa.Array:
        """A scalar column (``id``, ``dataset``, ``sample``, ``license``, ``source_row``), in plan order."""
        if not self.parts:
            return pa.array([], type=SAMPLE_SCHEMA.field(name).type)
        values = pa.concat_arrays([part.column(name).chunk(0) for part in self.parts])
        return values.take(pa.array(self._read_rows()))

    def lengths(self) -> np.ndarray:
        """Each sample's number of tokens, in plan order (without gathering the tokens)."""
        if not self.parts:
            return np.zeros(0, dtype=np.int64)
        per_row = np.concatenate([np.diff(part.column("input_ids").chunk(0).offsets.to_numpy())
                                  for part in self.parts])
        return per_row.astype(np.int64)[self._read_rows()]

    def list_parts(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(bounds from 0, samples + 1; values) of a list column in plan order: sample i's values are
        ``values[bounds[i] : bounds[i + 1]]``."""
        if name not in self._gathered:
            self._gathered[name] = self._gather(name)
        return self._gathered[name]

    def _gather(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        offsets, values = [], []
        for part in self.parts:
            column = part.column(name).chunk(0)
            offsets.append(column.offsets.to_numpy())
            values.append(column.values.to_numpy(zero_copy_only=False))
        pieces = [values[p][offsets[p][r] : offsets[p][r + 1]]
                  for p, r in zip(self.part_of.tolist(), self.row_in_part.tolist())]
        bounds = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum([len(piece) for piece in pieces], out=bounds[1:])
        value_type = SAMPLE_SCHEMA.field(name).type.value_type.to_pandas_dtype()
        return bounds, np.concatenate(pieces) if pieces else np.zeros(0, dtype=value_type)

    def by_position(self, rows: pa.Table) -> dict[tuple[str, int], StoredSample]:
        """(samples file, row) -> the sample, for code that takes the samples one at a time."""
        stored = [list(_rows_of(part)) for part in self.parts]
        positions = zip(rows.column("file").to_pylist(), rows.column("row").to_pylist())
        return {position: stored[p][r]
                for position, p, r in zip(positions, self.part_of.tolist(), self.row_in_part.tolist())}


def read_samples(store: Storage, base: str, rows: pa.Table) -> ShardSamples:
    """The samples the plan rows name.

    Only the record batches holding a wanted row are read, one at a time, and each one's token columns are validated
    whole (ids non-negative, mask 0/1: `_validated`), so packing does not check sample by sample again."""
    files, numbers = rows.column("file").to_pylist(), rows.column("row").to_numpy().astype(np.int64)
    names = sorted(set(files))
    index_of = {name: index for index, name in enumerate(names)}
    # one int64 key per (file, row): files in name order, rows in order, so the keys of what is read come sorted
    keys = np.array([index_of[file] for file in files], dtype=np.int64) << 40 | numbers
    parts, part_keys = [], []
    for index, file in enumerate(names):
        path = sft_samples_prefix(base, ShardKey.parse(file)) + samples_file.SUFFIX
        needed = np.unique(numbers[keys >> 40 == index])
        found = start = 0
        with store.open(path) as stream:
            counts, reader = samples_file.row_counts(stream), samples_file.reader(stream, SAMPLE_COLUMNS)
            for number, count in enumerate(counts):
                here = needed[(needed >= start) & (needed < start + count)] - start
                if len(here):
                    table = _validated(pa.Table.from_batches([reader.get_batch(number)]), store.url(path), start)
                    parts.append(table.take(pa.array(here)).combine_chunks())
                    part_keys.append(index << 40 | (start + here))
                    found += len(here)
                start += count
        if found != len(needed):
            raise RuntimeError(f"{store.url(path)} has no row {int(needed[needed >= start][0])}, which the plan "
                               "names")
    # where each plan row's sample sits: its key's place among the (sorted) keys read, then its part and row there
    read = np.searchsorted(np.concatenate(part_keys), keys) if parts else np.zeros(0, dtype=np.int64)
    first_of_part = np.cumsum([0] + [len(part) for part in part_keys[:-1]])
    part_of = np.searchsorted(first_of_part, read, side="right") - 1
    return ShardSamples(parts, part_of, read - first_of_part[part_of])


def _validated(group: pa.Table, url: str, first_row: int) -> pa.Table:
    """The record batch, after checking its token columns whole; a bad value is an error naming the file and row (the
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


def stored_as_they_are(rows: pa.Table, samples: ShardSamples, settings: PackSettings) -> bool:
    """Whether every planned sample goes into its bin unchanged: no padding (``pad_to_multiple`` 1), none too short
    or over-long (so none truncated or dropped), each as long as the plan says. Then the whole shard is laid out at
    once (`lay_out_bins`); otherwise sample by sample (`prepare_sample`), which also names any disagreement."""
    if settings.pad_to_multiple != 1:
        return False
    lengths = samples.lengths()
    planned = rows.column("length").to_numpy()
    return bool(len(lengths) == len(planned) and (lengths == planned).all() and (lengths >= 2).all()
                and (lengths - 1 <= settings.max_positions).all())


def bin_sizes(rows: pa.Table) -> np.ndarray:
    """How many consecutive plan rows each bin takes (the rows of one bin are together, in bin order)."""
    bins = rows.column("bin").to_numpy()
    if not len(bins):
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.diff(bins)) + 1
    return np.diff(np.concatenate([[0], starts, [len(bins)]]))


def build_packed_shard(rows: pa.Table, samples: ShardSamples, settings: PackSettings, truncate, packed_path: Path,
                       samples_path: Path) -> PackedStats:
    """Write the shard's bins (local paths) and count them: all at once when every sample is stored as it is (the
    common case), else sample by sample. Both write the same bytes for the same shard."""
    if stored_as_they_are(rows, samples, settings):
        return build_at_once(rows, samples, settings, packed_path, samples_path)
    return build_sample_by_sample(rows, samples, settings, truncate, packed_path, samples_path)


def build_sample_by_sample(rows: pa.Table, samples: ShardSamples, settings: PackSettings, truncate,
                           packed_path: Path, samples_path: Path, row_group_bins: int = ROW_GROUP_BINS
                           ) -> PackedStats:
    """Each sample prepared as the packer does (`prepare_sample`: padding, truncation), each bin laid out by
    `build_bin` and streamed to the files."""
    stats = PackStats(pack_size=settings.pack_size)
    sample_lengths, bin_positions = [], []
    with PackedShardWriter(packed_path, samples_path, row_group_bins) as writer:
        for members in bins_of(prepared_samples(rows, samples.by_position(rows), settings, truncate, stats)):
            packed = build_bin(members)
            stats.count_bin(packed, (ready.sample.license for ready in members))
            sample_lengths += [len(ready.input_ids) for ready in members]
            bin_positions.append(packed.positions)
            writer.write(packed)
        written = writer.close()
    return PackedStats(stats, log2_histogram(sample_lengths), log2_histogram(bin_positions), _files(written))


def build_at_once(rows: pa.Table, samples: ShardSamples, settings: PackSettings, packed_path: Path,
                  samples_path: Path, row_group_bins: int = ROW_GROUP_BINS) -> PackedStats:
    """`build_sample_by_sample` for samples stored as they are (`stored_as_they_are`): the same files and counts,
    from whole arrays (`lay_out_bins`, `write_laid_out_shard`): no Python work per sample or bin."""
    bounds, input_ids = samples.list_parts("input_ids")
    laid = lay_out_bins(input_ids, samples.list_parts("assistant_mask")[1], np.diff(bounds), bin_sizes(rows))
    members = pa.table({"id": samples.column("id"), "sample": samples.column("sample"),
                        "dataset": samples.column("dataset"), "source_row": samples.column("source_row"),
                        "copy": rows.column("copy"), "truncated": pa.array(np.zeros(len(samples), dtype=bool))})
    written = write_laid_out_shard(laid, members, packed_path, samples_path, row_group_bins)
    stats = PackStats(pack_size=settings.pack_size)
    stats.count_laid_out(laid, samples.column("license").to_pylist())
    return PackedStats(stats, log2_histogram(laid.lengths), log2_histogram(laid.positions), _files(written))


def _files(written: ShardFiles) -> dict:
    """``{"bins": digest, "samples": digest}``: the two files' sizes and sha256, as written."""
    return {"bins": {"bytes": written.packed.bytes, "sha256": written.packed.sha256},
            "samples": {"bytes": written.samples_file.bytes, "sha256": written.samples_file.sha256}}


# --- the step ----------------------------------------------------------------------------------------------------
def packed_build(store: Storage, blend: str, base: str, key: SftShardKey, plan: Receipt,
                 read_by_build: dict[str, ShardSamples]) -> ShardBuild:
    """Packed shard ``key`` under ``base``, as the current plan (its receipt: ``plan``) says: its output, and its
    build. A build in the step leaves the samples it read in ``read_by_build`` (by shard key), so the shard's checks,
    run next, need not read the samples files again (pack_checks.check_packed_shard); a forked one cannot. Each
    build first drops what an earlier one left there: a forked process builds shard after shard, and nothing takes
    them there (the second build of a whole-corpus shard carried the first one's ~145 MB)."""
    output = Output(sft_packed_prefix(base, key), packed_inputs(plan, str(key)), "sft_packed", str(key),
                    extra={"blend": blend})

    def build(folder: Path, log, cores: int) -> Staged:
        rows = plan_rows(store, base, key)
        if shard_rows_digest(rows) != plan.stats["shards"][str(key)]["rows_sha256"]:
            raise RuntimeError(f"the plan rows of {key} in {store.url(sft_plan_prefix(base) + '.parquet')} do not "
                               "match the plan's receipt: re-materialize the plan")
        packed_path, samples_path = folder / "shard.parquet", folder / "shard.samples.parquet"
        read_by_build.clear()  # an earlier build's samples (docstring)
        with collector_paused():
            samples = read_samples(store, base, rows)
            built = build_packed_shard(rows, samples, settings_of(plan), truncate_of(plan), packed_path,
                                       samples_path)
        read_by_build[str(key)] = samples
        listing = packed_samples_name(key)
        return Staged({".parquet": packed_path, listing: samples_path}, built.as_dict(),
                      digests={".parquet": built.files["bins"], listing: built.files["samples"]})

    return ShardBuild(output, build, forkable=not store.is_s3)
