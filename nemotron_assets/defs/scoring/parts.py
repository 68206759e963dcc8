"""The ``nll_scores`` partitions: one per Parquet part of a scored pool, ``<pool>/part-NNNNN``, in the dynamic
partitions ``<blend>__scored_pool_parts``. ``candidate_pool`` registers a scored pool's parts when it commits it
(defs/harmony/pools.py ``register_pool_parts``); today a pool writes one part, but the key space follows the files,
so a pool written in several parts gets a partition per part.
"""

import dagster as dg

from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.records import NotReady
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import pool_dir
from nemotron_assets.defs.harmony.pools import pool_part_numbers, register_pool_parts
from nemotron_assets.defs.scoring.inputs import Scoring

PARTS = "scored_pool_parts"  # <blend>__scored_pool_parts, and for the samples <blend>__samples__scored_pool_parts


def nll_partitions(instance: dg.DagsterInstance, store: Storage, scoring: Scoring, scope: Scope,
                   sample: str | None) -> list[str]:
    """The ``nll_scores`` partitions to run: every part of every scored pool under the scope's base, registered here
    too (a pool built before the blend had ``scoring:`` was never registered by ``candidate_pool``). A scored pool
    without any part is ``NotReady``, naming what to materialize: scoring nothing and calling it done would hide
    that the pools were never built (e.g. a fresh root, or a sample whose pools are not built yet)."""
    base = scope.base(sample)
    pools = tuple(scoring.settings.pools)
    missing = [pool for pool in pools if not pool_part_numbers(store, base, pool)]
    if missing:
        where = f" of sample {sample!r}" if sample else ""
        raise NotReady(f"the scored pool(s) {', '.join(missing)}{where} are not built (no part under "
                       f"{store.url(pool_dir(base, missing[0]))}): materialize {scoring.blend}/candidate_pool "
                       f"partition(s) {', '.join(repr(p) for p in missing)}{where} first")
    return [key for pool in pools for key in register_pool_parts(instance, store, pools, scope, sample, pool)]
