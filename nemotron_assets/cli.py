"""``python -m nemotron_assets`` (also the ``nemotron-assets`` command).

    materialize BLEND [--select ASSETS] [--partition KEY] [--scale tiny|small|full] [--max-rows N]
                      [--force] [--tokenizer-backend auto|hf|fastokens] [--shards-per-run N]
    status [BLEND] [--json]
    verify BLEND

``materialize`` builds a whole blend, or the selected assets / one partition of it, as real Dagster runs in
the instance of ``DAGSTER_HOME`` (default: this checkout's ``dagster_home/``): first the source splits (they
plan the shards), then the shards in runs of up to ``--shards-per-run``, then the Megatron blend. With
``NEMOTRON_DEPLOYMENT=cluster`` the instance is ``deployments/cluster/`` (Postgres) and the runs are launched
through its run launcher (Ray) instead of executed here; the command waits for them and prints each outcome.
``status`` shows per dataset the shards planned / done / missing / failed, tokens, rows and where the files
are; ``verify`` re-checks every shard's files and checksums and blend.json, printing one line per problem
(file: why) and exiting 1 if there is any.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from nemotron_assets import settings

ASSET_NAMES = ("source_split", "pretrain_shard", "megatron_blend", "harmony_shard", "harmony_dedup",
               "candidate_pool", "embedding_view", "behavior_report")


def main(argv: list[str] | None = None) -> int:
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
                     help="rows per dataset: tiny <= 10,000, small <= 1,000,000, full = all (default)")
    mat.add_argument("--max-rows", type=int, default=None, help="row sample: first N rows of each dataset")
    mat.add_argument("--force", action="store_true", help="rebuild shards that are already up to date")
    mat.add_argument("--tokenizer-backend", choices=("auto", "hf", "fastokens"), default="auto")
    mat.add_argument("--shards-per-run", type=int, default=None,
                     help="partitions per Dagster run (default: the asset's backfill policy, 16)")
    mat.add_argument("--log-level", default="INFO", help="Dagster console log level (default INFO)")
    stat = commands.add_parser("status", help="shards planned / done / missing / failed, tokens, rows per dataset")
    stat.add_argument("blend", nargs="?", default=None, help="blend name (default: every blend)")
    stat.add_argument("--json", action="store_true", help="machine-readable output")
    ver = commands.add_parser("verify", help="re-check every shard's files and checksums, and blend.json")
    ver.add_argument("blend", help="blend name (file stem in the blends folder)")
    args = parser.parse_args(argv)
    from nemotron_assets.errors import InputError

    command = {"materialize": materialize, "status": show_status, "verify": verify}[args.command]
    try:
        return command(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _instance(*, launching: bool = False):
    import dagster as dg

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        home = str(settings.default_dagster_home())
        if settings.deployment() == "cluster":
            from nemotron_assets.cluster import check_environment

            check_environment(need_launcher=launching)
        os.environ["DAGSTER_HOME"] = home
        print(f"DAGSTER_HOME not set; using {home}", file=sys.stderr)
    if not Path(home).is_absolute() or not Path(home, "dagster.yaml").is_file():
        raise SystemExit(f"DAGSTER_HOME={home} must be an absolute path to a folder holding dagster.yaml")
    return dg.DagsterInstance.get()


def materialize(args: argparse.Namespace) -> int:
    import dagster as dg

    from nemotron_assets.assets.pretrain import SHARDS_PER_RUN
    from nemotron_assets.blend import discover_blends
    from nemotron_assets.layout import ShardKey, harmony_partitions_name, pretrain_partitions_name
    from nemotron_assets.posttrain.pools import POOL_NAMES
    from nemotron_assets.runner import contiguous_ranges, load_repository

    started = time.monotonic()
    cluster = settings.deployment() == "cluster"
    instance = _instance(launching=cluster)
    if cluster:
        from nemotron_assets.cluster import pin_data_root

        pin_data_root()
    origin, repo = load_repository()
    blend_name = args.blend
    keys = {name: dg.AssetKey([blend_name, name]) for name in ASSET_NAMES}
    if not repo.asset_graph.has(keys["source_split"]):
        blends = sorted({k.path[0] for k in repo.asset_graph.get_all_asset_keys()})
        raise SystemExit(f"no blend {blend_name!r} in {settings.blends_dir()} (blends: {', '.join(blends) or 'none'})")
    [blend] = [b for _, b in discover_blends(settings.blends_dir()) if b.name == blend_name]
    selected = _selection(args.select, args.partition)
    dataset, shard = _partition_target(args.partition, repo, keys)
    run_config = _run_config(repo, keys, args)
    per_run = args.shards_per_run or SHARDS_PER_RUN
    outcomes = []

    text_datasets = [e.name for e in blend.entries() if not e.family]
    family_datasets = [e.name for e in blend.entries() if e.family]

    def run(asset: str, partitions: list[str] | None) -> bool:
        return run_all(asset, [partitions])

    def run_all(asset: str, partition_runs: list[list[str] | None]) -> bool:
        new = _execute_runs(origin, repo, instance, keys[asset], asset, partition_runs, run_config, cluster)
        outcomes.extend(new)
        return all(o.success for o in new)

    def run_shards(asset: str, partitions_name: str) -> bool:
        """Every wanted shard partition, in runs of up to ``per_run`` contiguous keys."""
        all_shards = instance.get_dynamic_partitions(partitions_name)
        if shard:
            if shard not in all_shards:
                raise SystemExit(f"unknown shard {shard!r} of {blend_name}/{asset}: materialize "
                                 f"{blend_name}/source_split first (known: {', '.join(all_shards[:5]) or 'none'})")
            wanted = [shard]
        else:
            wanted = [k for k in all_shards if dataset is None or ShardKey.parse(k).dataset == dataset]
        if not wanted:
            raise SystemExit(f"no {asset} partitions for {blend_name}: materialize its source_split first")
        return run_all(asset, list(contiguous_ranges(all_shards, wanted, per_run)))

    steps = {
        "source_split": lambda: run("source_split", [dataset] if dataset else text_datasets + family_datasets),
        "pretrain_shard": lambda: run_shards("pretrain_shard", pretrain_partitions_name(blend_name)),
        "megatron_blend": lambda: run("megatron_blend", None),
        "harmony_shard": lambda: run_shards("harmony_shard", harmony_partitions_name(blend_name)),
        "harmony_dedup": lambda: run("harmony_dedup", [dataset] if dataset else family_datasets),
        "candidate_pool": lambda: run("candidate_pool", list(POOL_NAMES)),
        "embedding_view": lambda: run("embedding_view", list(POOL_NAMES)),
        "behavior_report": lambda: run("behavior_report", None),
    }
    applicable = {"pretrain_shard": text_datasets, "megatron_blend": text_datasets,
                  "harmony_shard": family_datasets, "harmony_dedup": family_datasets,
                  "candidate_pool": family_datasets, "embedding_view": family_datasets,
                  "behavior_report": family_datasets}
    if dataset is not None:  # a dataset's steps: only the path its kind takes
        applicable = {k: [d for d in v if d == dataset] for k, v in applicable.items()}
    for step in selected:
        if step in applicable and not applicable[step]:
            continue  # e.g. no family datasets: no Harmony path
        if not steps[step]():
            break
    ok = all(o.success for o in outcomes)
    print(f"{'done' if ok else 'FAILED'}: {len(outcomes)} run(s) in {time.monotonic() - started:.1f} s; "
          f"outputs under {settings.data_root()}/{blend_name}/", file=sys.stderr)
    return 0 if ok else 1


def _execute_runs(origin, repo, instance, asset_key, asset: str, partition_runs: list[list[str] | None],
                  run_config: dict, cluster: bool) -> list:
    """One run per partition range (``None``: unpartitioned): executed here one after the other, or with
    ``cluster`` all handed to the instance's run launcher (Ray) at once and waited for; each outcome printed."""
    from nemotron_assets.runner import execute_assets

    if cluster:
        from nemotron_assets.cluster import launch_assets, wait_for_runs

        launched = {launch_assets(origin, repo, instance, [asset_key], p, run_config): tuple(p or ())
                    for p in partition_runs}
        print(f"launched {len(launched)} {asset} run(s) through {type(instance.run_launcher).__name__}",
              file=sys.stderr)
        return wait_for_runs(instance, launched, on_finished=lambda o: _report(o, asset))
    outcomes = []
    for partitions in partition_runs:
        outcomes.append(execute_assets(origin, repo, instance, [asset_key], partitions, run_config))
        _report(outcomes[-1], asset)
    return outcomes


