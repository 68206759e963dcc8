"""Automation every pipeline shares, all off until turned on (the UI's Automation page, or ``dagster schedule
start`` / ``dagster sensor start``):

- per blend, the build sensor ``<blend>__build`` (`build_sensor`): one switch that builds what is missing or stale in
  the blend's full build, stage after stage (core/pipeline.py ``BuildStage``): the source splits, then the shards in
  contiguous ranges of at most ``SHARDS_PER_RUN`` (each range one run, which builds its shards in parallel), then
  the blend files. Each tick asks every step of the stage (``Step.not_done``); it waits while a run of the blend is
  queued or running. A job cannot do this (one job cannot span the three partitions definitions), and eager
  automation conditions wait for Dagster's 30-second backfill loop at each stage.
- a nightly schedule per kind of shards (`nightly_missing_shards_schedule`): at 02:00 it requests every shard
  partition that is not up to date by the one definition ``status`` and ``materialize`` use (core/records.py:
  missing, stale, or never planned), except those a run is building now, in contiguous ranges of at most
  ``SHARDS_PER_RUN``. Written by hand because ``build_schedule_from_partitioned_job`` rejects dynamic partitions.
- per blend with post-training data, the sensor ``<blend>__post_training_automation`` (`post_training_sensor`) over
  every asset a pipeline rebuilds once its inputs changed: it follows the materializations of the Harmony shards
  (and of those assets) by event id, and requests the descendants of what was rebuilt, stage after stage, each
  once: the rebuilt shards' datasets' ``harmony_dedup`` partitions (and the shards' ``sft_samples``), then what
  reads every dataset. Each step then rebuilds only what its receipts call stale. Not Dagster's eager automation
  conditions: their partition mappings cannot link a shard ``<ds>/shard_N`` to its dataset ``<ds>`` (every dedup
  partition was requested for one shard), and each upstream update requested the downstream again.

They only read listings, receipts and the instance; the runs do the work.
"""

import graphlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.partitions import SHARDS_PER_RUN, contiguous_ranges, range_tags
from nemotron_assets.core.pipeline import BlendScope, Step, Target
from nemotron_assets.core.records import Freshness, read_manifest
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.run_history import partition_statuses
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.discovery import listing_hash
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.manifest import SourceManifest

NIGHTLY_CRON = "0 2 * * *"
#: Whether one planned shard is up to date: (storage, the blend's base folder, manifest, shard index) -> freshness
ShardState = Callable[[Storage, str, SourceManifest, int], Freshness]


def shards_not_done(store: Storage, blend: Blend, keys: list[str], state_of: ShardState) -> list[str]:
    """The full build's shard ``keys`` that are not up to date (or have no plan)."""
    manifests: dict[str, SourceManifest | None] = {}
    wanted = []
    for key in keys:
        shard = ShardKey.parse(key)
        if shard.dataset not in manifests:
            try:
                manifests[shard.dataset] = read_manifest(store, blend.name, shard.dataset)
            except (FileNotFoundError, ValueError):
                manifests[shard.dataset] = None
        manifest = manifests[shard.dataset]
        if manifest is None or shard.index >= len(manifest.shards):
            wanted.append(key)
        elif not state_of(store, blend.name, manifest, shard.index).done:
            wanted.append(key)
    return wanted


def nightly_missing_shards_schedule(name: str, blend: Blend, shard_asset: dg.AssetsDefinition, what: str,
                                    state_of: ShardState) -> dg.ScheduleDefinition:
    """``name``: ``<blend>__nightly_missing_shards`` and the like; ``what``: the shards' name in the description."""
    partitions_name = shard_asset.partitions_def.name

    @dg.schedule(cron_schedule=NIGHTLY_CRON, name=name, target=shard_asset,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description=f"Builds the {what} shards of {blend.name} that are missing, failed or stale, "
                             f"{SHARDS_PER_RUN} contiguous partitions per run.")
    def schedule(context: dg.ScheduleEvaluationContext, storage: StorageResource):
        keys = context.instance.get_dynamic_partitions(partitions_name)
        statuses = partition_statuses(context.instance, shard_asset.key, shard_asset.partitions_def, keys)
        idle = [key for key in keys if statuses[key] != "IN_PROGRESS"]  # not those queued or running
        try:
            wanted = shards_not_done(storage.get(), blend, idle, state_of)
        except InputError as exc:
            return dg.SkipReason(f"{blend.name}: {exc}")
        if not wanted:
            return dg.SkipReason(f"all {len(keys)} shard partition(s) of {blend.name} are up to date")
        return range_requests(shard_asset, keys, wanted, "nightly", SHARDS_PER_RUN)

    return schedule


