"""Materialize the scoring outputs of one blend (full build or sample), or find them up to date:

    nll_scores             <base>/scores/nll/<pool>/part-NNNNN.parquet          (+ .receipts/part-NNNNN.json)
    embeddings             <base>/scores/embedding/<view>/<pool>/part-00000.parquet  (+ receipt)
    selected_pool          <base>/pools/<pool>_easy|_hard|_diverse/part-00000.parquet (+ receipt, .meta/manifest.json)
    near_duplicate_report  <base>/scores/near_duplicates.parquet + .md          (+ .receipts/near_duplicates.json)

Each step follows the platform's protocol: the receipt ``inputs`` (scoring/inputs.py) are compared with the current
ones by core/records.py ``freshness``; an up-to-date output is skipped (so a re-run scores only missing or stale parts);
otherwise the old receipt is deleted, the files are staged and committed, and the receipt is written last. Upstream
outputs that are not up to date are refused with ``NotReady`` naming what to materialize.

torch is imported only when a model is loaded (`Models`), and every step first checks the ``scoring`` extra
(`require_scoring_extra`), so a blend with ``scoring:`` fails with the install command when it is missing.
A selection is written in the candidate pool's own layout (its columns, a subset of its rows, in its order), with a
receipt per part and a ``.meta/manifest.json``, so ``sft.from`` reads it as it reads a pool (sft/inputs.py).
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.core.sections import DIVERSE, ScoringSettings, split_selection
from nemotron_assets.core.step import Outcome, Output, Staged, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import POOL_MANIFEST_FILE, PoolPartKey, embedding_view_path, pool_part_path
from nemotron_assets.defs.scoring.extra import require_scoring_extra
from nemotron_assets.defs.scoring.inputs import (
    DIVERSE_VIEW,
    Scoring,
    current_pool_part,
    current_view,
    embedding_inputs,
    embedding_partitions,
    embedding_prefix,
    near_duplicate_inputs,
    nll_inputs,
    nll_prefix,
    pool_part_numbers,
    prefix_of,
    selection_inputs,
    split_view_key,
)
from nemotron_assets.defs.scoring.layout import embedding_scores_path, near_duplicates_path, nll_scores_path
from nemotron_assets.defs.scoring.model_files import ModelFiles, locate_model

NLL_KIND, EMBEDDING_KIND, SELECTION_KIND, NEAR_DUPLICATES_KIND = ("nll_scores", "embeddings", "selected_pool",
                                                                  "near_duplicate_report")
#: Upper edges of the NLL histogram's buckets (nats per token); the last bucket is everything above.
NLL_BUCKETS = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 12)


class Models:
    """The models of one run, found and loaded once, on first use (a run scores many parts with one model)."""

    def __init__(self, settings: ScoringSettings, log: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.log = log
        self._cache: dict[str, Any] = {}

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    @property
    def llm_files(self) -> ModelFiles:
        return self._once("llm_files", lambda: locate_model(self.settings.model, self.settings.revision))

    @property
    def embedder_files(self) -> ModelFiles:
        return self._once("embedder_files", lambda: locate_model(self.settings.embedding_model,
                                                                 field="scoring.embedding_model"))

    @property
    def device(self):
        def choose():
            from nemotron_assets.defs.scoring.device import choose_device

            choice = choose_device(self.settings.device, dtype=self.settings.dtype)
            self.log(f"scoring on {choice.describe()}")
            return choice

        return self._once("device", choose)

    @property
    def scorer(self):
        def load():
            from nemotron_assets.defs.scoring.nll import NllScorer

            return NllScorer.load(self.llm_files, self.device, self.settings.batch_tokens)

        return self._once("scorer", load)

    @property
    def renderer(self):
        def load():
            from nemotron_assets.defs.scoring.rendering import ModelRenderer

            return ModelRenderer(self.llm_files)

        return self._once("renderer", load)

    @property
    def embedder(self):
        def load():
            from nemotron_assets.defs.scoring.embeddings import SentenceEmbedder

            return SentenceEmbedder.load(self.embedder_files, self.device)

        return self._once("embedder", load)


def _run(store: Storage, prefix: str, key: str, kind: str, inputs: dict, force: bool,
         build: Callable[[Path], Staged]) -> Outcome:
    return build_output(store, Output(prefix, inputs, kind, key), build, force)


# --- NLL ----------------------------------------------------------------------------------------------------------
def materialize_nll_part(store: Storage, scoring: Scoring, base: str, key: PoolPartKey, models: Models,
                         force: bool = False) -> Outcome:
    """Score one pool part (nll_parts.py ``score_pool_part``), or find its scores up to date."""
    require_scoring_extra()
    from nemotron_assets.defs.scoring.nll_parts import score_pool_part

    settings = scoring.settings
    pool_part = current_pool_part(store, scoring, base, key)
    inputs = nll_inputs(settings, pool_part, models.llm_files, models.device.device, models.device.dtype)
    source = pool_part_path(base, key.pool, key.part)

    def build(folder: Path) -> Staged:
        staged = folder / "scores.parquet"
        with store.open(source) as stream:
            stats = score_pool_part(stream, staged, models.renderer, models.scorer, models.llm_files,
                                    settings.max_tokens, name=store.url(source))
        histogram = nll_histogram(pq.read_table(staged, columns=["nll_mean"]).column("nll_mean"))
        return Staged({".parquet": staged}, {**stats.as_dict(), "nll_histogram": histogram,
                                             **models.device.as_metadata()})

    return _run(store, nll_prefix(base, key), str(key), NLL_KIND, inputs, force, build)


def nll_histogram(nll_mean: pa.ChunkedArray) -> dict[str, int]:
    """Rows per ``nll_mean`` bucket (labels ``<0.5``, ``0.5–1``, ..., ``>=12``; unscored rows under ``none``)."""
    values = nll_mean.to_numpy(zero_copy_only=False).astype(np.float64)
    scored = values[~np.isnan(values)]
    edges = [0.0, *NLL_BUCKETS]
    labels = [f"{low:g}–{high:g}" for low, high in zip(edges, edges[1:])] + [f">={NLL_BUCKETS[-1]:g}"]
    counts = np.bincount(np.searchsorted(NLL_BUCKETS, scored, side="right"), minlength=len(labels))
    histogram = {label: int(count) for label, count in zip(labels, counts)}
    histogram["none"] = int(len(values) - len(scored))
    return histogram


# --- embeddings ---------------------------------------------------------------------------------------------------
def materialize_embeddings(store: Storage, scoring: Scoring, base: str, key: str, models: Models,
                           force: bool = False) -> Outcome:
    """Embed one view of one scored pool (embedding_parts.py ``embed_view_part``), or find it up to date."""
    require_scoring_extra()
    from nemotron_assets.defs.scoring.embedding_parts import embed_view_part

    view, pool = split_view_key(key)
    inputs = embedding_inputs(current_view(store, scoring, base, view, pool), models.embedder_files,
                              models.device.device, models.device.dtype)
    source = embedding_view_path(base, view, pool)

    def build(folder: Path) -> Staged:
        staged = folder / "embeddings.parquet"
        with store.open(source) as stream:
            stats = embed_view_part(stream, staged, models.embedder, models.embedder_files, name=store.url(source))
        return Staged({".parquet": staged}, {**stats.as_dict(), **models.device.as_metadata()})

    return _run(store, embedding_prefix(base, view, pool), key, EMBEDDING_KIND, inputs, force, build)


# --- selections ---------------------------------------------------------------------------------------------------
def materialize_selection(store: Storage, scoring: Scoring, base: str, name: str, models: Models,
                          force: bool = False) -> Outcome:
    """``<pool>_easy``/``_hard`` (NLL quantiles) or ``<pool>_diverse`` (greedy k-center on the prompt
    embeddings), written as a pool (see the module docstring). Loads no model."""
    require_scoring_extra()
    from nemotron_assets.defs.scoring.selection import greedy_k_center, select_by_nll, write_selected_rows

    settings = scoring.settings
    pool, kind = split_selection(name)
    if pool not in settings.pools or name not in settings.selections():
        raise ValueError(f"{name!r} is not a selection of this blend (selections: {', '.join(settings.selections())})")
    diverse = kind == DIVERSE
    inputs = selection_inputs(store, scoring, base, name, None if diverse else models.llm_files,
                              models.embedder_files if diverse else None)
    parts = [pool_part_path(base, pool, part) for part in pool_part_numbers(store, base, pool)]
    out = pool_part_path(base, name, 0)

    def build(folder: Path) -> Staged:
        if diverse:
            ids, vectors = _read_embeddings(store, embedding_scores_path(base, DIVERSE_VIEW, pool))
            chosen = [ids[i] for i in greedy_k_center(vectors, settings.diverse_k)] if ids else []
            details = {"view": DIVERSE_VIEW, "k": settings.diverse_k, "candidates": len(ids)}
        else:
            ids, means = _read_nll(store, [nll_scores_path(base, PoolPartKey(pool, p))
                                           for p in pool_part_numbers(store, base, pool)])
            picked = select_by_nll(means, settings.select_quantile)
            chosen = [ids[i] for i in (picked.easy if kind == "easy" else picked.hard)]
            details = {"quantile": settings.select_quantile, "candidates": len(ids), "unscored": picked.unscored,
                       "nll_mean_range": _range(means, picked.easy if kind == "easy" else picked.hard)}
        staged = folder / "part-00000.parquet"
        rows = write_selected_rows([store.url(p) for p in parts], chosen, staged, store.polars_options())
        manifest = {"pool": name, "selected_from": pool, "selection": kind, "rows": rows, **details}
        manifest_file = folder / "manifest.json"
        manifest_file.write_bytes(json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n")
        return Staged({".parquet": staged, POOL_MANIFEST_FILE: manifest_file}, manifest)

    return _run(store, prefix_of(out), name, SELECTION_KIND, inputs, force, build)


def _range(means: np.ndarray, rows: np.ndarray) -> list[float] | None:
    if len(rows) == 0:
        return None
    picked = means[rows]
    return [float(picked.min()), float(picked.max())]


def _read_nll(store: Storage, paths: list[str]) -> tuple[list[str], np.ndarray]:
    ids: list[str] = []
    means: list[np.ndarray] = []
    for path in paths:
        with store.open(path) as stream:
            table = pq.read_table(stream, columns=["id", "nll_mean"])
        ids.extend(table.column("id").to_pylist())
        means.append(table.column("nll_mean").to_numpy(zero_copy_only=False).astype(np.float64))
    return ids, np.concatenate(means) if means else np.zeros(0)


def _read_embeddings(store: Storage, path: str) -> tuple[list[str], np.ndarray]:
    with store.open(path) as stream:
        table = pq.read_table(stream, columns=["id", "embedding"])
    column = table.column("embedding").combine_chunks()
    vectors = column.flatten().to_numpy().reshape(-1, column.type.list_size) if len(column) else np.zeros((0, 1))
    return table.column("id").to_pylist(), vectors


# --- near-duplicates ----------------------------------------------------------------------------------------------
REPORT_COLUMNS = [("view", pa.string()), ("pool", pa.string())]


def materialize_near_duplicates(store: Storage, scoring: Scoring, base: str, models: Models,
                                force: bool = False) -> tuple[Outcome, str]:
    """Pairs at or above ``scoring.near_dup_threshold`` within each view of each scored pool (near_duplicates.py:
    blocked matrix products, never the n x n matrix): one Parquet (``view``, ``pool``, then the pair's columns) and a
    Markdown summary. Returns (outcome, the summary)."""
    require_scoring_extra()
    from nemotron_assets.defs.scoring.near_duplicates import REPORT_SCHEMA, write_near_duplicate_report

    settings = scoring.settings
    inputs = near_duplicate_inputs(store, scoring, base, models.embedder_files)
    parquet = near_duplicates_path(base)
    markdown = prefix_of(parquet) + ".md"
    schema = pa.schema([*REPORT_COLUMNS, *REPORT_SCHEMA])
    summary: list[str] = []

    def build(folder: Path) -> Staged:
        staged = folder / "near_duplicates.parquet"
        per_view: dict[str, dict] = {}
        with pq.ParquetWriter(staged, schema, compression="zstd") as writer:
            for key in embedding_partitions(settings):
                view, pool = split_view_key(key)
                ids, vectors = _read_embeddings(store, embedding_scores_path(base, view, pool))
                pairs_file = folder / "pairs.parquet"
                stats = write_near_duplicate_report(ids, vectors, settings.near_dup_threshold, pairs_file)
                pairs = pq.read_table(pairs_file)
                labels = {"view": pa.array([view] * len(pairs), pa.string()),
                          "pool": pa.array([pool] * len(pairs), pa.string())}
                writer.write_table(pa.table({**labels, **{n: pairs.column(n) for n in REPORT_SCHEMA.names}},
                                            schema=schema))
                per_view[key] = {"rows": stats.rows, "pairs": stats.pairs, "rows_in_pairs": stats.rows_in_pairs}
        text = report_markdown(settings.near_dup_threshold, per_view)
        (folder / "near_duplicates.md").write_text(text, encoding="utf-8")
        summary.append(text)
        return Staged({".parquet": staged, ".md": folder / "near_duplicates.md"},
                      {"rows": sum(v["pairs"] for v in per_view.values()), "threshold": settings.near_dup_threshold,
                       "by_view": per_view})

    outcome = _run(store, prefix_of(parquet), "near_duplicate_report", NEAR_DUPLICATES_KIND, inputs, force, build)
    return outcome, summary[0] if summary else store.read_bytes(markdown).decode()


def report_markdown(threshold: float, per_view: dict[str, dict]) -> str:
    lines = [f"**Near-duplicate pairs** (cosine >= {threshold:g}, within each view of each scored pool)", "",
             "| view/pool | rows | pairs | rows in a pair |", "|:---|---:|---:|---:|"]
    lines += [f"| {key} | {v['rows']:,} | {v['pairs']:,} | {v['rows_in_pairs']:,} |" for key, v in per_view.items()]
    return "\n".join(lines) + "\n"