def show_status(args: argparse.Namespace) -> int:
    from nemotron_assets.status import collect_status, format_status, status_json

    blends = _blends(args.blend)
    with _instance() as instance:
        reports = [collect_status(instance, _storage(), blend) for _, blend in blends]
    print(status_json(reports) if args.json else "\n\n".join(format_status(r) for r in reports))
    return 0


def verify(args: argparse.Namespace) -> int:
    from nemotron_assets.status import collect_problems

    [(_, blend)] = _blends(args.blend)
    with _instance() as instance:
        problems = collect_problems(instance, _storage(), blend)
    for problem in problems:
        print(problem)
    print(f"{blend.name}: {len(problems)} problem(s)" if problems else f"{blend.name}: every output verified",
          file=sys.stderr)
    return 1 if problems else 0


def _blends(name: str | None) -> list:
    """(file, Blend) of the named blend, or of every blend when no name is given."""
    from nemotron_assets.blend import discover_blends

    blends = discover_blends(settings.blends_dir())
    if name is None:
        return blends
    chosen = [(path, blend) for path, blend in blends if blend.name == name]
    if not chosen:
        known = ", ".join(blend.name for _, blend in blends) or "none"
        raise SystemExit(f"no blend {name!r} in {settings.blends_dir()} (blends: {known})")
    return chosen


