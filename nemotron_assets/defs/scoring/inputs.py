"""What each scoring output is built from: the receipt ``inputs`` of NLL parts, embedding parts, selections and the
near-duplicate report, and the upstream outputs they require to be up to date.

Nothing here imports torch: ``status`` and ``verify`` judge scores through these functions without the ``scoring``
extra, and the selection and report steps never load a model.

**Inputs.** An NLL part's bytes are decided by the pool part (the sha256 its receipt records), the model (hub id and
revision: a commit sha, or a digest of the folder's files, `model_files.ModelFiles`), ``max_tokens`` and this code's
format version. ``batch_tokens`` is left out on purpose: on CPU in fp32 the scores do not depend on how rows are
batched (nll.py: right padding without a mask, per-row sums in float64; tested in the scoring tests), so a new batch
size must not make every score stale. In bf16 (on CUDA, or on CPU with ``scoring.dtype: bf16``) they do depend on
it, so there the device and precision are recorded (``device: {device, dtype}``, `precision_inputs`; absent for CPU
in fp32), and a part scored on a GPU or in bf16 is stale on a CPU-only machine in fp32, and the reverse.

**The device a judge assumes.** Choosing the device needs torch (`device.choose_device`). ``status``, ``verify`` and
the steps after the scores do not load torch: they judge a part with ``device: cuda`` when the setting is ``cuda``,
with CPU when it is ``cpu``, and, for ``auto``, with the device the part's receipt recorded (like the pool thresholds,
downstream.py ``downstream_states``); the precision is then what ``scoring.dtype`` means on that device
(`device.resolved_dtype`). Only the NLL step itself compares against the device it runs on now.
"""

from dataclasses import dataclass

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.records import NotReady, Receipt, read_receipt
from nemotron_assets.core.sections import DIVERSE, ScoringSettings, split_selection
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.downstream import Curation, current_receipt, pool_inputs, view_inputs
from nemotron_assets.defs.harmony.layout import PoolPartKey, embedding_view_path, pool_dir, pool_part_path
from nemotron_assets.defs.harmony.pools import PoolThresholds, pool_part_numbers
from nemotron_assets.defs.harmony.views import VIEWS
from nemotron_assets.defs.scoring.device import resolved_dtype
from nemotron_assets.defs.scoring.layout import embedding_scores_path, nll_scores_path
from nemotron_assets.defs.scoring.model_files import ModelFiles

NLL_FORMAT = "nll-scores/1"
EMBEDDING_FORMAT = "embedding-scores/1"
SELECTION_FORMAT = "selected-pool/1"
NEAR_DUPLICATES_FORMAT = "near-duplicates/1"
#: The embedding view ``<pool>_diverse`` covers: the prompt says what a row is about.
DIVERSE_VIEW = "prompt"


def prefix_of(relative: str) -> str:
    return relative.rsplit(".", 1)[0]


@dataclass(frozen=True)
class Scoring:
    """What of the blend the scoring steps use: its ``scoring:`` section, and the candidate pools it scores (their
    inputs are the Harmony curation's)."""

    blend: str
    settings: ScoringSettings
    curation: Curation

    @classmethod
    def of(cls, blend: Blend) -> "Scoring":
        if blend.scoring is None:
            raise ValueError(f"blend {blend.name} has no scoring: section")
        return cls(blend.name, blend.scoring, Curation.of(blend))


# --- the pools' parts -------------------------------------------------------------------------------------------
def scored_pool_parts(store: Storage, scoring: Scoring, base: str) -> list[PoolPartKey]:
    """Every part of every scored pool that exists under ``base``, in ``scoring.pools`` then part order."""
    return [PoolPartKey(pool, part) for pool in scoring.settings.pools
            for part in pool_part_numbers(store, base, pool)]


def current_pool_part(store: Storage, scoring: Scoring, base: str, key: PoolPartKey) -> Receipt:
    """The receipt of a pool part, which must be up to date (judged with the thresholds it was built with)."""
    def inputs_of(built: Receipt) -> dict:  # judged with the thresholds it was built with
        return pool_inputs(store, scoring.curation, base, PoolThresholds(**built.inputs["thresholds"]))

    return current_receipt(store, prefix_of(pool_part_path(base, key.pool, key.part)), inputs_of,
                           f"pool part {key}", f"{scoring.blend}/candidate_pool partition {key.pool!r}")


# --- NLL parts ----------------------------------------------------------------------------------------------------
def precision_inputs(device: str, dtype: str) -> dict:
    """``{"device": {device, dtype}}`` unless CPU in fp32, the one batch-invariant precision (module docstring)."""
    return {} if (device, dtype) == ("cpu", "float32") else {"device": {"device": device, "dtype": dtype}}


def nll_inputs(settings: ScoringSettings, pool_part: Receipt, model: ModelFiles, device: str, dtype: str) -> dict:
    return {"format": NLL_FORMAT, "pool_part": pool_part.files[".parquet"]["sha256"],
            "model": {"id": model.model_id, "revision": model.revision}, "max_tokens": settings.max_tokens,
            **precision_inputs(device, dtype)}


def judged_device(settings: ScoringSettings, built: Receipt | None) -> tuple[str, str]:
    """The device and dtype an output is judged with when torch is not asked (see the module docstring)."""
    if settings.device in ("cpu", "cuda"):
        device = settings.device
    else:
        device = built.inputs.get("device", {}).get("device", "cpu") if built is not None else "cpu"
    return device, resolved_dtype(settings.dtype, device)