BUILD_SENSOR_INTERVAL = 5  # seconds between the build sensor's ticks
IN_PROGRESS = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


def build_sensor(blend_scope: BlendScope, staged: list[tuple[Step, dg.AssetsDefinition]]) -> dg.SensorDefinition:
    """``<blend>__build`` over the full build's ``staged`` steps (those with a ``build_stage``), with their assets.

    Each request has a run key made of what it builds and the state it was judged in (`build_state`), so a run that
    fails is not requested again, tick after tick, until something that could change its outcome changed: the blend
    file, a source listing, or a materialization of one of these assets. Materialize it by hand to retry sooner."""
    blend, blend_file = blend_scope.blend, blend_scope.blend_file
    stages = sorted({step.build_stage for step, _ in staged})
    names = ", ".join(step.asset for step, _ in staged)

    @dg.sensor(name=f"{blend.name}__build", minimum_interval_seconds=BUILD_SENSOR_INTERVAL,
               default_status=dg.DefaultSensorStatus.STOPPED, asset_selection=[asset for _, asset in staged],
               description=f"Builds what is missing or stale in {blend.name}, stage after stage ({names}): shards in "
                           f"runs of at most {SHARDS_PER_RUN} contiguous partitions. Waits while a run of "
                           f"{blend.name} is queued or running.")
    def sensor(context: dg.SensorEvaluationContext, storage: StorageResource):
        going = [run for run in context.instance.get_runs(filters=dg.RunsFilter(statuses=list(IN_PROGRESS)))
                 if any(key.path[0] == blend.name for key in run.asset_selection or ())]
        if going:
            return dg.SkipReason(f"waiting for {len(going)} run(s) of {blend.name} to end")
        target = Target(context.instance, storage.get(), blend, blend_scope.scope, blend_file=blend_file)
        try:
            state = build_state(target, [asset for _, asset in staged])
            for stage in stages:
                requests = [request for step, asset in staged if step.build_stage == stage
                            for request in step_requests(target, step, asset, state)]
                if requests:
                    return dg.SensorResult(run_requests=requests)
        except InputError as exc:
            return dg.SkipReason(f"{blend.name}: {exc}")
        return dg.SkipReason(f"every output of {blend.name} the sensor builds ({names}) is up to date")

    return sensor


def build_state(target: Target, assets: list[dg.AssetsDefinition]) -> str:
    """A short hash of what could change a run's outcome: the blend file, the listing of every source (the files'
    names, sizes and fingerprints), and the latest materialization of each of ``assets``."""
    digest = hashlib.sha256(target.blend_file.read_bytes())
    for entry in target.blend.entries():
        if not entry.path.startswith("hf://"):  # pinned by revision, in the blend file
            digest.update(listing_hash(entry, target.blend_file.parent).encode())
    for asset in assets:
        latest = target.instance.get_latest_materialization_event(asset.key)
        digest.update(f"{latest.run_id}@{latest.timestamp}".encode() if latest else b"never")
    return digest.hexdigest()[:16]


def step_requests(target: Target, step: Step, asset: dg.AssetsDefinition, state: str) -> list[dg.RunRequest]:
    """One run per contiguous range of the keys ``step`` has not done (at most ``SHARDS_PER_RUN`` for shards), or
    one run of an unpartitioned asset."""
    keys = step.not_done(target)
    if not keys:
        return []
    if keys == [None]:
        return range_requests(asset, None, None, state)
    order = partition_order(target.instance, asset)
    return range_requests(asset, order, keys, state, SHARDS_PER_RUN if step.ranges else len(order))


def partition_order(instance: dg.DagsterInstance, asset: dg.AssetsDefinition) -> list[str]:
    """Every partition key of a partitioned ``asset``, in its order (a dynamic set's: the order keys were added)."""
    partitions = asset.partitions_def
    if isinstance(partitions, dg.DynamicPartitionsDefinition):
        return instance.get_dynamic_partitions(partitions.name)
    return partitions.get_partition_keys()


