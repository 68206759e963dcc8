"""Pack tokenized chat samples into bins of at most ``pack_size`` training positions (Megatron-Bridge packed SFT).

A *sample* is one tokenized conversation (or one user turn of it): ``input_ids`` (int32) and ``assistant_mask``
(uint8, *unshifted*: 1 where the token itself is trained), plus its id, dataset, source row, index in its
conversation, repeat copy and license (`PackSample`). A *bin* is
a run of whole samples laid end to end: ``input_ids``, ``loss_mask`` and ``seq_start_id`` (`PackedBin`).

The rules come from how Megatron-Bridge reads a bin (``src/megatron/bridge/data/packing/gpt_sft.py``,
``GPTSFTPackedDataset.collate_fn`` and ``_build_loss_mask``, in NVIDIA-NeMo/Megatron-Bridge):

- **Capacity.** The collate drops each sample's last token from the inputs (and its first from the labels), so a
  sample of ``L`` tokens takes ``L - 1`` positions. A bin's samples satisfy ``sum(L_i - 1) <= pack_size``. No sample
  is ever split across bins, and a bin holds no padding after its last sample (``seq_start_id + [len(input_ids)]``
  are the sample boundaries).
- **Loss mask.** Inside each sample the mask is shifted left by one, so ``loss_mask[j]`` gates predicting
  ``input_ids[j + 1]``; the sample's last position is 0 (``_build_loss_mask`` reads ``loss_mask[start:end - 1]``).
  NeMo's own packer does the same roll (``fill_packing_strategy`` in ``.../packing/algorithms.py``).
- **pad_to_multiple** (Bridge's ``pad_seq_to_mult``, for context parallelism; ``_pre_pad_data_point`` and
  ``tokenize_dataset`` in ``.../packing/offline.py``). With ``m > 1`` each sample is padded with the pad id (the EOS
  id, Bridge's ``tokenizer.eod``), unshifted mask 0, until ``L - 1`` is a multiple of ``m``. The longest allowed
  sample then has ``L - 1 = (pack_size // m) * m`` (Bridge's ``max_runtime_pad_cap``).
- **Over-long** samples (``L - 1`` above that limit) are dropped (``overlong: drop``) or cut by a template-aware
  ``truncate`` function that keeps the head and still ends on the template's end-of-turn (``overlong: truncate``).
  Either way they are counted.
- **Too short.** A sample of fewer than 2 tokens has nothing to predict and is dropped (counted ``too_short``).

**Algorithms** (``packing``), all on the lengths ``L - 1``:

- ``first_fit_decreasing``: sort by length, longest first (ties keep input order), then first fit: each sample goes
  into the lowest-numbered open bin with room, or opens a new bin.
- ``first_fit_shuffle`` (default): first fit in a seeded pseudo-random order (`shuffle_order`): the position ``i``
  of a window gets the key ``splitmix64(stream + i)`` with ``stream = splitmix64(splitmix64(seed) ^ window)``
  (arithmetic mod 2**64; SplitMix64 is Steele, Lea and Flood's public mixing function), and samples are taken in
  ascending key order (ties by position). Nothing depends on a library's random stream, so the order is the same
  on every machine and numpy version.
- ``concatenative``: next fit in input order: samples fill the current bin until the next one does not fit.

Bins come out in the order they were opened; a bin's samples in the order they were placed. First fit is
``O(n log n)`` through a max-tree over the bins' free space (`_FirstFit`).

**Windows.** ``pack_window`` samples (counted as they are offered, dropped ones included) are packed together and
then released, so memory is bounded by one window: about ``5 bytes * tokens`` of the window (measured with
``bench/bench_sft_pack.py``). Packing quality hardly depends on the window beyond a few thousand samples (only the
last, partly filled bins of each window are lost), so the default favours memory. Window ``k`` of a stream
packs exactly as it would alone with ``first_window=k``, so a split can be packed window by window in separate
processes (one output shard per window) with the same result.

The check helpers at the end (`bin_problems`, `unpack_bin`, `compare_samples`, `masked_role_problems`) are the pure
parts of the asset checks.
"""

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Algorithm = Literal["first_fit_decreasing", "first_fit_shuffle", "concatenative"]
ALGORITHMS: tuple[Algorithm, ...] = ("first_fit_decreasing", "first_fit_shuffle", "concatenative")
Overlong = Literal["drop", "truncate"]

