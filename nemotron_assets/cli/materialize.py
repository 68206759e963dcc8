"""``materialize``: a blend's steps, pipeline by pipeline, as the Dagster runs a user would launch.

For each pipeline of the registry that applies to the blend, each selected step (asset) in order: its partitions
(`core.pipeline.Step.keys`: a sample's name in front for a sample, one dataset's for ``--partition``), in one run, or
for shards in contiguous ranges of at most ``--shards-per-run`` (each run builds its shards at the same time inside
its step). The run config names only what an option here changes (``--force``, ``--build-processes``,
``--tokenizer-backend``, ``--executor``), so by default these are exactly the runs of::

    dagster asset materialize -m nemotron_assets.definitions --select <blend>/<asset> --partition-range A...B

The runs execute here, one after the other (or, with ``NEMOTRON_DEPLOYMENT=cluster``, are handed to the instance's
run launcher, Ray, all at once, and waited for). A step that failed stops the command; the located errors are
printed last.
"""

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import dagster as dg

from nemotron_assets.cli import UsageError, storage
from nemotron_assets.cli.console import stdout_to_stderr
from nemotron_assets.cli.interrupts import EXIT_STATUS, Interrupted, Interrupts
from nemotron_assets.cli.result import failed_asset_checks, located_errors, result_document, skipped_rows
from nemotron_assets.core import settings
from nemotron_assets.core.blend import Blend, load_blend_folder
from nemotron_assets.core.instance import (
    LAUNCHED_BY_TAG,
    PROCESS_TAG,
    SAMPLE_TAG,
    fail_runs_of_dead_processes,
    open_instance,
)
from nemotron_assets.core.layout import ShardKey, base_dir, sample_name
from nemotron_assets.core.partitions import SHARDS_PER_RUN, Scope, contiguous_ranges
from nemotron_assets.core.pipeline import Step, Target
from nemotron_assets.core.processes import owner_token
from nemotron_assets.core.records import NotReady
from nemotron_assets.core.runs import (
    RunOutcome,
    execute_assets,
    launch_assets,
    load_repository,
    reload_definitions,
    wait_for_runs,
)
from nemotron_assets.defs.registry import PIPELINES
from nemotron_assets.defs.sources.preflight import check_before_reading


@dataclass
class Request:
    """What one ``materialize`` command asks for, checked against the blend before anything runs."""

    blend_file: Path
    blend: Blend
    steps: list[str]
    sample: str | None = None
    dataset: str | None = None
    shard: str | None = None
    outcomes: list[RunOutcome] = field(default_factory=list)


@dataclass(frozen=True)
class Materialized:
    """How a ``materialize`` ended: its exit status and its result document (cli/result.py)."""

    exit_status: int
    document: dict | None  # None when not asked for


def materialize(args: argparse.Namespace) -> int:
    """The command. With ``--json`` the result document is the one thing on stdout: while the runs go, whatever
    would reach stdout (Dagster's, a library's, a forked build's) goes to stderr with the log lines."""
    with stdout_to_stderr() if args.json else contextlib.nullcontext():
        done = materialize_blend(args, Interrupts(), with_document=args.json)
    if args.json:
        print(json.dumps(done.document, indent=1), flush=True)
    return done.exit_status


