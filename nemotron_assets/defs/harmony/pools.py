"""Candidate pools: named polars predicates over normalized, deduplicated Harmony rows.

Every pool starts from the base filter and adds its own condition. The base filter keeps rows that are valid
Harmony, have a non-empty completion and a valid tool schema, are not duplicates and -- unless
``include_placeholder_prompts`` -- do not answer a placeholder prompt (``quality_placeholder_prompt``: an empty,
whitespace or ``"-"`` user turn, e.g. the redacted prompts of the code sets). Pools overlap by design: a row can be
in several. `PoolThresholds` is the one definition of the thresholds; the predicates are plain polars
expressions so a scan can push them down into the Parquet reader. A null in a column a condition reads (no
correctness, no reasoning switch) keeps the row out of that pool.

A pool is written by polars' streaming engine (`stage_pools`: every pool a run builds, in one pass): the shards are
read a row group at a time (a normalized shard's row groups hold one read batch, a few MB), the predicate is pushed
into the reader, and each sink writes row groups of about `ROW_GROUP_BYTES`, so memory stays bounded whatever the
number of rows (about that many bytes per pool written at once: 764 MB peak for 13 pools of 600,000 rows). The sink
counts row groups in rows, not bytes (polars' default is tens of thousands of rows, hundreds of MB of
conversations), so `row_group_rows` turns the byte target into rows from the pool's mean row length.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from nemotron_assets.core.records import stored_path
from nemotron_assets.core.sections import POOL_NAMES
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.dedup import deduplicated_rows
from nemotron_assets.defs.harmony.layout import PoolPartKey, pool_dir, pool_manifest_path, pool_part_number, pool_path
from nemotron_assets.defs.harmony.shard import HarmonyDataset

#: Target bytes of one row group of a pool file (in memory while the sink fills it).
ROW_GROUP_BYTES = 32 << 20
#: A row stores its conversation about twice (``text`` and ``messages``, each ~``stats_char_len``) plus its tool
#: declarations and metadata, estimated as this many bytes.
ROW_OVERHEAD_BYTES = 1024


@dataclass(frozen=True)
class PoolThresholds:
    high_correctness: float = 0.875  # correctness >= this is "high"
    low_correctness: float = 0.25  # correctness <= this is "low"
    long_context_tokens: int = 8192  # approx. tokens (chars / 4) >= this is "long context"
    include_placeholder_prompts: bool = False  # True: rows answering a placeholder prompt may enter the pools


def base_filter(thresholds: PoolThresholds = PoolThresholds()) -> pl.Expr:
    """What every pool requires (see the module docstring)."""
    base = (pl.col("quality_valid_harmony") & pl.col("quality_completion_nonempty")
            & pl.col("quality_valid_tool_schema") & ~pl.col("quality_is_duplicate"))
    return base if thresholds.include_placeholder_prompts else base & ~pl.col("quality_placeholder_prompt")


def pool_predicate(name: str, thresholds: PoolThresholds = PoolThresholds()) -> pl.Expr:
    """The full filter of pool ``name``: the base filter and the pool's own condition."""
    c = pl.col("meta_correctness")
    conditions = {
        "high_correctness": c >= thresholds.high_correctness,
        "mid_correctness": (c > thresholds.low_correctness) & (c < thresholds.high_correctness),
        "low_correctness": c <= thresholds.low_correctness,
        "has_correctness_meta": c.is_not_null(),
        "missing_correctness_meta": c.is_null(),
        "math_high_verified_correct": (pl.col("meta_domain") == "math") & (c >= thresholds.high_correctness)
        & (pl.col("meta_correct_count").fill_null(0) >= 1),
        "tool_use": pl.col("quality_has_tool"),
        "proof": pl.col("meta_domain") == "math_proof",
        "reasoning_on": pl.col("source_reasoning") == "on",
        "reasoning_off": pl.col("source_reasoning") == "off",
        "capability_chat": pl.col("source_capability_target") == "chat",
        "capability_structured_outputs": pl.col("source_capability_target") == "structured_outputs",
        "long_context": pl.col("stats_approx_tokens") >= thresholds.long_context_tokens,
    }
    if name not in conditions:
        raise KeyError(f"unknown pool {name!r} (pools: {', '.join(POOL_NAMES)})")
    return base_filter(thresholds) & conditions[name].fill_null(False)