DEFAULT_PACK_SIZE = 4096
DEFAULT_PACK_WINDOW = 100_000  # held at once, ~5 bytes a token: 0.87 GB peak RSS measured at ~1,050 tokens a sample

# Drop reasons (stable metadata keys).
TOO_SHORT = "too_short"
OVERLONG = "overlong"
OVERLONG_NOTHING_TRAINED = "overlong_truncated_nothing_trained"

# ``truncate(input_ids, assistant_mask, max_tokens) -> (input_ids, assistant_mask)``: keep the head, at most
# ``max_tokens`` tokens, ending on the template's end-of-turn (the rendering code provides it).
Truncate = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PackSample:
    """One tokenized sample on its way into a bin. ``assistant_mask`` is unshifted (1 = this token is trained)."""

    id: str
    dataset: str
    source_row: int
    input_ids: np.ndarray
    assistant_mask: np.ndarray
    copy: int = 0  # which repeat of the row this is (split.repeat_count)
    license: str | None = None
    sample: int = 0  # which sample of its conversation this is (one per user turn with reasoning)
    #: The arrays are int32/uint8, the ids non-negative and the mask 0/1 already: a reader that validated a whole
    #: column at once (pack_step.read_samples) says so, and `prepare_sample` does not check each sample again.
    checked: bool = False


#: The smallest bin: a sample of ``L`` tokens takes ``L - 1`` positions, and one that trains a token has ``L >= 2``.
MIN_PACK_SIZE = 2