def materialize_blend(args: argparse.Namespace, interrupts: Interrupts, with_document: bool) -> Materialized:
    """Check the request, run its steps, print the outcome (stderr) and (``with_document``) read back what the runs
    made. Bad input
    raises before any run (exit status 2). While the steps run, a signal that ``interrupts`` handles ends the build
    (exit status 130); otherwise Ctrl-C raises ``KeyboardInterrupt`` as usual."""
    started = time.monotonic()
    reload_definitions()  # the blend files and settings as they are now, also when this process materialized before
    blend_file, blend = load_blend_folder(settings.blends_dir()).find(args.blend)
    try:
        sample = sample_name(args.scale, args.max_rows)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(value is not None and value < 1 for value in (args.shards_per_run, args.build_processes)):
        raise UsageError("--shards-per-run and --build-processes must be at least 1")
    if args.jobs is not None:
        print("note: --jobs is no longer needed: each run builds its shards at the same time (--build-processes)",
              file=sys.stderr)
    request = Request(blend_file, blend, selection(args.select, args.partition, blend), sample)
    request.dataset, request.shard = partition_target(args.partition, blend)
    check_before_reading(blend, blend_file, [request.dataset] if request.dataset else None)

    cluster = settings.deployment() == "cluster"
    with open_instance(launching=cluster, console_level=None if cluster else console_level(args)) as instance:
        interrupted = ""
        with interrupts:
            try:
                build(args, request, instance, cluster, interrupts)
            except (KeyboardInterrupt, Interrupted):
                if not interrupts.handling:
                    raise
                interrupted = interrupts.signalled or "SIGINT"
        exit_status = stopped(request, started, interrupted) if interrupted else summarize(request, instance, started)
        document = result_document(instance, storage(), blend, blend_file, sample, request.outcomes, exit_status,
                                   interrupted) if with_document else None
    return Materialized(exit_status, document)


def build(args: argparse.Namespace, request: Request, instance: dg.DagsterInstance, cluster: bool,
          interrupts: Interrupts) -> None:
    """The runs of every selected step, pipeline by pipeline, into ``request.outcomes``; stops at a failed step, and
    raises `Interrupted` after the run a signal stopped."""
    for run_id in fail_runs_of_dead_processes(instance):
        print(f"marked run {run_id[:8]} failed: the command that executed it was killed", file=sys.stderr)
    store = storage()
    for orphan in store.remove_orphaned_staging():
        print(f"removed {orphan.path} ({orphan.bytes:,} bytes) left by a killed run", file=sys.stderr)
    if cluster:  # run workers start elsewhere: they must get this very root
        os.environ["NEMOTRON_DATA_ROOT"] = settings.data_root()
    origin, repo = load_repository()
    blend, sample = request.blend, request.sample
    target = Target(instance, store, blend, Scope(blend.name, samples=sample is not None), sample, request.dataset)
    tags = {LAUNCHED_BY_TAG: "cli", SAMPLE_TAG: sample or "full"}
    for pipeline in PIPELINES:
        if not pipeline.applies(blend):
            continue
        for step in pipeline.steps_of(blend):
            if step.asset not in request.steps:
                continue
            asset_key = dg.AssetKey(target.scope.key(step.asset))
            partition_runs = runs_of(step, target, request, repo.assets_defs_by_key[asset_key], args)
            if not partition_runs:
                continue
            config = run_config(repo, asset_key, step, args)
            execute(origin, repo, instance, asset_key, step.asset, partition_runs, config, tags, cluster,
                    request.outcomes, interrupts)
            if not all(o.success for o in request.outcomes):
                return


def selection(select: str | None, partition: str | None, blend: Blend) -> list[str]:
    """The assets to build, in build order: ``--select``'s, else every asset (with ``--partition``: the source split
    and the shards of that dataset)."""
    steps = [step.asset for pipeline in PIPELINES for step in pipeline.steps if not step.built_by]
    elsewhere = {step.asset: step.built_by for pipeline in PIPELINES for step in pipeline.steps if step.built_by}
    if select is None:
        if partition:
            return [name for pipeline in PIPELINES for name in pipeline.partition_steps]
        return steps
    chosen = [s.strip().split("/")[-1] for s in select.split(",") if s.strip()]
    for name in chosen:
        if name in elsewhere:
            raise UsageError(f"{name} is built by `python -m nemotron_assets {elsewhere[name]} {blend.name} ...`, "
                             "never by materialize")
    unknown = [s for s in chosen if s not in steps]
    if unknown:
        raise UsageError(f"unknown asset(s) {', '.join(unknown)}; choose from {', '.join(steps)}")
    built = {step.asset for pipeline in PIPELINES if pipeline.applies(blend) for step in pipeline.steps_of(blend)}
    for pipeline in PIPELINES:
        for step in pipeline.steps:
            if step.asset in chosen and step.asset not in built:
                raise UsageError(f"blend {blend.name!r} does not build {step.asset}"
                                 + (f": it is built when {step.asked_by}" if step.asked_by else ""))
    return [name for name in steps if name in chosen]


