"""``python -m nemotron_assets`` (also the ``nemotron-assets`` command).

    materialize BLEND [--select ASSETS] [--partition KEY] [--scale tiny|small|full | --max-rows N]
                      [--force] [--tokenizer-backend auto|hf|fastokens] [--shards-per-run N] [--jobs N]
                      [--build-processes N]
                      [--executor in_process|multiprocess] [--log-level LEVEL] [--dagster-logs]
    status [BLEND] [--json]
    verify BLEND

``materialize`` builds a whole blend, or the selected assets / one partition of it, as real Dagster runs in
the instance of ``DAGSTER_HOME`` (default: this checkout's ``dagster_home/``): first the source splits (they
plan the shards), then the shards in runs of up to ``--shards-per-run``, then the Megatron blend (and, for
post-training data, what follows the Harmony shards; with a ``scoring:`` section, the NLL scores, embeddings,
selections and near-duplicate report; the JSONL shards and their manifest; with an ``sft:`` section,
the SFT samples, plan, packed shards and manifest). ``--scale`` and
``--max-rows`` build a *sample* under ``<root>/<blend>/samples/<sample>/`` through the sample twin assets, never
touching the full build. With ``NEMOTRON_DEPLOYMENT=cluster`` the runs are launched through the instance's run
launcher (Ray) instead of executed here. ``status`` shows per dataset the shards planned / done / stale / failed /
missing, tokens and rows; ``verify`` re-checks every shard's files and checksums and blend.json, printing one line
per problem (file: why). Exit status: 0 success, 1 a run failed or verify found problems, 2 a bad blend or
command line.
"""

import argparse
import contextlib
import gc
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nemotron_assets.core import settings

ASSET_NAMES = ("source_split", "pretrain_shard", "megatron_blend", "harmony_shard", "harmony_dedup",
               "candidate_pool", "embedding_view", "behavior_report", "nll_scores", "embeddings", "selected_pool",
               "near_duplicate_report", "jsonl_shard", "jsonl_manifest", "sft_samples", "sft_plan", "sft_packed",
               "sft_manifest")
SCORING_ASSETS = ("nll_scores", "embeddings", "selected_pool", "near_duplicate_report")  # with a scoring: section
SHARD_ASSETS = {"pretrain_shard": "pretrain", "harmony_shard": "harmony", "jsonl_shard": "jsonl",
                "sft_samples": "harmony", "sft_packed": "sft"}
SKIPPED_ROWS_ASSETS = ("pretrain_shard", "harmony_shard", "jsonl_shard")
AUTO_PARALLEL_BYTES = 64 << 20  # below this much input, a step runs in this process: workers cost seconds to start


class UsageError(Exception):
    """A command line that cannot work; exit status 2 with the message."""


