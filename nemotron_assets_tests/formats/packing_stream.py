"""Packing a stream of samples and writing a shard in one call: how the tests drive ``formats/packing.py`` and
``formats/packed_sft.py``. The product does the same in two steps, the plan (defs/sft/plan_step.py: ``plan_bins``
window by window) and the packed shards (defs/sft/pack_step.py: ``build_bin`` into a ``PackedShardWriter``)."""

from collections.abc import Iterable, Iterator
from pathlib import Path

from nemotron_assets.formats.packed_sft import PackedShardWriter, ShardFiles
from nemotron_assets.formats.packing import (
    PackedBin,
    PackSample,
    PackSettings,
    PackStats,
    PreparedSample,
    Truncate,
    build_bin,
    plan_bins,
    prepare_sample,
)


def pack_samples(samples: Iterable[PackSample], settings: PackSettings, stats: PackStats | None = None,
                 truncate: Truncate | None = None, first_window: int = 0) -> Iterator[PackedBin]:
    """Stream bins out of samples, one window of ``pack_window`` offered samples at a time (module docstring)."""
    stats = PackStats(pack_size=settings.pack_size) if stats is None else stats
    if stats.pack_size != settings.pack_size:
        raise ValueError(f"stats are for pack_size {stats.pack_size}, settings say {settings.pack_size}")
    window, offered, window_index = [], 0, first_window
    for sample in samples:
        ready = prepare_sample(sample, settings, stats, truncate)
        offered += 1
        if ready is not None:
            window.append(ready)
        if offered == settings.pack_window:
            yield from _pack_window(window, settings, stats, window_index)
            window, offered, window_index = [], 0, window_index + 1
    if window:
        yield from _pack_window(window, settings, stats, window_index)


def _pack_window(window: list[PreparedSample], settings: PackSettings, stats: PackStats,
                 index: int) -> Iterator[PackedBin]:
    plan = plan_bins([len(ready.input_ids) - 1 for ready in window], settings, index)
    for members in plan:
        chosen = [window[i] for i in members]
        packed = build_bin(chosen)
        stats.count_bin(packed, (ready.sample.license for ready in chosen))
        yield packed


def write_packed_shard(bins: Iterable[PackedBin], packed_path: Path, samples_path: Path) -> ShardFiles:
    """Write every bin of one shard (see `PackedShardWriter`)."""
    with PackedShardWriter(packed_path, samples_path) as writer:
        for packed in bins:
            writer.write(packed)
        return writer.close()