def nll_prefix(base: str, key: PoolPartKey) -> str:
    return prefix_of(nll_scores_path(base, key))


def expected_nll_inputs(store: Storage, scoring: Scoring, base: str, key: PoolPartKey, model: ModelFiles) -> dict:
    """The inputs an NLL part would be built from now, judged without torch."""
    settings = scoring.settings
    built = read_receipt(store, nll_prefix(base, key))
    return nll_inputs(settings, current_pool_part(store, scoring, base, key), model, *judged_device(settings, built))


def current_nll_parts(store: Storage, scoring: Scoring, base: str, pool: str, model: ModelFiles) -> dict[str, Receipt]:
    """``part-NNNNN`` -> receipt of every NLL part of ``pool``, all of which must be up to date (``NotReady``)."""
    parts = pool_part_numbers(store, base, pool)
    if not parts:
        raise NotReady(f"pool {pool!r} has no part under {store.url(pool_dir(base, pool))}: materialize "
                       f"{scoring.blend}/candidate_pool partition {pool!r} first")
    receipts = {}
    for part in parts:
        key = PoolPartKey(pool, part)
        receipts[f"part-{part:05d}"] = current_receipt(
            store, nll_prefix(base, key), lambda _, key=key: expected_nll_inputs(store, scoring, base, key, model),
            f"NLL scores of {key}", f"{scoring.blend}/nll_scores partition {str(key)!r}")
    return receipts


# --- embedding parts ----------------------------------------------------------------------------------------------
def embedding_partitions(settings: ScoringSettings) -> list[str]:
    """``<view>/<pool>`` for every view of every scored pool (the ``embeddings`` partitions)."""
    return [f"{view}/{pool}" for pool in settings.pools for view in VIEWS]


def split_view_key(key: str) -> tuple[str, str]:
    view, _, pool = key.partition("/")
    if view not in VIEWS or not pool:
        raise ValueError(f"not an embeddings partition key: {key!r} (expected <view>/<pool>, views: "
                         f"{', '.join(VIEWS)})")
    return view, pool


def current_view(store: Storage, scoring: Scoring, base: str, view: str, pool: str) -> Receipt:
    return current_receipt(store, prefix_of(embedding_view_path(base, view, pool)),
                    lambda _: view_inputs(store, scoring.curation, base, pool), f"the {view} view of {pool!r}",
                    f"{scoring.blend}/embedding_view partition {pool!r}")


def embedding_inputs(view_part: Receipt, model: ModelFiles, device: str, dtype: str) -> dict:
    return {"format": EMBEDDING_FORMAT, "view_part": view_part.files[".parquet"]["sha256"],
            "model": {"id": model.model_id, "revision": model.revision}, **precision_inputs(device, dtype)}


def embedding_prefix(base: str, view: str, pool: str) -> str:
    return prefix_of(embedding_scores_path(base, view, pool))


def expected_embedding_inputs(store: Storage, scoring: Scoring, base: str, view: str, pool: str,
                              model: ModelFiles) -> dict:
    settings = scoring.settings
    built = read_receipt(store, embedding_prefix(base, view, pool))
    return embedding_inputs(current_view(store, scoring, base, view, pool), model, *judged_device(settings, built))


def current_embeddings(store: Storage, scoring: Scoring, base: str, view: str, pool: str, model: ModelFiles) -> Receipt:
    return current_receipt(store, embedding_prefix(base, view, pool),
                    lambda _: expected_embedding_inputs(store, scoring, base, view, pool, model),
                    f"the {view} embeddings of {pool!r}", f"{scoring.blend}/embeddings partition '{view}/{pool}'")


# --- selections and the report ------------------------------------------------------------------------------------
def selection_inputs(store: Storage, scoring: Scoring, base: str, name: str, llm: ModelFiles | None,
                     embedder: ModelFiles | None) -> dict:
    """A selection is built from its pool's parts and their NLL scores (easy, hard) or their embeddings
    (diverse), and the quantile or k."""
    settings = scoring.settings
    pool, kind = split_selection(name)
    pool_parts = {f"part-{part:05d}": current_pool_part(store, scoring, base, PoolPartKey(pool, part))
                  .files[".parquet"]["sha256"] for part in pool_part_numbers(store, base, pool)}
    inputs = {"format": SELECTION_FORMAT, "pool": pool, "kind": kind, "pool_parts": pool_parts}
    if kind == DIVERSE:
        scores = current_embeddings(store, scoring, base, DIVERSE_VIEW, pool, embedder)
        return {**inputs, "view": DIVERSE_VIEW, "embeddings": scores.files[".parquet"]["sha256"],
                "k": settings.diverse_k}
    scores = current_nll_parts(store, scoring, base, pool, llm)
    return {**inputs, "scores": {part: r.files[".parquet"]["sha256"] for part, r in scores.items()},
            "quantile": settings.select_quantile}


def near_duplicate_inputs(store: Storage, scoring: Scoring, base: str, embedder: ModelFiles) -> dict:
    settings = scoring.settings
    versions = {}
    for key in embedding_partitions(settings):
        view, pool = split_view_key(key)
        versions[key] = current_embeddings(store, scoring, base, view, pool, embedder).files[".parquet"]["sha256"]
    return {"format": NEAR_DUPLICATES_FORMAT, "threshold": settings.near_dup_threshold, "embeddings": versions}