def run() -> None:
    """The command's entry point (``nemotron-assets`` and ``python -m nemotron_assets``): ``main``, then exit.

    Before exiting, every object alive is moved out of the garbage collector's reach (``gc.freeze``): otherwise
    the interpreter's teardown runs full collections over every object the imports and the work left behind,
    which took 0.35-0.4 s at the end of a pretraining build of 1 GB (a perf profile: ``gc_collect_main``), about
    3 % of the command (bench/README.md). Nothing is skipped: atexit callbacks, logging's flush and the join of running
    threads happen as usual, and everything the command wrote was committed before ``main`` returned."""
    code = main()
    gc.freeze()
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from nemotron_assets.core.blend import UnknownBlend
    from nemotron_assets.core.instance import InstanceError
    from nemotron_assets.core.settings import DeploymentError
    from nemotron_assets.sources.errors import InputError

    command = {"materialize": materialize, "status": show_status, "verify": verify}[args.command]
    try:
        settings.deployment()  # an unknown NEMOTRON_DEPLOYMENT is an error for every command
        return command(args)
    except (InputError, UsageError, UnknownBlend, DeploymentError, InstanceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nemotron-assets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    mat = commands.add_parser("materialize", help="materialize a blend (or part of it) through Dagster")
    mat.add_argument("blend", help="blend name (file stem in the blends folder)")
    mat.add_argument("--select", default=None,
                     help=f"comma-separated assets of the blend: {', '.join(ASSET_NAMES)} (default: all)")
    mat.add_argument("--partition", default=None,
                     help="a dataset name (its source split and shards) or a shard key like wiki/shard_00000")
    mat.add_argument("--scale", choices=("tiny", "small", "full"), default="full",
                     help="build a sample of <= 10,000 (tiny) or 1,000,000 (small) rows per dataset under "
                          "<root>/<blend>/samples/<scale>/; full (default) is the real build")
    mat.add_argument("--max-rows", type=int, default=None,
                     help="build a sample of the first N rows of each dataset under <root>/<blend>/samples/rows_N/")
    mat.add_argument("--force", action="store_true", help="rebuild outputs that are already up to date")
    mat.add_argument("--tokenizer-backend", choices=("auto", "hf", "fastokens"), default="auto")
    mat.add_argument("--shards-per-run", type=int, default=None,
                     help="partitions per Dagster run (default: the asset's backfill policy, 16)")
    mat.add_argument("--jobs", type=int, default=None,
                     help="runs at the same time, each in its own worker process; 1 runs them one after the other "
                          "in this process. Default: the number of cores for steps that read at least "
                          f"{AUTO_PARALLEL_BYTES >> 20} MB (starting workers costs seconds), else 1; 1 for "
                          "pretraining shards, whose run builds its shards in processes of its own "
                          "(--build-processes)")
    mat.add_argument("--build-processes", type=int, default=None,
                     help="pretraining shards built at the same time inside one run, each in a process forked from "
                          "the run's step (1: one after the other). Default: one per core, shared among --jobs")
    mat.add_argument("--executor", choices=("in_process", "multiprocess"), default="in_process",
                     help="in_process (default): each run in this process; multiprocess: Dagster's executor of the "
                          "UI, one process per step")
    mat.add_argument("--log-level", default="INFO", help="console log level (default INFO)")
    mat.add_argument("--dagster-logs", action="store_true", help="print Dagster's full event log instead of one "
                                                                  "line per message")
    stat = commands.add_parser("status", help="shards planned / done / stale / failed / missing, tokens, rows")
    stat.add_argument("blend", nargs="?", default=None, help="blend name (default: every blend)")
    stat.add_argument("--json", action="store_true", help="machine-readable output")
    ver = commands.add_parser("verify", help="re-check every shard's files and checksums, and blend.json")
    ver.add_argument("blend", help="blend name (file stem in the blends folder)")
    return parser


# --- materialize ------------------------------------------------------------------------------------------
@dataclass
class Request:
    """What one ``materialize`` command asks for, checked against the blend before anything runs."""

    blend_file: Path
    blend: object  # nemotron_assets.core.blend.Blend
    steps: list[str]
    sample: str | None = None
    dataset: str | None = None
    shard: str | None = None
    outcomes: list = field(default_factory=list)


def materialize(args: argparse.Namespace) -> int:
    from nemotron_assets.core.allocator import tune_malloc_for_builds
    from nemotron_assets.core.blend import load_blend_folder
    from nemotron_assets.core.layout import sample_name
    from nemotron_assets.defs.sources.preflight import check_before_reading

    started = time.monotonic()
    tune_malloc_for_builds()  # before any thread starts (allocator.py)
    blend_file, blend = load_blend_folder(settings.blends_dir()).find(args.blend)
    try:
        sample = sample_name(args.scale, args.max_rows)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(value is not None and value < 1 for value in (args.jobs, args.shards_per_run, args.build_processes)):
        raise UsageError("--jobs, --shards-per-run and --build-processes must be at least 1")
    request = Request(blend_file, blend, _selection(args.select, args.partition), sample)
    request.dataset, request.shard = _partition_target(args.partition, blend)
    check_before_reading(blend, blend_file, [request.dataset] if request.dataset else None)

    cluster = settings.deployment() == "cluster"
    with _build_host_started(request, args, cluster):
        from nemotron_assets.core.instance import fail_runs_of_dead_processes, open_instance  # imports Dagster

        instance = open_instance(launching=cluster)
        for run_id in fail_runs_of_dead_processes(instance):
            print(f"marked run {run_id[:8]} failed: the command that executed it was killed", file=sys.stderr)
        store = _storage()
        for orphan in store.remove_orphaned_staging():
            print(f"removed {orphan.path} ({orphan.bytes:,} bytes) left by a killed run", file=sys.stderr)
        if cluster:
            from nemotron_assets.core.cluster import pin_data_root

            pin_data_root()
        from nemotron_assets.core.runs import load_repository

        origin, repo = load_repository()
        workers = Workers(args.jobs or os.cpu_count() or 1)
        try:
            if not cluster and (args.jobs or 1) > 1:
                workers.get().start()  # they start while the source split runs here
            run_steps(request, args, instance, origin, repo, cluster, workers)
        finally:
            workers.close()
        return _summarize(request, instance, started)


class Workers:
    """The command's worker processes (``runner.WorkerPool``), made on first use and kept for every later step, so
    each step after the first finds them started; closed when the command ends."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool = None

    def get(self):
        if self._pool is None:
            from nemotron_assets.core.runs import WorkerPool

            self._pool = WorkerPool(self.size)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


@contextlib.contextmanager
def _build_host_started(request: Request, args: argparse.Namespace, cluster: bool) -> Iterator[None]:
    """Start the build host (pretrain/build_host.py) when this command will build pretraining shards in forked
    processes of its own: shard runs executed here (one at a time, the in_process executor) and forking allowed (not
    ``--build-processes 1``). Forked before Dagster is imported and before any thread starts, it loads the tokenizer
    on the second core while Dagster starts here; the shard step finds it. When the source split of the first
    pretraining dataset runs now, on local files and for the whole dataset (not a sample), the host measures that
    dataset first, and the split step takes its manifest. Closed when the command ends."""
    from nemotron_assets.core.workers import fork_available

    datasets = [e.name for e in request.blend.datasets_of("pretrain")
                if request.dataset is None or e.name == request.dataset]
    if (cluster or "pretrain_shard" not in request.steps or not datasets or args.executor != "in_process"
            or args.jobs not in (None, 1) or args.build_processes == 1 or not fork_available()):
        yield
        return
    from nemotron_assets.defs.pretrain.build_host import BuildHost, MeasureAhead
    from nemotron_assets.defs.pretrain.inputs import document_options
    from nemotron_assets.sources.files import is_remote

    blend = request.blend
    first = blend.entry(datasets[0])
    measure = "source_split" in request.steps and request.sample is None and not is_remote(first.path)
    try:
        host = BuildHost(blend.tokenizer_model, blend.tokenizer_revision,
                         document_options(blend, args.tokenizer_backend),
                         MeasureAhead(blend, first.name, request.blend_file.parent) if measure else None)
    except OSError as exc:  # no process could be forked (memory, process limits): the step loads the tokenizer
        print(f"no build host ({exc}): the shard step loads the tokenizer itself", file=sys.stderr)
        host = None
    try:
        yield
    finally:
        if host is not None:
            host.close()


def run_steps(request: Request, args: argparse.Namespace, instance, origin, repo, cluster: bool,
              workers: "Workers") -> None:
    """Run the selected steps in order, each as one or more Dagster runs; stop after a step that failed."""
    import dagster as dg

    from nemotron_assets.core.partitions import SHARDS_PER_RUN, Scope, contiguous_ranges, sample_partitions_name
    from nemotron_assets.core.runs import split_into_runs

    blend, sample = request.blend, request.sample
    scope = Scope(blend.name, samples=sample is not None)
    store = _storage()
    keys = {name: dg.AssetKey(scope.key(name)) for name in ASSET_NAMES}
    run_config = _run_config(repo, keys, args, request.steps)
    tags = _run_tags(sample)
    text = [e.name for e in blend.datasets_of("pretrain")]
    family = [e.name for e in blend.datasets_of("harmony")]
    transformed = [e.name for e in blend.datasets_of("jsonl")]
    wanted = {"source_split": text + family + transformed, "pretrain_shard": text, "megatron_blend": text,
              "harmony_shard": family, "harmony_dedup": family, "candidate_pool": family, "embedding_view": family,
              "behavior_report": family, "jsonl_shard": transformed, "jsonl_manifest": transformed}
    packed_sft = family if blend.sft is not None else []  # packed SFT: the family datasets' rows, then the splits
    wanted.update({"sft_samples": packed_sft, "sft_plan": packed_sft, "sft_manifest": packed_sft,
                   "sft_packed": ["train", "valid", "test"] if packed_sft else []})
    scored = list(blend.scoring.pools) if blend.scoring is not None and family else []  # scoring: after the pools
    wanted.update({step: scored for step in SCORING_ASSETS})
    if request.dataset is not None:
        wanted = {step: [d for d in datasets if d == request.dataset] for step, datasets in wanted.items()}
    if sample is not None:  # the sample twins' own partitions, registered before their runs
        from nemotron_assets.defs.harmony.pools import POOL_NAMES

        for what, names in (("datasets", wanted["source_split"]), ("family_datasets", family), ("pools", POOL_NAMES)):
            instance.add_dynamic_partitions(sample_partitions_name(blend.name, what),
                                            [scope.qualify(sample, name) for name in names])
        instance.add_dynamic_partitions(sample_partitions_name(blend.name, "blend"), [sample])
        if scored:
            from nemotron_assets.defs.scoring.inputs import embedding_partitions

            for what, names in (("scored_views", embedding_partitions(blend.scoring)),
                                ("selections", blend.scoring.selections())):
                instance.add_dynamic_partitions(sample_partitions_name(blend.name, what),
                                                [scope.qualify(sample, name) for name in names])

    def jobs_for(step: str) -> int:
        """--jobs, or by default every core for a step that reads enough input to pay for its workers.

        Pretraining shards default to one worker: its run builds the shards in processes forked after its tokenizer
        loaded (pretrain/shard_processes.py), while each worker would load the tokenizer again; two shard workers
        on 2 cores were slower than one (bench/README.md)."""
        if args.jobs is not None:
            return args.jobs
        if step == "pretrain_shard":
            return 1
        datasets = packed_sft if step.startswith("sft_") else wanted[step] if step != "source_split" else []
        planned = sum(_planned_bytes(store, scope.base(sample), d) for d in datasets)
        return (os.cpu_count() or 1) if planned >= AUTO_PARALLEL_BYTES else 1

    def shard_runs(step: str) -> list[list[str]]:
        partitions_name = scope.shard_partitions_name(SHARD_ASSETS[step])
        known = instance.get_dynamic_partitions(partitions_name)
        if request.shard:
            target = scope.qualify(sample, request.shard)
            if target not in known:
                raise UsageError(f"unknown shard {request.shard!r} of {blend.name}/{step}: materialize "
                                 f"{blend.name}/source_split first")
            return [[target]]
        mine = [k for k in known if scope.split(k)[0] == sample
                and scope.split(k)[1].split("/")[0] in wanted[step]]
        if not mine and step == "sft_packed":
            return []  # the plan packed nothing: the manifest says so
        if not mine:
            raise UsageError(f"no {step} partitions for {blend.name}: materialize its source_split first")
        per_run = min(args.shards_per_run or SHARDS_PER_RUN, math.ceil(len(mine) / jobs_for(step)))  # one per worker
        return list(contiguous_ranges(known, mine, per_run))

    def split(step: str, keys: list[str]) -> list[list[str]]:
        """One step's partitions in as many runs as it has workers, so they share them."""
        return list(split_into_runs(keys, jobs_for(step), len(keys)))

    for step in request.steps:
        if not wanted[step]:
            continue  # e.g. no family datasets: no Harmony path
        if step in SHARD_ASSETS:
            partition_runs = shard_runs(step)
            if not partition_runs:
                continue
        elif step in ("source_split", "harmony_dedup"):
            partition_runs = split(step, [scope.qualify(sample, d) for d in wanted[step]])
        elif step in ("candidate_pool", "embedding_view"):
            from nemotron_assets.defs.harmony.pools import POOL_NAMES

            partition_runs = split(step, [scope.qualify(sample, pool) for pool in POOL_NAMES])
        elif step in SCORING_ASSETS and step != "near_duplicate_report":
            partition_runs = [_scoring_partitions(instance, blend, scope, sample, step)]  # one run: one model load
            if not partition_runs[0]:
                continue
        else:
            partition_runs = [[sample] if sample else None]
        new = _execute_runs(origin, repo, instance, keys[step], step, partition_runs, run_config, tags, cluster,
                            jobs_for(step), workers)
        request.outcomes.extend(new)
        if not all(o.success for o in new):
            break


def _scoring_partitions(instance, blend, scope, sample: str | None, step: str) -> list[str]:
    """The partitions a scoring step runs: the scored pools' parts found on storage, every view of them, or
    every selection."""
    from nemotron_assets.core.records import NotReady
    from nemotron_assets.defs.scoring.inputs import embedding_partitions
    from nemotron_assets.defs.scoring.parts import nll_partitions

    if step == "nll_scores":
        try:
            return nll_partitions(instance, _storage(), blend, scope, sample)
        except NotReady as exc:  # like shard_runs: nothing to run until the pools are built
            raise UsageError(str(exc)) from None
    names = embedding_partitions(blend.scoring) if step == "embeddings" else blend.scoring.selections()
    return [scope.qualify(sample, name) for name in names]


def _summarize(request: Request, instance, started: float) -> int:
    """The done/FAILED line (runs, time, skipped rows), the asset checks that failed, then every failed run's located
    error, last."""
    from nemotron_assets.core.layout import base_dir

    outcomes = request.outcomes
    ok = all(o.success for o in outcomes)
    skipped = _skipped_rows(instance, [o.run_id for o in outcomes])
    failed_checks = _failed_checks(instance, [o.run_id for o in outcomes])
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
            print(f"\nerror in run {outcome.run_id} ({outcome.asset}"
                  f"{' ' + outcome.partitions[0] + '...' + outcome.partitions[-1] if outcome.partitions else ''}):\n"
                  + "\n".join(f"  {line}" for line in outcome.error.splitlines())
                  + f"\nfull log: the Dagster UI's Runs page, run {outcome.run_id}", file=sys.stderr)
    return 0 if ok else 1


def _execute_runs(origin, repo, instance, asset_key, asset: str, partition_runs: list[list[str] | None],
                  run_config: dict, tags: dict, cluster: bool, jobs: int, workers: Workers) -> list:
    """One run per partition range (``None``: unpartitioned): with ``cluster`` all handed to the instance's run
    launcher (Ray) at once and waited for; else, when ``jobs`` > 1, on the command's worker processes, or, for one
    run or ``--jobs 1``, here one after the other. Each outcome is printed as it ends."""
    from nemotron_assets.core.runs import execute_assets

    if cluster:
        from nemotron_assets.core.cluster import launch_assets, wait_for_runs

        launched = {launch_assets(origin, repo, instance, [asset_key], p, run_config, tags): tuple(p or ())
                    for p in partition_runs}
        print(f"launched {len(launched)} {asset} run(s) through {type(instance.run_launcher).__name__}",
              file=sys.stderr)
        outcomes = wait_for_runs(instance, launched, on_finished=lambda o: _report(o, asset))
        return [o.for_asset(asset) for o in outcomes]
    if jobs > 1 and len(partition_runs) > 1:
        outcomes = workers.get().execute(asset_key, partition_runs, run_config, tags,
                                         on_finished=lambda o: _report(o, asset))
        return [o.for_asset(asset) for o in outcomes]
    from nemotron_assets.core.instance import PROCESS_TAG
    from nemotron_assets.core.processes import owner_token

    outcomes = []
    for partitions in partition_runs:
        outcome = execute_assets(origin, repo, instance, [asset_key], partitions, run_config,
                                 {**tags, PROCESS_TAG: owner_token()}).for_asset(asset)
        _report(outcome, asset)
        outcomes.append(outcome)
    return outcomes


def _planned_bytes(store, base: str, dataset: str) -> int:
    """Bytes of the files a dataset's current plan reads (0 without a plan)."""
    from nemotron_assets.core.records import read_manifest

    try:
        return read_manifest(store, base, dataset).total_bytes
    except (FileNotFoundError, ValueError):
        return 0


def _report(outcome, asset: str) -> None:
    span = f" {outcome.partitions[0]}...{outcome.partitions[-1]}" if outcome.partitions else ""
    status = f"ok in {outcome.seconds:.1f} s" if outcome.success else "FAILED (the error is shown at the end)"
    print(f"run {outcome.run_id[:8]} {asset}{span}: {status}", file=sys.stderr)


def _skipped_rows(instance, run_ids: list[str]) -> int:
    """Rows skipped (``on_error: skip``) by the shards these runs built, from their materialization metadata."""
    import dagster as dg

    total = 0
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            materialization = record.dagster_event.event_specific_data.materialization
            if materialization.asset_key.path[-1] not in SKIPPED_ROWS_ASSETS:
                continue
            metadata = {k: v.value for k, v in materialization.metadata.items()}
            if metadata.get("status") != "up to date":
                total += sum(int(n) for n in (metadata.get("dropped_by_reason") or {}).values())
    return total


def _failed_checks(instance, run_ids: list[str]) -> list[str]:
    """One line per asset check these runs evaluated as failed: asset, partition, check, what it found. A failed
    check does not fail its Dagster run, so without this the command would end "done" over a bad output."""
    import dagster as dg

    lines = []
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            evaluation = record.dagster_event.event_specific_data
            if evaluation.passed:
                continue
            metadata = {k: v.value for k, v in evaluation.metadata.items()}
            found = f": {metadata['first']}" if metadata.get("first") else ""
            partition = f" {evaluation.partition}" if evaluation.partition else ""
            lines.append(f"{evaluation.asset_key.to_user_string()}{partition} {evaluation.check_name}{found}")
    return lines


def _selection(select: str | None, partition: str | None) -> list[str]:
    if select is None:
        chosen = ["source_split", "pretrain_shard", "harmony_shard", "jsonl_shard"] if partition else list(ASSET_NAMES)
        return [name for name in ASSET_NAMES if name in chosen]
    chosen = [s.strip().split("/")[-1] for s in select.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in ASSET_NAMES]
    if unknown:
        raise UsageError(f"unknown asset(s) {', '.join(unknown)}; choose from {', '.join(ASSET_NAMES)}")
    return [name for name in ASSET_NAMES if name in chosen]


def _partition_target(partition: str | None, blend) -> tuple[str | None, str | None]:
    """(dataset, shard key) named by --partition."""
    from nemotron_assets.core.layout import ShardKey

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


def _run_config(repo, keys: dict, args: argparse.Namespace, steps: list[str]) -> dict:
    """Config of the steps this command runs (an asset the blend does not have is left out)."""
    step_config = {"pretrain_shard": {"force": args.force, "tokenizer_backend": args.tokenizer_backend,
                                      "build_processes": _build_processes(args)},
                   "megatron_blend": {"allow_missing_shards": False}}
    step_config.update({step: {"force": args.force} for step in ("harmony_shard", "harmony_dedup", "candidate_pool",
                                                                 "embedding_view", "behavior_report", "jsonl_shard",
                                                                 "jsonl_manifest", "sft_samples", "sft_plan",
                                                                 "sft_packed", "sft_manifest", *SCORING_ASSETS)})
    ops = {repo.assets_defs_by_key[keys[step]].op.name: {"config": config} for step, config in step_config.items()
           if step in steps and keys[step] in repo.assets_defs_by_key}
    config = {"ops": ops, "execution": {"config": {args.executor: {}}}}
    if not args.dagster_logs:
        config["loggers"] = {"compact_console": {"config": {"log_level": args.log_level.upper()}}}
    else:
        config["loggers"] = {"console": {"config": {"log_level": args.log_level.upper()}}}
    return config


def _build_processes(args: argparse.Namespace) -> int:
    """``--build-processes``, else 0 (one per core) for one run at a time, else the cores shared among the runs."""
    if args.build_processes is not None:
        return args.build_processes
    jobs = args.jobs or 1
    return 0 if jobs == 1 else max(1, (os.cpu_count() or 1) // jobs)


def _run_tags(sample: str | None) -> dict:
    from nemotron_assets.core.instance import LAUNCHED_BY_TAG, SAMPLE_TAG

    return {LAUNCHED_BY_TAG: "cli", SAMPLE_TAG: sample or "full"}


# --- status and verify ------------------------------------------------------------------------------------
def show_status(args: argparse.Namespace) -> int:
    from nemotron_assets.cli.status_report import BlendStatus, collect_status, format_status, status_json
    from nemotron_assets.core.blend import load_blend_folder
    from nemotron_assets.core.instance import open_instance

    folder = load_blend_folder(settings.blends_dir())
    if args.blend is not None:
        chosen, broken = [folder.find(args.blend)], []
    else:
        chosen, broken = folder.blends, folder.broken
    store = _storage()
    instance = open_instance()
    with instance:
        reports = [collect_status(instance, store, blend) for _, blend in chosen]
    reports += [BlendStatus(bad.name, [], "", False, error=str(bad.error)) for bad in broken]
    orphans = store.orphaned_staging()
    if args.json:
        print(status_json(reports, orphans))
        return 0
    print("\n\n".join(format_status(r) for r in reports))
    if orphans:
        print(f"\n{len(orphans)} staging folder(s) left by killed runs ({sum(o.bytes for o in orphans):,} bytes), "
              f"removed by the next materialize: {', '.join(o.path for o in orphans[:5])}")
    return 0


def verify(args: argparse.Namespace) -> int:
    from nemotron_assets.cli.verify_report import collect_problems
    from nemotron_assets.core.blend import load_blend_folder
    from nemotron_assets.core.instance import open_instance

    _, blend = load_blend_folder(settings.blends_dir()).find(args.blend)
    with open_instance() as instance:
        problems = collect_problems(instance, _storage(), blend)
    for problem in problems:
        print(problem)
    print(f"{blend.name}: {len(problems)} problem(s)" if problems else f"{blend.name}: every output verified",
          file=sys.stderr)
    return 1 if problems else 0


def _storage():
    from nemotron_assets.core.storage import Storage

    return Storage(settings.data_root(), endpoint_url=settings.s3_endpoint_url())
