"""The scoring pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.pipeline import Pipeline, Step, Target
from nemotron_assets.defs.scoring.assets import build_scoring_assets
from nemotron_assets.defs.scoring.inputs import Scoring, embedding_partitions
from nemotron_assets.defs.scoring.parts import nll_partitions
from nemotron_assets.defs.scoring.status import scoring_problems, scoring_status


def scored_parts(target: Target) -> list[str]:
    """The parts of every scored pool found on storage (registered as they are listed: a pool built before the blend
    had ``scoring:`` was never registered by ``candidate_pool``)."""
    keys = nll_partitions(target.instance, target.store, Scoring.of(target.blend), target.scope, target.sample)
    return [target.scope.split(key)[1] for key in keys]


PIPELINE = Pipeline(
    name="scoring",
    applies=lambda blend: blend.scoring is not None and bool(blend.datasets_of("harmony")),
    steps=(Step("nll_scores", keys=scored_parts, by_dataset=False),
           Step("embeddings", keys=lambda target: embedding_partitions(target.blend.scoring), by_dataset=False),
           Step("selected_pool", keys=lambda target: target.blend.scoring.selections(), by_dataset=False),
           Step("near_duplicate_report", by_dataset=False)),
    assets=build_scoring_assets,
    rebuilt_when_inputs_change=("nll_scores", "embeddings", "selected_pool", "near_duplicate_report"),
    status=scoring_status,
    problems=scoring_problems,
)
