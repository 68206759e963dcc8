"""What ``status`` and ``verify`` say of the scores of candidate pools (core/status.py says what the states mean),
by the one definition (core/records.py ``freshness``): the NLL part of each part of each scored pool, the embeddings
of each view of each scored pool, each selection, and the near-duplicate report. An output whose inputs cannot be
known yet (an upstream output missing or stale, or the model folder gone) is stale if it was built, else missing. No
torch: inputs are judged as inputs.py says.

**status**: the section "Scores". **verify**: every file hashed against its receipt, then read back: an NLL part's
ids must be the pool part's ids in order, less the rows its receipt counts as dropped (`scored_ids_problem`, also the
asset check), and an embedding part must hold one vector per row of its view.
"""


import dagster as dg
import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import base_dir
from nemotron_assets.core.pipeline import StatusRequest
from nemotron_assets.core.records import NotReady, freshness_when_ready, read_receipt, receipt_path
from nemotron_assets.core.sections import DIVERSE, split_selection
from nemotron_assets.core.status import RECORDED, OutputState, Plans, Problem, StatusSection, output_statuses
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import PoolPartKey, embedding_view_path, pool_part_path
from nemotron_assets.defs.scoring.inputs import (
    Scoring,
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
from nemotron_assets.defs.scoring.layout import near_duplicates_path, nll_scores_path
from nemotron_assets.defs.scoring.model_files import locate_model
from nemotron_assets.sources.errors import InputError


def scoring_states(store: Storage, scoring: Scoring, base: str, read_content: bool = False) -> list[OutputState]:
    """The state of every scoring output under ``base``."""
    settings = scoring.settings
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
                lambda key=key: expected_nll_inputs(store, scoring, base, key, model("llm")))
    for key in embedding_partitions(settings):
        view, pool = split_view_key(key)
        add("embeddings", key, embedding_prefix(base, view, pool),
            lambda view=view, pool=pool: expected_embedding_inputs(store, scoring, base, view, pool, model("embedder")))
    for name in settings.selections():
        diverse = split_selection(name)[1] == DIVERSE
        add("selected_pool", name, prefix_of(pool_part_path(base, name, 0)),
            lambda name=name, diverse=diverse: selection_inputs(
                store, scoring, base, name, None if diverse else model("llm"), model("embedder") if diverse else None))
    add("near_duplicate_report", "", prefix_of(near_duplicates_path(base)),
        lambda: near_duplicate_inputs(store, scoring, base, model("embedder")))
    return states


def scored_ids_problem(store: Storage, base: str, key: PoolPartKey) -> str | None:
    """Why the scores of a pool part do not cover exactly its rows (less the counted drops), or None."""
    receipt = read_receipt(store, nll_prefix(base, key))
    if receipt is None:
        return f"{store.url(receipt_path(nll_prefix(base, key)))} is not readable"
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

def scoring_status(request: StatusRequest) -> list[StatusSection]:
    if request.sample is not None:
        return []
    scoring = Scoring.of(request.blend)
    return [StatusSection("Scores", outputs=output_statuses(scoring_states(request.store, scoring,
                                                                           base_dir(request.blend.name))))]


def scoring_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, plans_of: Plans = RECORDED
                     ) -> list[Problem]:
    """Every problem of the full build's scoring outputs: each file hashed against its receipt, then read back."""
    scoring = Scoring.of(blend)
    problems = []
    for output in scoring_states(store, scoring, scoring.blend, read_content=True):
        url = store.url(output.prefix + ".parquet")
        state = output.freshness
        if not state.done:
            what = f"{scoring.blend}/{output.asset}" + (f" partition '{output.key}'" if output.key else "")
            problems.append(Problem(url, f"{state.state.value}: {state.reason}: re-materialize {what}"))
        elif output.asset == "nll_scores":
            problem = scored_ids_problem(store, scoring.blend, PoolPartKey.parse(output.key))
            problems += [Problem(url, problem)] if problem else []
        elif output.asset == "embeddings":
            view, pool = split_view_key(output.key)
            rows, expected = _rows(store, output.prefix + ".parquet"), _rows(store, embedding_view_path(scoring.blend,
                                                                                                      view, pool))
            if rows != expected:
                problems.append(Problem(url, f"holds {rows:,} vectors, its view has {expected:,} rows"))
    return problems


def _rows(store: Storage, relative: str) -> int:
    with store.open(relative) as stream:
        return pq.ParquetFile(stream).metadata.num_rows