def range_requests(asset: dg.AssetsDefinition, order: list[str] | None, keys, suffix: str, per_run: int = 1,
                   tags: dict | None = None) -> list[dg.RunRequest]:
    """The runs of ``asset`` for ``keys``: one per range of keys adjacent in ``order``, at most ``per_run`` each,
    with the range tags (``order=None``: one run of an unpartitioned asset). Run keys name the asset, the range and
    ``suffix`` (what the requester judged), so Dagster never launches the same request twice."""
    name, tags = asset.key.to_user_string(), tags or {}
    if order is None:
        return [dg.RunRequest(run_key=f"{name}@{suffix}", asset_selection=[asset.key], tags=tags)]
    return [dg.RunRequest(run_key=f"{name}:{run[0]}...{run[-1]}@{suffix}", asset_selection=[asset.key],
                          tags={**tags, **range_tags(run)})
            for run in contiguous_ranges(order, keys, max(per_run, 1))]


#: tags on the runs the post-training sensor requests: its name, and the stage (one tick's requests) they belong to
AUTOMATION_TAG = "nemotron/automation"
AUTOMATION_STAGE_TAG = "nemotron/automation_stage"
POST_TRAINING_SENSOR_INTERVAL = 10  # seconds between the post-training sensor's ticks
ALL = "*"  # every partition of an asset (or an unpartitioned asset) in the sensor's state
Keys = str | frozenset[str]  # ALL, or some partition keys


class PostTrainingGraph:
    """The assets a blend rebuilds once their inputs changed (``targets``), the assets they read that are not
    targets (the ``roots``: the Harmony shards), and which partitions of a child a changed partition of its parent
    reaches (`child_keys`)."""

    def __init__(self, targets: list[dg.AssetsDefinition], blend_assets: list[dg.AssetsDefinition]) -> None:
        self.assets = {asset.key: asset for asset in blend_assets}
        self.targets = [asset.key for asset in targets]
        self.parents = {key: [parent for parent in self.assets[key].asset_deps[key] if parent in self.assets]
                        for key in self.targets}
        self.roots = sorted({parent for key in self.targets for parent in self.parents[key]} - set(self.targets),
                            key=lambda key: key.to_user_string())
        self.order = list(graphlib.TopologicalSorter(
            {key: [p for p in self.parents[key] if p in self.parents] for key in self.targets}).static_order())
        self.ancestors: dict[dg.AssetKey, set[dg.AssetKey]] = {}
        for key in self.order:
            self.ancestors[key] = {a for p in self.parents[key] if p in self.parents
                                   for a in (p, *self.ancestors[p])}

    @property
    def watched(self) -> list[dg.AssetKey]:
        return self.roots + self.targets

    def child_keys(self, parent: dg.AssetKey, keys: Keys, child: dg.AssetKey) -> Keys:
        """The partitions of ``child`` that read ``keys`` of ``parent``: the same keys when both have the same
        partitions (a Harmony shard's samples), the datasets of shard keys when the child is partitioned by dataset
        (``<ds>/shard_N`` -> ``<ds>``, which Dagster's partition mappings cannot say), else all of them."""
        up, down = self.assets[parent], self.assets[child]
        if down.partitions_def is None or keys == ALL or up.partitions_def is None:
            return ALL
        mapping = down.get_partition_mapping(parent)
        if down.partitions_def == up.partitions_def and (mapping is None
                                                         or isinstance(mapping, dg.IdentityPartitionMapping)):
            return keys
        if isinstance(down.partitions_def, dg.StaticPartitionsDefinition):
            try:
                datasets = {ShardKey.parse(key).dataset for key in keys}
            except ValueError:
                return ALL
            if datasets <= set(down.partitions_def.get_partition_keys()):
                return frozenset(datasets)
        return ALL

    def descendants(self, changed: dict[dg.AssetKey, Keys]) -> dict[dg.AssetKey, Keys]:
        """The target partitions downstream of the ``changed`` ones (not those themselves)."""
        reached: dict[dg.AssetKey, Keys] = dict(changed)
        wanted: dict[dg.AssetKey, Keys] = {}
        for key in self.order:
            for parent in self.parents[key]:
                if parent in reached:
                    wanted[key] = merge_keys(wanted.get(key), self.child_keys(parent, reached[parent], key))
            if key in wanted:
                reached[key] = merge_keys(reached.get(key), wanted[key])
        return wanted


