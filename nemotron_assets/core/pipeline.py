"""A pipeline: one path a blend's data takes, from its sources to what a trainer reads.

The pipelines are listed, in build order, in ``nemotron_assets.defs.registry.PIPELINES``: the sources'
manifests, pretraining shards, Harmony curation, scoring, JSONL and packed SFT. Everything the shared code knows of a
pipeline is the `Pipeline` object it registers, and the shared code only iterates over the registry:

- the code location (definitions.py) asks each pipeline that ``applies`` to a blend for its ``assets``, handing it
  the assets of the pipelines before it (its upstreams), then for its ``automation``;
- the command line runs the ``steps`` of each pipeline in order, asking each step which partitions to run;
- ``status`` and ``verify`` ask each pipeline for its ``status`` sections and its ``problems``.

Adding a pipeline is one folder under ``defs/`` and one line in the registry; no shared module changes.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.status import RECORDED, Plans, Problem, StatusSection
from nemotron_assets.core.storage import Storage

Assets = dict[str, dg.AssetsDefinition]  # asset name ("pretrain_shard") -> its definition, in one scope


@dataclass(frozen=True)
class BlendScope:
    """One blend's full build, or its sample twins (partitions.py ``Scope``), as a pipeline builds its assets."""

    blend: Blend
    blend_file: Path
    scope: Scope


@dataclass(frozen=True)
class Target:
    """What one command asks of a blend: where (instance, storage), the full build or a sample, maybe one dataset."""

    instance: dg.DagsterInstance
    store: Storage
    blend: Blend
    scope: Scope
    sample: str | None = None
    dataset: str | None = None
    blend_file: Path | None = None  # where relative source paths start; only what lists the sources needs it

    def registered(self, partitions_name: str) -> list[str]:
        """The full build's keys of this target's sample (or of the full build) among a dynamic partitions set."""
        keys = []
        for key in self.instance.get_dynamic_partitions(partitions_name):
            sample, full = self.scope.split(key)
            if sample == (self.sample if self.scope.samples else None):
                keys.append(full)
        return keys


class BuildStage(IntEnum):
    """The stages of a blend's build sensor (core/automation.py ``build_sensor``), in the order it requests them."""

    SOURCE_SPLITS = 1
    SHARDS = 2
    BLEND_FILES = 3


@dataclass(frozen=True)
class Step:
    """One asset of a pipeline, as the command line runs it.

    ``keys(target)``: the full build's partition keys to run (the command line puts a sample's name in front and
    keeps only one dataset's keys when asked), ``[]`` for nothing to run, ``None`` for an unpartitioned asset.
    ``ranges``: the keys are shards, run as contiguous ranges of at most ``SHARDS_PER_RUN`` (partitions.py).
    ``options``: the command-line options that reach this step's run config (``force``, ``build_processes``,
    ``tokenizer_backend``); only values a user gave are passed, so the command line launches the same runs as the
    documented ``dagster asset materialize`` commands. ``registered_by``: the asset whose run registers its keys,
    named when there are none. ``skips_rows``: its materializations count the bad rows ``on_error: skip`` left
    out (``dropped_by_reason``), which the command line sums up. ``build_stage``: when the blend's build sensor
    requests this step (core/automation.py), asking ``not_done(target)`` for the full build's keys that are missing,
    stale or failed (``[None]``: an unpartitioned asset that is not up to date). ``applies(blend)``: whether the
    blend builds this asset at all (a candidate pool only when the blend asks for one); the pipeline's ``assets``
    leave out the ones it does not. ``asked_by``: what in a blend asks for it, for the message that refuses it.
    ``built_by``: the one command that builds this asset (``export``), when ``materialize`` never does: it is
    left out of ``materialize``'s selection, refused by ``--select``, and no sensor or schedule requests it."""

    asset: str
    keys: Callable[[Target], list[str] | None] = lambda target: None
    ranges: bool = False
    options: tuple[str, ...] = ("force",)
    by_dataset: bool = True  # its keys start with a dataset name (--partition DATASET keeps those)
    registered_by: str | None = None
    skips_rows: bool = False
    build_stage: BuildStage | None = None
    not_done: Callable[[Target], list[str | None]] = lambda target: []
    applies: Callable[[Blend], bool] = lambda blend: True
    asked_by: str = ""
    built_by: str = ""


@dataclass(frozen=True)
class StatusRequest:
    instance: dg.DagsterInstance
    store: Storage
    blend: Blend
    sample: str | None = None  # a sample's status: its shards only
    plans_of: Plans = RECORDED  # where the datasets' plans come from (core/status.py)


def _no_status(request: StatusRequest) -> list[StatusSection]:
    return []


def _no_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, plans_of: Plans = RECORDED
                 ) -> list[Problem]:
    return []


def _no_automation(blend_scope: BlendScope, assets: Assets) -> list:
    return []


@dataclass(frozen=True)
class Pipeline:
    """Everything shared code knows of one pipeline (see the module docstring)."""

    name: str
    applies: Callable[[Blend], bool]
    steps: tuple[Step, ...]
    assets: Callable[[BlendScope, Assets], Assets]  # (this blend and scope, the upstream pipelines' assets)
    automation: Callable[[BlendScope, Assets], list] = _no_automation  # sensors and schedules of the full build
    #: assets the blend's post-training sensor rebuilds once their inputs changed (core/automation.py)
    rebuilt_when_inputs_change: tuple[str, ...] = ()
    status: Callable[[StatusRequest], list[StatusSection]] = _no_status
    problems: Callable[[dg.DagsterInstance, Storage, Blend, Plans], list[Problem]] = _no_problems
    #: the command line's default selection with --partition (the shards of one dataset)
    partition_steps: tuple[str, ...] = field(default_factory=tuple)

    def steps_of(self, blend: Blend) -> list[Step]:
        """The steps whose assets ``blend`` builds."""
        return [step for step in self.steps if step.applies(blend)]