def partition_target(partition: str | None, blend: Blend) -> tuple[str | None, str | None]:
    """(dataset, shard key) named by --partition."""
    if partition is None:
        return None, None
    datasets = [e.name for e in blend.entries()]
    if "/" in partition:
        try:
            key = ShardKey.parse(partition)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        dataset, shard = key.dataset, partition
    else:
        dataset, shard = partition, None
    if dataset not in datasets:
        raise UsageError(f"unknown dataset {dataset!r}; the blend has {', '.join(datasets)}")
    return dataset, shard


def runs_of(step: Step, target: Target, request: Request, asset: dg.AssetsDefinition,
            args: argparse.Namespace) -> list[list[str] | None]:
    """The partition ranges of one step's runs: ``[None]`` for an unpartitioned asset of the full build."""
    scope, sample, blend = target.scope, target.sample, target.blend
    try:
        keys = step.keys(target)
    except NotReady as exc:  # e.g. scores of pools that are not built: nothing to run yet
        raise UsageError(str(exc)) from None
    if keys is None:
        keys = [None]
    if request.dataset is not None and step.by_dataset:
        keys = [k for k in keys if k == request.dataset or (k or "").startswith(f"{request.dataset}/")]
        if request.shard is not None and step.ranges:
            if request.shard not in keys:
                raise UsageError(f"unknown shard {request.shard!r} of {blend.name}/{step.asset}: materialize "
                                 f"{blend.name}/source_split first")
            keys = [request.shard]
    if not keys:
        if step.registered_by:
            raise UsageError(f"no {step.asset} partitions for {blend.name}: materialize its {step.registered_by} "
                             "first")
        return []
    if keys == [None] and not scope.samples:
        return [None]
    qualified = [scope.qualify(sample, key) for key in keys]
    partitions = asset.partitions_def
    if isinstance(partitions, dg.DynamicPartitionsDefinition):  # a sample's keys, registered before its run
        known = target.instance.get_dynamic_partitions(partitions.name)
        missing = [key for key in qualified if key not in set(known)]
        if missing:
            target.instance.add_dynamic_partitions(partitions.name, missing)
            known += missing
    else:
        known = qualified
    if not step.ranges:
        return [qualified]
    return list(contiguous_ranges(known, qualified, args.shards_per_run or SHARDS_PER_RUN))


def run_config(repo: dg.RepositoryDefinition, asset_key: dg.AssetKey, step: Step, args: argparse.Namespace) -> dict:
    """Only what an option of this command changes: otherwise the asset's own defaults, as with ``dagster asset
    materialize``."""
    given = {"force": args.force or None, "tokenizer_backend": args.tokenizer_backend,
             "build_processes": args.build_processes}
    options = {name: given[name] for name in step.options if given[name] is not None}
    config: dict = {}
    if options:
        config["ops"] = {repo.assets_defs_by_key[asset_key].op.name: {"config": options}}
    if args.executor:
        config["execution"] = {"config": {args.executor: {}}}
    logger = "console" if args.dagster_logs else "compact_console"
    config["loggers"] = {logger: {"config": {"log_level": console_level(args)}}}
    return config


def console_level(args: argparse.Namespace) -> str:
    """``--log-level``, else DEBUG with ``--dagster-logs`` (Dagster logs its events at DEBUG), else INFO."""
    return (args.log_level or ("DEBUG" if args.dagster_logs else "INFO")).upper()


