"""What ``status`` and ``verify`` see of the scoring outputs, by the one definition (records.py ``freshness``).

Every scoring output of a blend with ``scoring:`` under ``base``: the NLL part of each part of each scored pool, the
embeddings of each view of each scored pool, each selection, and the near-duplicate report. An output whose inputs
cannot be known yet (an upstream output missing or stale, or the model folder gone) is stale if it was built, else
missing, as posttrain/downstream.py ``downstream_states`` does. No torch: inputs are judged as scoring/inputs.py says.

`scored_ids_problem` reads an NLL part back against its pool part (the asset check and ``verify``, scoring/verify.py).
"""

import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import (
    PoolPartKey,
    near_duplicates_path,
    nll_scores_path,
    pool_part_path,
)
from nemotron_assets.core.records import NotReady, freshness_when_ready, read_receipt
from nemotron_assets.core.scoring_settings import DIVERSE, split_selection
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.downstream import OutputState
from nemotron_assets.defs.scoring.inputs import (
    embedding_partitions,
    embedding_prefix,
    expected_embedding_inputs,
    expected_nll_inputs,
    near_duplicate_inputs,
    nll_prefix,
    pool_part_numbers,
    prefix_of,
    selection_inputs,
    split_view_key,
)
from nemotron_assets.defs.scoring.model_files import locate_model
from nemotron_assets.sources.errors import InputError


def scoring_states(store: Storage, blend: Blend, base: str, read_content: bool = False) -> list[OutputState]:
    """The state of every scoring output under ``base`` (none for a blend without ``scoring:``)."""
    if blend.scoring is None:
        return []
    settings = blend.scoring
    states: list[OutputState] = []
    models: dict = {}

    def model(which: str):
        if which not in models:
            models[which] = (locate_model(settings.model, settings.revision) if which == "llm" else
                             locate_model(settings.embedding_model, field="scoring.embedding_model"))
        return models[which]

    def add(asset: str, key: str, prefix: str, inputs_of) -> None:
        states.append(OutputState(asset, key, prefix, freshness_when_ready(
            store, prefix, inputs_of, read_content=read_content, not_ready=(NotReady, InputError))))

    for pool in settings.pools:
        for part in pool_part_numbers(store, base, pool) or [0]:
            key = PoolPartKey(pool, part)
            add("nll_scores", str(key), nll_prefix(base, key),
                lambda key=key: expected_nll_inputs(store, blend, base, key, model("llm")))
    for key in embedding_partitions(settings):
        view, pool = split_view_key(key)
        add("embeddings", key, embedding_prefix(base, view, pool),
            lambda view=view, pool=pool: expected_embedding_inputs(store, blend, base, view, pool, model("embedder")))
    for name in settings.selections():
        diverse = split_selection(name)[1] == DIVERSE
        add("selected_pool", name, prefix_of(pool_part_path(base, name, 0)),
            lambda name=name, diverse=diverse: selection_inputs(
                store, blend, base, name, None if diverse else model("llm"), model("embedder") if diverse else None))
    add("near_duplicate_report", "", prefix_of(near_duplicates_path(base)),
        lambda: near_duplicate_inputs(store, blend, base, model("embedder")))
    return states


def scored_ids_problem(store: Storage, base: str, key: PoolPartKey) -> str | None:
    """Why the scores of a pool part do not cover exactly its rows (less the counted drops), or None."""
    receipt = read_receipt(store, nll_prefix(base, key))
    if receipt is None:
        return f"{store.url(nll_prefix(base, key) + '.json')} is not readable"
    with store.open(pool_part_path(base, key.pool, key.part)) as stream:
        pool_ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
    with store.open(nll_scores_path(base, key)) as stream:
        scored = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
    dropped = sum(receipt.stats["dropped"].values())
    if len(scored) + dropped != len(pool_ids):
        return f"{len(scored):,} scored + {dropped:,} dropped row(s), but the pool part has {len(pool_ids):,}"
    remaining = iter(pool_ids)
    if not all(any(row_id == pool_id for pool_id in remaining) for row_id in scored):
        return "the scored ids are not the pool part's ids in its order"
    return None