def blend_rows(store: Storage, datasets: dict[str, HarmonyDataset], base: str) -> pl.LazyFrame:
    """Every family dataset's normalized rows, duplicates removed, as one lazy frame in blend order."""
    return pl.concat([deduplicated_rows(store, dataset, base) for dataset in datasets.values()], how="vertical")


def row_group_rows(selected: pl.LazyFrame) -> int:
    """Rows per Parquet row group so that a group holds about `ROW_GROUP_BYTES` of the ``selected`` rows (a
    streaming scan of one small column)."""
    mean_chars = selected.select(pl.col("stats_char_len").mean()).collect(engine="streaming").item() or 0
    return max(1, ROW_GROUP_BYTES // (2 * int(mean_chars) + ROW_OVERHEAD_BYTES))


def stage_pools(rows: pl.LazyFrame, folders: dict[str, Path], thresholds: PoolThresholds) -> dict[str, dict]:
    """Stream the rows of every pool of ``folders`` (pool -> its staging folder) into ``<folder>/part-00000.parquet``
    and its ``manifest.json`` (rows per dataset and the thresholds, which the pool check re-reads); returns each
    pool's manifest. Polars runs the sinks together, reading the rows once for all of them (13 pools of 600,000
    rows: 10 s, against 16 s one after the other), and each file is the same bytes as when written alone."""
    sinks = []
    for pool, folder in folders.items():
        selected = rows.filter(pool_predicate(pool, thresholds))
        sinks.append(selected.sink_parquet(folder / "part-00000.parquet", compression="zstd",
                                           row_group_size=row_group_rows(selected), lazy=True))
    pl.collect_all(sinks, engine="streaming")
    manifests = {}
    for pool, folder in folders.items():
        counts = (pl.scan_parquet(folder / "part-00000.parquet").group_by("dataset").agg(pl.len().alias("rows"))
                  .sort("dataset").collect())
        manifests[pool] = {"pool": pool, "thresholds": asdict(thresholds),
                           "rows_by_dataset": dict(zip(counts["dataset"], counts["rows"])),
                           "rows": int(counts["rows"].sum())}
        (folder / "manifest.json").write_bytes(json.dumps(manifests[pool], indent=1, sort_keys=True).encode())
    return manifests


def pool_part_numbers(store: Storage, base: str, pool: str) -> list[int]:
    """The part numbers of a pool's Parquet files (``part-NNNNN.parquet``), in order. `write_pool` writes part 0;
    everything that reads a pool reads every part it finds, so a pool written in several parts is read whole."""
    numbers = (pool_part_number(name.rsplit("/", 1)[-1]) for name in store.list(pool_dir(base, pool)))
    return sorted(n for n in numbers if n is not None)


def rows_outside_predicate(store: Storage, base: str, pool: str) -> int:
    """Rows of a committed pool that its own predicate (with the thresholds it was built with) rejects."""
    manifest = json.loads(store.read_bytes(stored_path(store, pool_manifest_path(base, pool))))
    predicate = pool_predicate(pool, PoolThresholds(**manifest["thresholds"]))
    return (pl.scan_parquet(store.url(pool_path(base, pool)), storage_options=store.polars_options())
            .filter(~predicate).select(pl.len()).collect().item())


def register_pool_parts(instance, store: Storage, scored: tuple[str, ...], scope, sample: str | None,
                        pool: str) -> list[str]:
    """The parts of a committed pool that ``scoring:`` scores, added to the dynamic partitions of the scoring
    pipeline's ``nll_scores`` (``<blend>__scored_pool_parts``: ``<pool>/part-NNNNN``); returns the keys.

    Here, at the pool's commit, so a pool built in the UI shows its parts to score at once."""
    if pool not in scored:
        return []
    keys = [scope.qualify(sample, str(PoolPartKey(pool, part))) for part in pool_part_numbers(store, scope.base(sample),
                                                                                              pool)]
    name = scope.dynamic_name("scored_pool_parts")
    new = [key for key in keys if not instance.has_dynamic_partition(name, key)]
    if new:
        instance.add_dynamic_partitions(name, new)
    return keys