def execute(origin, repo, instance: dg.DagsterInstance, asset_key: dg.AssetKey, asset: str,
            partition_runs: list[list[str] | None], run_config: dict, tags: dict, cluster: bool,
            outcomes: list[RunOutcome], interrupts: Interrupts) -> None:
    """One run per partition range (``None``: unpartitioned), each outcome printed and added to ``outcomes`` as it
    ends: with ``cluster`` all handed to the instance's run launcher (Ray) at once and waited for (a signal asks the
    launcher to stop them); else here, one after the other, stopping after the run a signal interrupted."""
    if cluster:
        launched = {launch_assets(origin, repo, instance, [asset_key], p, run_config, tags): tuple(p or ())
                    for p in partition_runs}
        print(f"launched {len(launched)} {asset} run(s) through {type(instance.run_launcher).__name__}",
              file=sys.stderr)
        wait_for_runs(instance, launched, on_finished=lambda o: ended(o.for_asset(asset), outcomes),
                      stopping=lambda: interrupts.signalled)
        interrupts.check()  # a signal during the last poll: the runs had ended, the next step must not start
        return
    for partitions in partition_runs:
        outcome = execute_assets(origin, repo, instance, [asset_key], partitions, run_config,
                                 {**tags, PROCESS_TAG: owner_token()}).for_asset(asset)
        if interrupts.signalled and not outcome.success:
            outcome = replace(outcome, error=f"interrupted by {interrupts.signalled}")
        ended(outcome, outcomes)
        interrupts.check()


def ended(outcome: RunOutcome, outcomes: list[RunOutcome]) -> None:
    report(outcome)
    outcomes.append(outcome)


def report(outcome: RunOutcome) -> None:
    span = f" {outcome.partitions[0]}...{outcome.partitions[-1]}" if outcome.partitions else ""
    status = f"ok in {outcome.seconds:.1f} s (steps {outcome.step_seconds:.1f} s)" if outcome.success else (
        outcome.error if outcome.error.startswith("interrupted") else "FAILED (the error is shown at the end)")
    print(f"run {outcome.run_id[:8]} {outcome.asset}{span}: {status}", file=sys.stderr)


def stopped(request: Request, started: float, signal_name: str) -> int:
    """The one line of an interrupted command: what finished, and the command that goes on from there."""
    finished = sum(o.success for o in request.outcomes)
    again = " ".join(shlex.quote(arg) for arg in ["python", "-m", "nemotron_assets", *sys.argv[1:]])
    print(f"interrupted by {signal_name} after {time.monotonic() - started:.1f} s: {finished} run(s) finished, "
          "committed outputs stay done; to go on, run the same command again: " + again, file=sys.stderr)
    return EXIT_STATUS


def summarize(request: Request, instance: dg.DagsterInstance, started: float) -> int:
    """The done/FAILED line (runs, time, skipped rows), the asset checks that failed, then every failed run's located
    error, last."""
    outcomes = request.outcomes
    ok = all(o.success for o in outcomes)
    skipped = skipped_rows(instance, [o.run_id for o in outcomes])
    failed_checks = failed_asset_checks(instance, [o.run_id for o in outcomes])
    where = f"{settings.data_root()}/{base_dir(request.blend.name, request.sample)}/"
    print(f"{'done' if ok and not failed_checks else 'FAILED'}: {len(outcomes)} run(s) in "
          f"{time.monotonic() - started:.1f} s; "
          f"{skipped:,} bad row(s) skipped; outputs under {where}", file=sys.stderr)
    if failed_checks:
        print(f"\n{len(failed_checks)} asset check(s) FAILED (the outputs were written; see the UI's Checks tab):",
              file=sys.stderr)
        for line in failed_checks:
            print(f"  {line}", file=sys.stderr)
        ok = False
    for outcome in outcomes:
        if not outcome.success:
            print(f"\n{located_errors([outcome])}\nfull log: the Dagster UI's Runs page, run {outcome.run_id}",
                  file=sys.stderr)
    return 0 if ok else 1