def check_sizes(pack_size: int, pack_window: int, pad_to_multiple: int) -> None:
    """The one validation of the packing sizes, for the blend's ``sft:`` section and for `PackSettings`: a
    ``ValueError`` naming the setting."""
    for name, value, least in (("pack_size", pack_size, MIN_PACK_SIZE), ("pack_window", pack_window, 1),
                               ("pad_to_multiple", pad_to_multiple, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"sft.{name} must be an integer >= {least}, got {value!r}")
    if pad_to_multiple > pack_size:
        raise ValueError(f"sft.pad_to_multiple ({pad_to_multiple}) exceeds sft.pack_size ({pack_size})")


@dataclass(frozen=True)
class PackSettings:
    """The blend's ``sft:`` packing keys (see the module docstring for each rule)."""

    pack_size: int = DEFAULT_PACK_SIZE
    packing: Algorithm = "first_fit_shuffle"
    pack_window: int = DEFAULT_PACK_WINDOW
    pad_to_multiple: int = 1
    overlong: Overlong = "drop"
    seed: int = 0
    pad_id: int | None = None  # the EOS id; needed when pad_to_multiple > 1

    def __post_init__(self) -> None:
        if self.packing not in ALGORITHMS:
            raise ValueError(f"sft.packing must be one of {', '.join(ALGORITHMS)}, got {self.packing!r}")
        if self.overlong not in ("drop", "truncate"):
            raise ValueError(f"sft.overlong must be 'drop' or 'truncate', got {self.overlong!r}")
        check_sizes(self.pack_size, self.pack_window, self.pad_to_multiple)
        if self.pad_to_multiple > 1 and self.pad_id is None:
            raise ValueError("sft.pad_to_multiple > 1 needs the pad id (the tokenizer's EOS id)")

    @property
    def max_positions(self) -> int:
        """The most positions (``L - 1``) one sample may take: Bridge's ``max_runtime_pad_cap``."""
        return (self.pack_size // self.pad_to_multiple) * self.pad_to_multiple


@dataclass(frozen=True)
class BinMember:
    """Where one sample sits in a bin, and what it was (the ``samples.parquet`` row)."""

    id: str
    dataset: str
    source_row: int
    copy: int
    offset: int  # its seq_start_id
    length: int  # tokens stored, padding included
    truncated: bool
    sample: int = 0


@dataclass(frozen=True)
class PackedBin:
    input_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # uint8, shifted inside each sample
    seq_start_id: np.ndarray  # int32, starts at 0
    members: tuple[BinMember, ...]

    @property
    def positions(self) -> int:
        """sum(L_i - 1): what the bin costs against ``pack_size``."""
        return len(self.input_ids) - len(self.seq_start_id)


@dataclass
class PackStats:
    """Counts of one packing run (a shard or a whole split; `merge` adds them up)."""

    pack_size: int = DEFAULT_PACK_SIZE
    samples_in: int = 0  # samples offered
    samples: int = 0  # samples packed
    bins: int = 0
    tokens: int = 0  # stored tokens, padding included
    positions: int = 0  # sum(L - 1) over packed samples
    trained_tokens: int = 0  # ones in the shifted loss mask
    pad_tokens: int = 0
    truncated: int = 0
    max_samples_per_bin: int = 0
    min_bin_positions: int | None = None  # Bridge's min_packed_seqlen
    max_sample_positions: int = 0  # Bridge's dataset_max_seqlen
    dropped: Counter = field(default_factory=Counter)
    licenses: Counter = field(default_factory=Counter)

    @property
    def packing_efficiency(self) -> float:
        """The share of bin capacity holding sample positions: sum(L - 1) / (bins * pack_size)."""
        return self.positions / (self.bins * self.pack_size) if self.bins else 0.0

    def count_bin(self, packed: PackedBin, licenses: Iterable[str | None]) -> None:
        positions = packed.positions
        self.bins += 1
        self.samples += len(packed.members)
        self.tokens += len(packed.input_ids)
        self.positions += positions
        self.trained_tokens += int(np.count_nonzero(packed.loss_mask))
        self.truncated += sum(member.truncated for member in packed.members)
        self.max_samples_per_bin = max(self.max_samples_per_bin, len(packed.members))
        self.min_bin_positions = positions if self.min_bin_positions is None else min(self.min_bin_positions, positions)
        self.licenses.update(license or "unknown" for license in licenses)

    def count_laid_out(self, bins: "LaidOutBins", licenses: Iterable[str | None]) -> None:
        """`count_bin` of every bin at once, for samples stored as they are (offered, packed, none padded or
        truncated): the same counts."""
        lengths, positions = bins.lengths, bins.positions
        self.samples_in += len(lengths)
        self.samples += len(lengths)
        self.bins += bins.bins
        self.tokens += len(bins.input_ids)
        self.positions += int(positions.sum())
        self.trained_tokens += int(np.count_nonzero(bins.loss_mask))
        if bins.bins:
            self.max_samples_per_bin = max(self.max_samples_per_bin, int(np.diff(bins.bin_bounds).max()))
            fewest = int(positions.min())
            self.min_bin_positions = fewest if self.min_bin_positions is None else min(self.min_bin_positions, fewest)
        if len(lengths):
            self.max_sample_positions = max(self.max_sample_positions, int(lengths.max()) - 1)
        self.licenses.update(license or "unknown" for license in licenses)

    def merge(self, other: "PackStats") -> None:
        if other.pack_size != self.pack_size:
            raise ValueError(f"cannot merge packing stats of pack_size {other.pack_size} into {self.pack_size}")
        for name in ("samples_in", "samples", "bins", "tokens", "positions", "trained_tokens", "pad_tokens",
                     "truncated"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_samples_per_bin = max(self.max_samples_per_bin, other.max_samples_per_bin)
        self.max_sample_positions = max(self.max_sample_positions, other.max_sample_positions)
        if other.min_bin_positions is not None:
            self.min_bin_positions = (other.min_bin_positions if self.min_bin_positions is None
                                      else min(self.min_bin_positions, other.min_bin_positions))
        self.dropped.update(other.dropped)
        self.licenses.update(other.licenses)

    def as_dict(self) -> dict:
        return {"pack_size": self.pack_size, "samples_in": self.samples_in, "samples": self.samples,
                "bins": self.bins, "tokens": self.tokens, "positions": self.positions,
                "trained_tokens": self.trained_tokens, "pad_tokens": self.pad_tokens, "truncated": self.truncated,
                "packing_efficiency": self.packing_efficiency, "max_samples_per_bin": self.max_samples_per_bin,
                "min_bin_positions": self.min_bin_positions, "max_sample_positions": self.max_sample_positions,
                "dropped": dict(sorted(self.dropped.items())), "licenses": dict(sorted(self.licenses.items()))}


# --- one sample: validate, truncate or drop, pad ---------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedSample:
    """A sample as it will be stored: padded, maybe truncated, mask still unshifted."""

    sample: PackSample
    input_ids: np.ndarray
    mask: np.ndarray
    truncated: bool


def _zeros_and_ones(values: np.ndarray) -> bool:
    """Every value is 0 or 1 (two reductions; np.isin sorts and is ~10x slower here)."""
    if values.dtype == np.bool_:
        return True
    return bool(np.issubdtype(values.dtype, np.integer) and values.min() >= 0 and values.max() <= 1)


def _checked_arrays(input_ids: np.ndarray, assistant_mask: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The arrays as int32/uint8, or a ValueError naming the sample (a bug upstream, not bad data)."""
    ids, mask = np.asarray(input_ids), np.asarray(assistant_mask)
    if ids.ndim != 1 or mask.ndim != 1 or len(ids) != len(mask):
        raise ValueError(f"{where}: input_ids {ids.shape} and assistant_mask {mask.shape} must be 1-D, equal length")
    if len(ids) and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{where}: input_ids must be integers, got {ids.dtype}")
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) > np.iinfo(np.int32).max):
        raise ValueError(f"{where}: a token id is outside int32 [0, 2**31)")
    if len(mask) and not _zeros_and_ones(mask):
        raise ValueError(f"{where}: assistant_mask must hold only 0 and 1")
    return ids.astype(np.int32, copy=False), mask.astype(np.uint8, copy=False)


def prepare_sample(sample: PackSample, settings: PackSettings, stats: PackStats,
                   truncate: Truncate | None = None) -> PreparedSample | None:
    """The sample as it goes into a bin, or None when dropped (counted in ``stats.dropped``)."""
    stats.samples_in += 1
    where = f"sample {sample.id!r} (dataset {sample.dataset!r}, row {sample.source_row})"
    ids, mask = ((sample.input_ids, sample.assistant_mask) if sample.checked
                 else _checked_arrays(sample.input_ids, sample.assistant_mask, where))
    truncated = False
    if len(ids) - 1 > settings.max_positions:
        if settings.overlong == "drop":
            stats.dropped[OVERLONG] += 1
            return None
        if truncate is None:
            raise ValueError("sft.overlong is 'truncate' but no truncate function was given")
        ids, mask = _checked_arrays(*truncate(ids, mask, settings.max_positions + 1), f"truncated {where}")
        if len(ids) - 1 > settings.max_positions:
            raise ValueError(f"truncated {where}: {len(ids)} tokens, more than the {settings.max_positions + 1} "
                             "allowed")
        if not mask[1:].any():
            stats.dropped[OVERLONG_NOTHING_TRAINED] += 1
            return None
        truncated = True
    if len(ids) < 2:
        stats.dropped[TOO_SHORT] += 1
        return None
    pad = -(len(ids) - 1) % settings.pad_to_multiple
    if pad:
        ids = np.concatenate([ids, np.full(pad, settings.pad_id, dtype=np.int32)])
        mask = np.concatenate([mask, np.zeros(pad, dtype=np.uint8)])
        stats.pad_tokens += pad
    stats.max_sample_positions = max(stats.max_sample_positions, len(ids) - 1)
    return PreparedSample(sample, ids, mask, truncated)


# --- planning: which samples share a bin -----------------------------------------------------------------------------

_MASK64 = (1 << 64) - 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 values (wrapping arithmetic)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def shuffle_order(n: int, seed: int, window: int) -> np.ndarray:
    """The order first_fit_shuffle takes a window's ``n`` samples in (module docstring)."""
    seed_key = _splitmix64(np.array([seed & _MASK64], dtype=np.uint64))[0]
    stream = _splitmix64(np.array([seed_key ^ np.uint64(window & _MASK64)], dtype=np.uint64))[0]
    keys = _splitmix64(stream + np.arange(n, dtype=np.uint64))
    return np.argsort(keys, kind="stable")


class _FirstFit:
    """Bins in a max-tree of their free space: each item goes into the lowest-numbered bin with room in O(log bins).

    Leaves ``size .. 2 * size - 1`` hold the free positions of bins ``0 .. size - 1`` (0 for a bin not opened yet,
    which no item of length >= 1 can use); every inner node holds the max of its two children. One method does the
    search and the update (a method call per item, not two: this loop is most of ``sft_plan``'s time)."""

    def __init__(self, capacity: int, pack_size: int) -> None:
        self.size = 1 << max(0, capacity - 1).bit_length()
        self.tree = [0] * (2 * self.size)
        self.pack_size = pack_size
        self.opened = 0

    def place(self, need: int) -> int:
        """Put an item of ``need`` positions into the lowest-numbered bin with room, or into a new bin when none
        has room; return that bin's number."""
        tree, size = self.tree, self.size
        if tree[1] >= need:  # some bin has room: walk down to the leftmost one
            node = 1
            while node < size:
                node *= 2
                if tree[node] < need:
                    node += 1
            free = tree[node] - need
        else:
            node = size + self.opened
            self.opened += 1
            free = self.pack_size - need
        tree[node] = free
        placed = node - size
        node //= 2
        while node:  # the maxima above the leaf, until one does not change
            left, right = tree[2 * node], tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node //= 2
        return placed


def first_fit(lengths: Sequence[int], order: Iterable[int], pack_size: int) -> list[list[int]]:
    """Place the items in ``order``, each into the lowest-numbered bin with room; bins hold item indices."""
    packer = _FirstFit(len(lengths), pack_size)
    bins: list[list[int]] = []
    for item in order:
        placed = packer.place(lengths[item])
        if placed == len(bins):
            bins.append([])
        bins[placed].append(item)
    return bins


def next_fit(lengths: Sequence[int], pack_size: int) -> list[list[int]]:
    """Concatenative packing: fill the current bin in input order, open a new one when the next item does not fit."""
    bins: list[list[int]] = []
    free = 0
    for item, need in enumerate(lengths):
        if need > free or not bins:
            bins.append([])
            free = pack_size
        bins[-1].append(item)
        free -= need
    return bins


def plan_bins(lengths: Sequence[int], settings: PackSettings, window: int = 0) -> list[list[int]]:
    """Which items (by index) share each bin, for one window; every length must be in [1, pack_size]."""
    lengths = [int(n) for n in lengths]
    if lengths and (min(lengths) < 1 or max(lengths) > settings.pack_size):
        raise ValueError(f"every length must be in [1, {settings.pack_size}] to be packed")
    if settings.packing == "concatenative":
        return next_fit(lengths, settings.pack_size)
    if settings.packing == "first_fit_decreasing":
        order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable").tolist()
    else:
        order = shuffle_order(len(lengths), settings.seed, window).tolist()
    return first_fit(lengths, order, settings.pack_size)


# --- building bins ---------------------------------------------------------------------------------------------------


def shift_mask(mask: np.ndarray) -> np.ndarray:
    """One sample's loss mask: ``shifted[j] = mask[j + 1]``, last position 0."""
    shifted = np.zeros(len(mask), dtype=np.uint8)
    shifted[:-1] = mask[1:]
    return shifted


def shift_end_to_end(unshifted: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The loss mask of samples laid end to end (``ends``: where each sample ends): each one's unshifted mask shifted
    left by one inside it, and its last position 0, since it predicts nothing (not the next sample's first token)."""
    loss_mask = np.zeros(len(unshifted), dtype=np.uint8)
    loss_mask[:-1] = unshifted[1:]
    loss_mask[ends - 1] = 0
    return loss_mask


def build_bin(members: Sequence[PreparedSample]) -> PackedBin:
    """Lay the samples end to end: ids concatenated, masks shifted inside each sample, starts from 0."""
    lengths = np.array([len(ready.input_ids) for ready in members], dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    input_ids = np.concatenate([ready.input_ids for ready in members])
    loss_mask = shift_end_to_end(np.concatenate([ready.mask for ready in members]), ends)
    placed = tuple(BinMember(r.sample.id, r.sample.dataset, int(r.sample.source_row), int(r.sample.copy),
                             int(start), int(length), r.truncated, int(r.sample.sample))
                   for r, start, length in zip(members, starts, lengths))
    return PackedBin(input_ids, loss_mask, starts.astype(np.int32), placed)


@dataclass(frozen=True)
class LaidOutBins:
    """Consecutive bins as flat arrays: what `build_bin` makes one bin at a time, for many bins at once (a packed
    shard whose samples are stored as they are: pack_step.py). Sample ``i`` is ``input_ids[sample_bounds[i] :
    sample_bounds[i + 1]]``; bin ``b`` holds samples ``bin_bounds[b]`` to ``bin_bounds[b + 1] - 1``."""

    input_ids: np.ndarray  # int32, every bin's tokens end to end
    loss_mask: np.ndarray  # uint8, shifted inside each sample
    sample_bounds: np.ndarray  # int64, samples + 1
    bin_bounds: np.ndarray  # int64, bins + 1

    @property
    def bins(self) -> int:
        return len(self.bin_bounds) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.sample_bounds)

    @property
    def token_bounds(self) -> np.ndarray:
        """Where each bin's tokens start in ``input_ids`` (bins + 1: the total last)."""
        return self.sample_bounds[self.bin_bounds]

    @property
    def seq_start_id(self) -> np.ndarray:
        """Each sample's start inside its bin (int32): the bins' ``seq_start_id`` lists, end to end."""
        bin_start = np.repeat(self.token_bounds[:-1], np.diff(self.bin_bounds))
        return (self.sample_bounds[:-1] - bin_start).astype(np.int32)

    @property
    def positions(self) -> np.ndarray:
        """sum(L_i - 1) of each bin: its tokens minus its samples."""
        return np.diff(self.token_bounds) - np.diff(self.bin_bounds)


def lay_out_bins(input_ids: np.ndarray, assistant_mask: np.ndarray, lengths: np.ndarray,
                 bin_sizes: np.ndarray) -> LaidOutBins:
    """Bins from samples already in bin order, stored as they are (no truncation, no padding): ``input_ids`` and the
    unshifted ``assistant_mask`` of every sample end to end, each sample's length, and how many samples each bin
    takes in turn. The mask is shifted inside each sample exactly as `build_bin` does."""
    sample_bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=sample_bounds[1:])
    bin_bounds = np.zeros(len(bin_sizes) + 1, dtype=np.int64)
    np.cumsum(bin_sizes, out=bin_bounds[1:])
    if sample_bounds[-1] != len(input_ids) or len(assistant_mask) != len(input_ids) or bin_bounds[-1] != len(lengths):
        raise ValueError(f"{len(lengths)} samples of {sample_bounds[-1]} tokens in {len(bin_sizes)} bins of "
                         f"{bin_bounds[-1]} samples cannot lay out {len(input_ids)} ids and {len(assistant_mask)} "
                         "mask values")
    return LaidOutBins(np.asarray(input_ids, dtype=np.int32), shift_end_to_end(assistant_mask, sample_bounds[1:]),
                       sample_bounds, bin_bounds)


# --- pure checks (the asset checks call these) -----------------------------------------------------------------------


def bin_problems(input_ids: np.ndarray, loss_mask: np.ndarray, seq_start_id: np.ndarray, pack_size: int,
                 where: str = "bin") -> list[str]:
    """What is wrong with one stored bin: lengths, seq_start_id, capacity and the shifted mask's zeros."""
    n = len(input_ids)
    starts = np.asarray(seq_start_id, dtype=np.int64)
    if len(loss_mask) != n:
        return [f"{where}: loss_mask has {len(loss_mask)} entries, input_ids {n}"]
    if len(starts) == 0 or starts[0] != 0:
        return [f"{where}: seq_start_id must start with 0, got {starts[:3].tolist()}"]
    bounds = np.append(starts, n)
    if (np.diff(bounds) < 2).any():
        return [f"{where}: seq_start_id {starts.tolist()[:8]} does not cut {n} tokens into samples of >= 2 tokens"]
    problems = []
    if n - len(starts) > pack_size:
        problems.append(f"{where}: sum(len - 1) = {n - len(starts)} exceeds pack_size {pack_size}")
    mask = np.asarray(loss_mask)
    if len(mask) and not _zeros_and_ones(mask):
        problems.append(f"{where}: loss_mask holds values other than 0 and 1")
    if mask[bounds[1:] - 1].any():
        problems.append(f"{where}: a sample's last loss_mask position is not 0")
    return problems


def unpack_bin(input_ids: np.ndarray, loss_mask: np.ndarray, seq_start_id: np.ndarray
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (input_ids, shifted loss_mask) of each sample of a bin, in order."""
    bounds = np.append(np.asarray(seq_start_id, dtype=np.int64), len(input_ids))
    return [(input_ids[a:b], loss_mask[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def unshift_mask(loss_mask: np.ndarray) -> np.ndarray:
    """One sample's unshifted mask back from its shifted one (position 0, never trained by a template, reads 0)."""
    unshifted = np.zeros(len(loss_mask), dtype=np.uint8)
    unshifted[1:] = loss_mask[:-1]
    return unshifted


def planned_digest(sample: PackSample, settings: PackSettings, truncate: Truncate | None = None) -> str | None:
    """sha256 of what the packer must store for this sample (ids, then shifted mask), or None if it is dropped."""
    ready = prepare_sample(sample, settings, PackStats(pack_size=settings.pack_size), truncate)
    return None if ready is None else sample_digest(ready.input_ids, shift_mask(ready.mask))


def sample_digest(input_ids: np.ndarray, loss_mask: np.ndarray) -> str:
    """sha256 of a stored sample: its ids as little-endian int32, then its shifted mask as uint8."""
    digest = hashlib.sha256(np.asarray(input_ids, dtype="<i4").tobytes())
    digest.update(np.asarray(loss_mask, dtype=np.uint8).tobytes())
    return digest.hexdigest()


SampleKey = tuple[str, str, int, int]  # (dataset, id, sample, copy)


def compare_samples(stored: Iterable[tuple[SampleKey, str]], planned: Iterable[tuple[SampleKey, str]],
                    limit: int = 10) -> list[str]:
    """Problems when the stored samples (key, digest) are not exactly the planned ones: missing, extra, changed."""
    expected: dict[SampleKey, str] = {}
    problems: list[str] = []
    for key, digest in planned:
        if key in expected:
            problems.append(f"planned sample {key} appears twice")
        expected[key] = digest
    for key, digest in stored:
        want = expected.pop(key, None)
        if want is None:
            problems.append(f"stored sample {key} was not planned (or is stored twice)")
        elif want != digest:
            problems.append(f"stored sample {key} differs from the planned one")
    problems.extend(f"planned sample {key} is missing" for key in list(expected)[:limit])
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more"]
    return problems


def masked_role_problems(assistant_mask: np.ndarray, masked_spans: Iterable[tuple[int, int]],
                         where: str = "sample") -> list[str]:
    """Trained tokens inside token spans of roles that must not be trained (system, user, tool, ...).

    ``assistant_mask`` is a sample's unshifted mask; spans are ``[start, end)`` token ranges.
    """
    problems = []
    for start, end in masked_spans:
        trained = int(np.count_nonzero(np.asarray(assistant_mask)[start:end]))
        if trained:
            problems.append(f"{where}: {trained} trained token(s) in masked span [{start}, {end})")
    return problems
