#!/usr/bin/env python3
"""The cost of Dagster itself: a backfill of many shards through the real paths, wall time vs the shards' compute.

    .venv/bin/python bench/bench_orchestration.py [--shards 64] [--rows-per-shard 200] [--shards-per-run 16]
        [--tokenizer-backend auto|hf] [--paths cli,daemon] [--json-out FILE]

A generated blend in a temp folder (one dataset, ``num_shards: N`` over generated JSONL of random words), a
temp ``DAGSTER_HOME`` (sqlite) and data root. The source split runs first (not timed); then the shard
backfill, timed, through

- ``cli``: ``python -m nemotron_assets materialize bench --select pretrain_shard`` (runs of up to
  ``--shards-per-run`` shards, one after another, in-process executor), process start-up included;
- ``daemon``: ``dagster-daemon run`` against a workspace on the code location, and an asset backfill of every
  shard partition added to the instance (what the UI's "Materialize all" launches); the daemon splits it
  by the asset's ``BackfillPolicy.multi_run(16)`` and launches each run in its own process (multiprocess
  executor). Timed from submitting the backfill to its completion; the daemon is started before.

Compute = the sum of the ``seconds`` metadata of the shard materializations (time spent inside
``materialize_shard``: read, tokenize, write, commit). Overhead = wall - compute, as a share of wall; it is
split into the shard checks' steps (our code re-reading every output file after each run) and everything
else (process start-up, queues, daemon ticks, events: Dagster's cost). Shards run one at a time in both
paths (``max_concurrent_runs: 1`` for the daemon), so the two are comparable.
``--rows-per-shard`` sets the compute per shard (each row ~ 1,000 random words); ``--tokenizer-backend hf``
is ~40x slower per token than fastokens, which makes ≥ 30 s shards with less generated text.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLEND = "bench"
WORDS_PER_ROW = 1000


def make_blend(work: Path, shards: int, rows_per_shard: int) -> Path:
    """blends/bench.yaml over ``shards`` identical JSONL files of ``rows_per_shard`` rows, one file per shard.

    The files are hard links of one generated file: every shard reads and tokenizes its own file as usual,
    but 64 shards of >= 30 s need ~17 GB of text, which would take longer to write than to tokenize.
    """
    rng = random.Random(0)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                  for _ in range(5000)]
    blends = work / "blends"
    corpus = blends / "corpus"
    corpus.mkdir(parents=True)
    first = corpus / "part_00000.jsonl"
    with open(first, "w") as f:
        for _ in range(rows_per_shard):
            f.write(json.dumps({"text": " ".join(rng.choices(vocabulary, k=WORDS_PER_ROW))}) + "\n")
    for index in range(1, shards):
        os.link(first, corpus / f"part_{index:05d}.jsonl")
    (blends / f"{BLEND}.yaml").write_text(json.dumps({
        "tokenizer_model": "llama3", "add_eos": True,
        "train": [{"name": "corpus", "path": "corpus/*.jsonl", "num_shards": shards}]}))
    return blends


def make_home(work: Path, name: str, concurrent_runs: int = 1) -> Path:
    """A fresh DAGSTER_HOME with the repository's dagster_home/dagster.yaml, runs limited to ``concurrent_runs``."""
    home = work / name
    (home / ".nux").mkdir(parents=True)
    shipped = (REPO / "dagster_home" / "dagster.yaml").read_text()
    limited, found = re.subn(r"max_concurrent_runs: \d+", f"max_concurrent_runs: {concurrent_runs}", shipped)
    if not found:
        raise SystemExit("dagster_home/dagster.yaml has no concurrency.runs.max_concurrent_runs to override")
    (home / "dagster.yaml").write_text(limited)
    return home


def environment(blends: Path, home: Path, data: Path) -> dict:
    return dict(os.environ, NEMOTRON_BLENDS_DIR=str(blends), DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(data),
                HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))


def cli(env: dict, *args: str) -> float:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", BLEND, *args,
                             "--log-level", "WARNING"], env=env, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"materialize {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    return time.monotonic() - started


