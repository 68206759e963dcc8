#!/usr/bin/env python3
"""SFT packing benchmark: ~1M synthetic tokenized samples -> packed Megatron-Bridge Parquet shards, per algorithm.

    .venv/bin/python bench/bench_sft_pack.py [--samples 1000000] [--pack-size 4096] [--pack-window 100000]
                                             [--algorithms first_fit_decreasing,first_fit_shuffle,concatenative]
                                             [--npy] [--naive-samples 10000]

Samples are generated on the fly, deterministically (seed 0), so nothing is held but the packer's window: lengths
follow a log-normal (median 700 tokens, sigma 0.9: mean ~1,050, ~2.5 % longer than pack_size + 1, which are dropped
as over-long), ids are copies of slices of a random pool below 200,000 (each sample owns its arrays, as real ones
do), each sample is a prompt then a trained answer.

Each run is a fresh child process (so its peak RSS is its own) doing what a split's packing does, with the
product's functions: windows of ``--pack-window`` samples, over-long ones dropped as the plan drops them, each
window's bins planned (``formats/packing.py plan_bins``, as ``sft_plan`` does), cut into shards of the default
``shard_tokens`` and written the way ``sft_packed`` writes samples stored as they are (``lay_out_bins``, then
``formats/packed_sft.py write_laid_out_shard``: zstd Parquet + the samples listing). Reported: samples/s and
tokens/s (samples and tokens offered, over the whole run, generation included), CPU seconds (user + sys: steadier
than wall time on a shared machine), bins, packing efficiency (sum(L - 1) / (bins * pack_size)) and peak RSS
(VmHWM). Baselines, in the same invocation:

- ``generate only``: producing the samples (the floor every run pays);
- ``unpacked``: writing every sample as its own row through the same writer (no planning, no concatenation):
  ``time / unpacked`` is the cost of packing over just writing the data;
- planning alone on the first ``--naive-samples`` lengths: the textbook first fit that scans every open bin (as
  NVIDIA nemotron.data_prep's packers do) against ours (a max-tree over free space), same order, same bins.

With ``--npy`` the first algorithm's shards are also turned into the split's ``.npy`` (timed separately). Outputs go
to a temp folder and are deleted after each run. The machine is noisy: compare ratios from one invocation.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nemotron_assets.formats.packing import DEFAULT_PACK_WINDOW  # noqa: E402  (after the path is set)

POOL_TOKENS = 1 << 22


def synthetic_samples(count: int, pack_size: int):
    """Deterministic samples: log-normal lengths, ids sliced from a random pool, prompt then trained answer."""
    import numpy as np

    from nemotron_assets.formats.packing import PackSample

    rng = np.random.default_rng(0)
    pool = rng.integers(0, 200_000, POOL_TOKENS + 40_000, dtype=np.int32)
    lengths = np.clip(np.rint(rng.lognormal(np.log(700), 0.9, count)), 16, 32_768).astype(np.int64)
    starts = rng.integers(0, POOL_TOKENS, count)
    prompts = (lengths * rng.uniform(0.1, 0.6, count)).astype(np.int64)
    for i in range(count):
        n = int(lengths[i])
        mask = np.zeros(n, dtype=np.uint8)
        mask[int(prompts[i]):] = 1
        ids = pool[starts[i]:starts[i] + n].copy()  # a sample owns its ids, as a tokenizer's output does
        yield PackSample(f"s{i}", "bench", i, ids, mask, license="cc-by-4.0")


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(mode: str, args) -> dict:
    """One measured run, in this (fresh) process; prints its numbers as one JSON line."""
    import numpy as np

    from nemotron_assets.formats.packed_sft import PackedShardWriter, npy_from_shards, shard_name
    from nemotron_assets.formats.packing import BinMember, PackedBin, PackSettings, PackStats, shift_mask

    if mode not in ("generate", "unpacked"):
        import nemotron_assets.defs.sft.plan_step  # noqa: F401 - `pack_window`'s, imported here: it imports Dagster (~0.7 s)

    started = (time.perf_counter(), cpu_seconds())  # after the imports
    result = {"mode": mode}
    samples = synthetic_samples(args.samples, args.pack_size)
    if mode == "generate":
        tokens = sum(len(s.input_ids) for s in samples)
        result.update(samples=args.samples, tokens=tokens)
    elif mode == "unpacked":
        with tempfile.TemporaryDirectory(dir=args.tmp) as out:
            writer = PackedShardWriter(Path(out) / shard_name(0), Path(out) / listing_name(0))
            tokens = 0
            for s in samples:
                member = BinMember(s.id, s.dataset, s.source_row, 0, 0, len(s.input_ids), False)
                writer.write(PackedBin(s.input_ids, shift_mask(s.assistant_mask), np.zeros(1, np.int32), (member,)))
                tokens += len(s.input_ids)
            files = writer.close()
            result.update(samples=args.samples, tokens=tokens, bytes=files.packed.bytes)
    else:
        settings = PackSettings(pack_size=args.pack_size, packing=mode, pack_window=args.pack_window, seed=42)
        stats = PackStats(pack_size=args.pack_size)
        with tempfile.TemporaryDirectory(dir=args.tmp) as out:
            shards, window, written = [], 0, 0
            while True:
                chunk = list(islice(samples, args.pack_window))
                if not chunk:
                    break
                offered_tokens = sum(len(s.input_ids) for s in chunk)
                for files in pack_window(chunk, settings, stats, window, len(shards), Path(out)):
                    shards.append(Path(files.packed.path))
                    written += files.packed.bytes
                result["tokens_offered"] = result.get("tokens_offered", 0) + offered_tokens
                del chunk
                window += 1
            result.update(samples=stats.samples_in, packed=stats.samples, tokens=result.pop("tokens_offered"),
                          packed_tokens=stats.tokens, bins=stats.bins, efficiency=stats.packing_efficiency,
                          dropped=dict(stats.dropped), shards=len(shards), bytes=written)
            result.update(measure(started))
            if args.npy:  # after the measurement: the .npy is its own step, timed alone
                npy_started = time.perf_counter()
                info = npy_from_shards(shards, Path(out) / "train.npy")
                result.update(npy_seconds=time.perf_counter() - npy_started, npy_bytes=info.bytes,
                              npy_peak_rss_mb=peak_rss_mb())
        return result
    result.update(measure(started))
    return result


def listing_name(shard: int) -> str:
    return f"shard_{shard:05d}.samples.parquet"


def pack_window(chunk: list, settings, stats, window: int, first_shard: int, out: Path) -> list:
    """One window of samples -> its packed shards, as the plan and the packed step make them for samples stored as
    they are: over-long samples dropped (counted), bins planned on the others' positions and cut into shards of at
    most the default ``shard_tokens`` (here a window's bins are cut alone; the plan cuts a split's bins across
    windows), each shard's bins laid out and written at once. Returns the shards' files."""
    import numpy as np
    import pyarrow as pa

    from nemotron_assets.core.sections import DEFAULT_SHARD_TOKENS
    from nemotron_assets.defs.sft.plan_step import shard_bounds
    from nemotron_assets.formats.packed_sft import shard_name, write_laid_out_shard
    from nemotron_assets.formats.packing import OVERLONG, lay_out_bins, plan_bins

    kept = [s for s in chunk if len(s.input_ids) - 1 <= settings.max_positions]
    stats.samples_in += len(chunk) - len(kept)  # offered (count_laid_out counts the others)
    stats.dropped[OVERLONG] += len(chunk) - len(kept)
    bins = plan_bins([len(s.input_ids) - 1 for s in kept], settings, window)
    written = []
    for shard, (first, end) in enumerate(shard_bounds(len(bins), max(1, DEFAULT_SHARD_TOKENS // settings.pack_size)),
                                         start=first_shard):
        order = [kept[i] for members in bins[first:end] for i in members]
        laid = lay_out_bins(np.concatenate([s.input_ids for s in order]),
                            np.concatenate([s.assistant_mask for s in order]),
                            np.array([len(s.input_ids) for s in order]),
                            np.array([len(members) for members in bins[first:end]]))
        members = pa.table({"id": [s.id for s in order], "sample": [s.sample for s in order],
                            "dataset": [s.dataset for s in order], "source_row": [s.source_row for s in order],
                            "copy": [s.copy for s in order], "truncated": np.zeros(len(order), dtype=bool)})
        written.append(write_laid_out_shard(laid, members, out / shard_name(shard), out / listing_name(shard)))
        stats.count_laid_out(laid, (s.license for s in order))
    return written


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(started: tuple[float, float]) -> dict:
    return {"seconds": time.perf_counter() - started[0], "cpu_seconds": cpu_seconds() - started[1],
            "peak_rss_mb": peak_rss_mb()}


def run_child(mode: str, args, npy: bool = False) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--samples", str(args.samples), "--pack-size",
               str(args.pack_size), "--pack-window", str(args.pack_window), "--tmp", args.tmp]
    if npy:
        command.append("--npy")
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        sys.exit(f"{mode} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def naive_first_fit(lengths, order, capacity):
    bins, free = [], []
    for item in order:
        for b, room in enumerate(free):
            if room >= lengths[item]:
                bins[b].append(item)
                free[b] -= lengths[item]
                break
        else:
            bins.append([item])
            free.append(capacity - lengths[item])
    return bins


def planning_comparison(args) -> dict:
    from nemotron_assets.formats.packing import first_fit, shuffle_order

    lengths = [len(s.input_ids) - 1 for s in islice(synthetic_samples(args.naive_samples * 2, args.pack_size),
                                                    args.naive_samples * 2) if len(s.input_ids) - 1 <= args.pack_size]
    lengths = lengths[:args.naive_samples]
    order = shuffle_order(len(lengths), 42, 0).tolist()
    started = time.perf_counter()
    naive = naive_first_fit(lengths, order, args.pack_size)
    naive_seconds = time.perf_counter() - started
    started = time.perf_counter()
    ours = first_fit(lengths, order, args.pack_size)
    ours_seconds = time.perf_counter() - started
    if naive != ours:
        sys.exit("the max-tree first fit and the textbook first fit disagree")
    return {"samples": len(lengths), "bins": len(ours), "naive_seconds": naive_seconds, "ours_seconds": ours_seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--pack-size", type=int, default=4096)
    parser.add_argument("--pack-window", type=int, default=DEFAULT_PACK_WINDOW)
    parser.add_argument("--algorithms", default="first_fit_decreasing,first_fit_shuffle,concatenative")
    parser.add_argument("--npy", action="store_true", help="also write the split's .npy from the shards")
    parser.add_argument("--naive-samples", type=int, default=10_000)
    parser.add_argument("--tmp", default=tempfile.gettempdir())
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0

    print(f"{args.samples:,} samples, pack_size {args.pack_size}, pack_window {args.pack_window:,}, "
          f"{os.cpu_count()} cores", flush=True)
    algorithms = args.algorithms.split(",")
    runs = [run_child(mode, args, npy=args.npy and mode == algorithms[0])
            for mode in ["generate", "unpacked", *algorithms]]
    baseline = {run["mode"]: run for run in runs}
    print("\n| run | wall s | CPU s | samples/s | M tokens/s | M tokens/CPU-s | bins | packing efficiency "
          "| peak RSS MB | wall / unpacked | CPU / unpacked |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    unpacked = baseline["unpacked"]
    for run in runs:
        efficiency = f"{run['efficiency'] * 100:.2f} %" if "efficiency" in run else ""
        print(f"| {run['mode']} | {run['seconds']:.1f} | {run['cpu_seconds']:.1f} | "
              f"{run['samples'] / run['seconds']:,.0f} | {run['tokens'] / run['seconds'] / 1e6:.2f} | "
              f"{run['tokens'] / run['cpu_seconds'] / 1e6:.2f} | "
              f"{run.get('bins', '')} | {efficiency} | {run['peak_rss_mb']:,.0f} | "
              f"{run['seconds'] / unpacked['seconds']:.2f} | {run['cpu_seconds'] / unpacked['cpu_seconds']:.2f} |")
    for run in runs:
        if "dropped" in run:
            print(f"{run['mode']}: {run['packed']:,} of {run['samples']:,} samples packed "
                  f"({run['packed_tokens']:,} tokens, {run['shards']} shards, {run['bytes'] / 1e6:,.0f} MB), "
                  f"dropped {run['dropped']}")
        if "npy_seconds" in run:
            print(f"  then the split's .npy from its shards: {run['npy_bytes'] / 1e6:,.0f} MB in "
                  f"{run['npy_seconds']:.1f} s ({run['packed_tokens'] / run['npy_seconds'] / 1e6:.1f} M tokens/s), "
                  f"peak RSS {run['npy_peak_rss_mb']:,.0f} MB")
    plan = planning_comparison(args)
    print(f"\nplanning only, first fit of {plan['samples']:,} lengths into {plan['bins']:,} bins: textbook scan "
          f"{plan['naive_seconds']:.2f} s, max-tree {plan['ours_seconds']:.3f} s "
          f"(ratio {plan['naive_seconds'] / plan['ours_seconds']:.1f}x), identical bins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