def merge_keys(a: Keys | None, b: Keys) -> Keys:
    if a is None:
        return b
    return ALL if ALL in (a, b) else a | b


@dataclass
class PostTrainingState:
    """The post-training sensor's cursor: the last event it read, what it still has to request (asset -> keys),
    the last stage it requested (``<event>.<count>``, in its runs' tags and run keys), ``open`` until that stage's
    runs were seen to end, and how many stages it requested."""

    after: int
    pending: dict[dg.AssetKey, Keys] = field(default_factory=dict)
    stage: str = ""
    open: bool = False
    count: int = 0

    def next_stage(self) -> str:
        self.count += 1
        self.stage = f"{self.after}.{self.count}"  # unique: a fresh cursor starts after every event seen before
        return self.stage

    def to_cursor(self) -> str:
        return json.dumps({"format": "post-training/1", "after": self.after, "stage": self.stage, "open": self.open,
                           "count": self.count,
                           "pending": {key.to_user_string(): keys if keys == ALL else sorted(keys)
                                       for key, keys in self.pending.items()}}, sort_keys=True)

    @staticmethod
    def from_cursor(cursor: str | None, graph: PostTrainingGraph) -> "PostTrainingState | None":
        """None for no cursor, or one this sensor did not write (garbage, an older format)."""
        try:
            data = json.loads(cursor) if cursor else None
            if not isinstance(data, dict) or data.get("format") != "post-training/1":
                return None
            known = {key.to_user_string(): key for key in graph.targets}
            pending = {known[name]: ALL if keys == ALL else frozenset(map(str, keys))
                       for name, keys in data["pending"].items() if name in known}
            return PostTrainingState(int(data["after"]), pending, str(data["stage"]), bool(data["open"]),
                                     int(data["count"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def post_training_sensor(blend: Blend, targets: list[dg.AssetsDefinition],
                         blend_assets: list[dg.AssetsDefinition]) -> dg.SensorDefinition:
    """``<blend>__post_training_automation``: rebuilds what follows a rebuilt Harmony shard (or a rebuilt ``targets``
    asset), only for the datasets that changed, stage after stage, each asset once. Stopped by default.

    Each tick reads the materializations of the watched assets since the cursor's last event (skipping those of
    the runs it requested itself) and adds their descendants to what it still has to request: a shard of dataset
    ``ds`` reaches ``harmony_dedup`` of ``ds`` and the shard's ``sft_samples``, and through them every partition
    of what reads every dataset (pools, views, reports, scores, the SFT plan, packed shards and manifest). While a
    run of these assets is queued or running it waits; then it requests the assets none of whose ancestors are
    still to request, one run per contiguous range of their partitions (at most ``SHARDS_PER_RUN`` shards). When
    a run of the last stage failed, what depends on it is dropped (the step's error says why). With an empty
    or foreign cursor it starts from the latest event, requesting nothing."""
    graph = PostTrainingGraph(targets, blend_assets)
    name = f"{blend.name}__post_training_automation"

    @dg.sensor(name=name, minimum_interval_seconds=POST_TRAINING_SENSOR_INTERVAL,
               default_status=dg.DefaultSensorStatus.STOPPED, asset_selection=graph.targets,
               description=f"After a Harmony shard of {blend.name} was rebuilt (or one of these outputs), rebuilds "
                           f"what follows for that dataset only, then what reads every dataset, once: "
                           f"{', '.join(key.path[-1] for key in graph.order)} (each step finds what is still up to "
                           f"date). Waits while a run of these assets is queued or running.")
    def sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        instance = context.instance
        state = PostTrainingState.from_cursor(context.cursor, graph)
        if state is None:
            state = PostTrainingState(latest_storage_id(instance, graph.watched))
            return dg.SensorResult(skip_reason=f"following the materializations after event {state.after}",
                                   cursor=state.to_cursor())
        changed, state.after = rebuilt_since(instance, graph.watched, state.after, name)
        for key, keys in graph.descendants(changed).items():
            state.pending[key] = merge_keys(state.pending.get(key), keys)
        watched = set(graph.watched)
        going = [run for run in instance.get_runs(filters=dg.RunsFilter(statuses=list(IN_PROGRESS)))
                 if watched.intersection(run.asset_selection or ())]
        if going:
            return dg.SensorResult(skip_reason=f"waiting for {len(going)} run(s) of {blend.name} to end",
                                   cursor=state.to_cursor())
        if state.open:
            drop_after_failures(context, instance, graph, state, name)
        requests: list[dg.RunRequest] = []
        while state.pending and not requests:
            ready = [key for key in graph.order
                     if key in state.pending and not graph.ancestors[key] & state.pending.keys()]
            stage = state.next_stage()
            for key in ready:
                requests += stage_requests(instance, graph.assets[key], state.pending.pop(key), name, stage)
        state.open = bool(requests)
        if not requests:
            return dg.SensorResult(skip_reason=f"nothing of {blend.name} was rebuilt since the last request",
                                   cursor=state.to_cursor())
        return dg.SensorResult(run_requests=requests, cursor=state.to_cursor())

    return sensor


def latest_storage_id(instance: dg.DagsterInstance, keys: list[dg.AssetKey]) -> int:
    latest = 0
    for key in keys:
        records = instance.fetch_materializations(key, limit=1).records
        latest = max([latest] + [record.storage_id for record in records])
    return latest


def rebuilt_since(instance: dg.DagsterInstance, keys: list[dg.AssetKey], after: int, sensor: str
                  ) -> tuple[dict[dg.AssetKey, Keys], int]:
    """(asset -> partitions materialized after event ``after`` by runs the sensor did not request, the last
    event read)."""
    changed: dict[dg.AssetKey, Keys] = {}
    ours: dict[str, bool] = {}
    last = after
    for key in keys:
        cursor = None
        while True:
            page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, after_storage_id=after),
                                                   limit=1000, cursor=cursor, ascending=True)
            for record in page.records:
                last = max(last, record.storage_id)
                if record.run_id not in ours:
                    run = instance.get_run_by_id(record.run_id)
                    ours[record.run_id] = run is not None and run.tags.get(AUTOMATION_TAG) == sensor
                if not ours[record.run_id]:
                    partition = record.partition_key
                    changed[key] = merge_keys(changed.get(key), ALL if partition is None else frozenset([partition]))
            if not page.has_more:
                break
            cursor = page.cursor
    return changed, last


def drop_after_failures(context: dg.SensorEvaluationContext, instance: dg.DagsterInstance,
                        graph: PostTrainingGraph, state: PostTrainingState, sensor: str) -> None:
    """Once the last stage's runs ended: drop what depends on an asset whose run failed or was canceled."""
    state.open = False
    failed = instance.get_runs(filters=dg.RunsFilter(
        tags={AUTOMATION_TAG: sensor, AUTOMATION_STAGE_TAG: state.stage},
        statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]))
    broken = {key for run in failed for key in run.asset_selection or ()}
    dropped = [key for key in state.pending if graph.ancestors[key] & broken]
    for key in dropped:
        del state.pending[key]
    if dropped:
        context.log.warning(f"run(s) {', '.join(run.run_id for run in failed)} failed: not requesting "
                            f"{', '.join(key.path[-1] for key in dropped)}")


def stage_requests(instance: dg.DagsterInstance, asset: dg.AssetsDefinition, keys: Keys, sensor: str,
                   stage: str) -> list[dg.RunRequest]:
    """The runs of ``keys`` of ``asset``: one per contiguous range of its partitions (at most ``SHARDS_PER_RUN``
    of a dynamic set), or one run of an unpartitioned asset."""
    tags = {AUTOMATION_TAG: sensor, AUTOMATION_STAGE_TAG: stage}
    if asset.partitions_def is None:
        return range_requests(asset, None, None, stage, tags=tags)
    order = partition_order(instance, asset)
    dynamic = isinstance(asset.partitions_def, dg.DynamicPartitionsDefinition)
    return range_requests(asset, order, order if keys == ALL else keys, stage,
                          SHARDS_PER_RUN if dynamic else len(order), tags)