def shard_report(env: dict) -> dict:
    """Runs of the shard asset and the compute seconds of its materializations, read from the instance."""
    code = """
import json, dagster as dg
key = dg.AssetKey(["bench", "pretrain_shard"])
with dg.DagsterInstance.get() as instance:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=10000).records
    records = [r for r in records if "seconds" in r.asset_materialization.metadata]  # not the run summaries
    runs = {r.run_id for r in records}
    seconds = [r.asset_materialization.metadata["seconds"].value for r in records]
    statuses = [r.asset_materialization.metadata["status"].value for r in records]
    tokens = sum(r.asset_materialization.metadata["tokens"].value for r in records)
    run_records = instance.get_run_records(dg.RunsFilter(run_ids=list(runs)))
    starts = [r.start_time for r in run_records if r.start_time]
    ends = [r.end_time for r in run_records if r.end_time]
    check_seconds = 0.0  # the shard checks' step: our code re-reading every file, not Dagster's cost
    for run_id in runs:
        started = {}
        for event in instance.all_logs(run_id):
            step, kind = event.step_key, event.dagster_event_type
            if not step or not step.endswith("_checks"):
                continue
            if kind == dg.DagsterEventType.STEP_START:
                started[step] = event.timestamp
            elif kind == dg.DagsterEventType.STEP_SUCCESS:
                check_seconds += event.timestamp - started.pop(step)
    print(json.dumps({"runs": len(runs), "shards": len(records), "compute_s": sum(seconds),
                      "max_shard_s": max(seconds), "min_shard_s": min(seconds), "tokens": tokens,
                      "built": statuses.count("built"),
                      "first_run_start": min(starts), "last_run_end": max(ends), "checks_s": check_seconds}))
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"reading the instance failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cli(work: Path, blends: Path, args) -> dict:
    env = environment(blends, make_home(work, "home_cli"), work / "data_cli")
    cli(env, "--select", "source_split")
    wall = cli(env, "--select", "pretrain_shard", "--shards-per-run", str(args.shards_per_run),
               "--tokenizer-backend", args.tokenizer_backend)
    return {"path": "cli", "wall_s": wall, **shard_report(env)}


SUBMIT = """
import json, sys, time, uuid, dagster as dg
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from nemotron_assets.core.runs import load_repository
backend = sys.argv[1]
_, repo = load_repository()
key = dg.AssetKey(["bench", "pretrain_shard"])
op = repo.assets_defs_by_key[key].op.name
with dg.DagsterInstance.get() as instance:
    partitions = instance.get_dynamic_partitions("bench__pretrain_shards")
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=uuid.uuid4().hex[:8], asset_graph=repo.asset_graph, partition_names=partitions,
        asset_selection=[key], backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance,
        all_partitions=False, title="bench", description=None,
        run_config={"ops": {op: {"config": {"tokenizer_backend": backend}}}})
    submitted, started = time.time(), time.monotonic()
    instance.add_backfill(backfill)
    while True:
        status = instance.get_backfill(backfill.backfill_id).status
        if status != BulkActionStatus.REQUESTED:
            break
        time.sleep(0.2)
    print(json.dumps({"wall_s": time.monotonic() - started, "status": str(status), "submitted": submitted,
                      "finished": time.time()}))
"""


def run_daemon(work: Path, blends: Path, args) -> dict:
    home = make_home(work, "home_daemon")
    env = environment(blends, home, work / "data_daemon")
    cli(env, "--select", "source_split")
    workspace = work / "workspace.yaml"
    workspace.write_text(f"load_from:\n  - python_module:\n      module_name: nemotron_assets.definitions\n"
                         f"      working_directory: {REPO}\n")
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(workspace)],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(args.daemon_warmup)
        out = subprocess.run([sys.executable, "-c", SUBMIT, args.tokenizer_backend], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=args.timeout)
        if out.returncode != 0:
            raise SystemExit(f"daemon backfill failed:\n{out.stderr[-4000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()
    report = shard_report(env)
    # The backfill daemon wakes every 30 s (fixed in Dagster): it creates the runs at its next tick after the
    # submission, and marks the backfill done at its next tick after the last run.
    report["before_first_run_s"] = report["first_run_start"] - result["submitted"]
    report["after_last_run_s"] = result["finished"] - report["last_run_end"]
    return {"path": "daemon", **result, **report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--rows-per-shard", type=int, default=20, help="compute per shard (~1,000 words a row)")
    parser.add_argument("--shards-per-run", type=int, default=16, help="CLI path only; the daemon uses the policy")
    parser.add_argument("--tokenizer-backend", choices=("auto", "hf", "fastokens"), default="auto")
    parser.add_argument("--paths", default="cli,daemon", help="comma-separated: cli, daemon")
    parser.add_argument("--daemon-warmup", type=float, default=10.0, help="seconds to let the daemon start")
    parser.add_argument("--timeout", type=float, default=7200.0)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--keep-outputs", action="store_true", help="keep each path's data folder")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nemotron-orch-"))
    blends = make_blend(work, args.shards, args.rows_per_shard)
    megabytes = args.shards * (blends / "corpus" / "part_00000.jsonl").stat().st_size / 1e6
    print(f"work folder {work}: {args.shards} shards x {args.rows_per_shard} rows ({megabytes:.0f} MB), "
          f"backend {args.tokenizer_backend}")
    runners = {"cli": run_cli, "daemon": run_daemon}
    results = []
    for path in args.paths.split(","):
        result = runners[path](work, blends, args)
        if not args.keep_outputs:  # 64 shards of >= 30 s write 32 GB of .bin per path
            shutil.rmtree(work / f"data_{path}", ignore_errors=True)
        result["overhead_s"] = result["wall_s"] - result["compute_s"]
        result["overhead_pct"] = 100 * result["overhead_s"] / result["wall_s"]
        result["dagster_s"] = result["overhead_s"] - result["checks_s"]
        result["dagster_pct"] = 100 * result["dagster_s"] / result["wall_s"]
        result["shards_per_run"] = result["shards"] / result["runs"]
        results.append(result)
        print(f"{path:7} wall {result['wall_s']:8.1f} s  compute {result['compute_s']:8.1f} s "
              f"(shard {result['min_shard_s']:.1f}-{result['max_shard_s']:.1f} s)  "
              f"overhead {result['overhead_s']:6.1f} s "
              f"= {result['overhead_pct']:5.1f} %  runs {result['runs']} for {result['shards']} shards "
              f"({result['shards_per_run']:.0f} shards/run)  built {result['built']}  tokens {result['tokens']:,}",
              flush=True)
        print(f"        of the overhead: {result['checks_s']:.1f} s in the shard checks' steps (re-reading every "
              f"output), {result['dagster_s']:.1f} s = {result['dagster_pct']:.1f} % everything else", flush=True)
        if path == "daemon":
            print(f"        of the overhead: {result['before_first_run_s']:.1f} s from submission to the first run's "
                  f"start, {result['after_last_run_s']:.1f} s from the last run's end to the backfill's completion",
                  flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