def _storage():
    from nemotron_assets.storage import Storage

    return Storage(settings.data_root(), endpoint_url=settings.s3_endpoint_url())


def _selection(select: str | None, partition: str | None) -> list[str]:
    if select is None:
        return ["source_split", "pretrain_shard", "harmony_shard"] if partition else list(ASSET_NAMES)
    chosen = [s.strip().split("/")[-1] for s in select.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in ASSET_NAMES]
    if unknown:
        raise SystemExit(f"unknown asset(s) {', '.join(unknown)}; choose from {', '.join(ASSET_NAMES)}")
    return [name for name in ASSET_NAMES if name in chosen]


def _partition_target(partition: str | None, repo, keys) -> tuple[str | None, str | None]:
    """(dataset, shard key) named by --partition."""
    from nemotron_assets.layout import ShardKey

    if partition is None:
        return None, None
    datasets = repo.assets_defs_by_key[keys["source_split"]].partitions_def.get_partition_keys()
    if "/" in partition:
        try:
            key = ShardKey.parse(partition)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        return key.dataset, partition
    if partition not in datasets:
        raise SystemExit(f"unknown dataset {partition!r}; the blend has {', '.join(datasets)}")
    return partition, None


def _run_config(repo, keys, args) -> dict:
    def op(name: str) -> str:
        return repo.assets_defs_by_key[keys[name]].op.name

    return {
        "ops": {
            op("source_split"): {"config": {"scale": args.scale, "max_rows": args.max_rows}},
            op("pretrain_shard"): {"config": {"force": args.force, "tokenizer_backend": args.tokenizer_backend}},
            op("megatron_blend"): {"config": {"allow_missing_shards": False}},
        },
        "execution": {"config": {"in_process": {}}},
        "loggers": {"console": {"config": {"log_level": args.log_level.upper()}}},
    }


def _report(outcome, what: str) -> None:
    span = f" {outcome.partitions[0]}...{outcome.partitions[-1]}" if outcome.partitions else ""
    status = f"ok in {outcome.seconds:.1f} s" if outcome.success else f"FAILED: {outcome.error}"
    print(f"run {outcome.run_id[:8]} {what}{span}: {status}", file=sys.stderr)
