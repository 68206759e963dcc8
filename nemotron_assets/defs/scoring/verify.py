"""``verify`` of the scoring outputs: every file hashed against its receipt (scoring/states.py, records.py
``freshness`` with ``read_content``), then read back: an NLL part's ids must be the pool part's ids in order, less the
rows its receipt counts as dropped, and an embedding part must hold one vector per row of its view."""

import pyarrow.parquet as pq

from nemotron_assets.cli.status_report import Problem
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import PoolPartKey, embedding_view_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.scoring.inputs import split_view_key
from nemotron_assets.defs.scoring.states import scored_ids_problem, scoring_states


def scoring_problems(store: Storage, blend: Blend) -> list[Problem]:
    """Every problem of the full build's scoring outputs: each file hashed against its receipt, then read back."""
    problems = []
    for output in scoring_states(store, blend, blend.name, read_content=True):
        url = store.url(output.prefix + ".parquet")
        state = output.freshness
        if not state.done:
            what = f"{blend.name}/{output.asset}" + (f" partition '{output.key}'" if output.key else "")
            problems.append(Problem(url, f"{state.state.value}: {state.reason}: re-materialize {what}"))
        elif output.asset == "nll_scores":
            problem = scored_ids_problem(store, blend.name, PoolPartKey.parse(output.key))
            problems += [Problem(url, problem)] if problem else []
        elif output.asset == "embeddings":
            view, pool = split_view_key(output.key)
            rows, expected = _rows(store, output.prefix + ".parquet"), _rows(store, embedding_view_path(blend.name,
                                                                                                      view, pool))
            if rows != expected:
                problems.append(Problem(url, f"holds {rows:,} vectors, its view has {expected:,} rows"))
    return problems


def _rows(store: Storage, relative: str) -> int:
    with store.open(relative) as stream:
        return pq.ParquetFile(stream).metadata.num_rows
