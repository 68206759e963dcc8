"""The ``nll_scores`` partitions: one per Parquet part of a scored pool, ``<pool>/part-NNNNN``, registered by
``candidate_pool`` when it commits a pool that ``scoring.pools`` lists (today a pool writes one part, but the key space
follows the files, so a pool written in several parts gets a partition per part).

Its own module, free of torch and of the scoring steps, because the Harmony assets call it on every pool commit.
"""

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import PoolPartKey, pool_dir
from nemotron_assets.core.partitions import Scope, sample_partitions_name, scored_pool_parts_name
from nemotron_assets.core.records import NotReady
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.scoring.inputs import pool_part_numbers

SAMPLE_PARTS = "scored_pool_parts"  # the sample twins' dynamic partitions: <blend>__samples__scored_pool_parts


def pool_parts_partitions_name(scope: Scope) -> str:
    return sample_partitions_name(scope.blend, SAMPLE_PARTS) if scope.samples else scored_pool_parts_name(scope.blend)


def register_pool_parts(instance: dg.DagsterInstance, store: Storage, blend: Blend, scope: Scope,
                        sample: str | None, pool: str) -> list[str]:
    """Add a committed pool's parts to the ``nll_scores`` partitions if the blend scores it; returns the keys."""
    if blend.scoring is None or pool not in blend.scoring.pools:
        return []
    keys = [scope.qualify(sample, str(PoolPartKey(pool, part)))
            for part in pool_part_numbers(store, scope.base(sample), pool)]
    name = pool_parts_partitions_name(scope)
    new = [key for key in keys if not instance.has_dynamic_partition(name, key)]
    if new:
        instance.add_dynamic_partitions(name, new)
    return keys


def nll_partitions(instance: dg.DagsterInstance, store: Storage, blend: Blend, scope: Scope,
                   sample: str | None) -> list[str]:
    """The ``nll_scores`` partitions to run: every part of every scored pool under the scope's base, registered here
    too (a pool built before the blend had ``scoring:`` was never registered by ``candidate_pool``). A scored pool
    without any part is ``NotReady``, naming what to materialize: scoring nothing and calling it done would hide
    that the pools were never built (e.g. a fresh root, or a sample whose pools are not built yet)."""
    base = scope.base(sample)
    missing = [pool for pool in blend.scoring.pools if not pool_part_numbers(store, base, pool)]
    if missing:
        where = f" of sample {sample!r}" if sample else ""
        raise NotReady(f"the scored pool(s) {', '.join(missing)}{where} are not built (no part under "
                       f"{store.url(pool_dir(base, missing[0]))}): materialize {blend.name}/candidate_pool "
                       f"partition(s) {', '.join(repr(p) for p in missing)}{where} first")
    return [key for pool in blend.scoring.pools for key in register_pool_parts(instance, store, blend, scope, sample,
                                                                               pool)]
