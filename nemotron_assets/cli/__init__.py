"""``python -m nemotron_assets`` (also the ``nemotron-assets`` command).

    materialize BLEND [--select ASSETS] [--partition KEY] [--scale tiny|small|full | --max-rows N]
                      [--force] [--tokenizer-backend auto|hf|fastokens] [--shards-per-run N]
                      [--build-processes N] [--executor in_process|multiprocess] [--log-level LEVEL]
                      [--dagster-logs] [--json]
    status [BLEND] [--json]
    verify BLEND
    export BLEND [--hf DIR] [--push REPO_ID] [--public] [--force]

``materialize`` builds a whole blend, or the selected assets / one partition of it, as real Dagster runs in
the instance of ``DAGSTER_HOME`` (default: this checkout's ``dagster_home/``): each pipeline's steps in order (the
source splits plan the shards; the shards are built in runs of up to ``--shards-per-run``, each run building its
shards at the same time; then what each pipeline builds from them). These are the runs the documented ``dagster asset
materialize`` commands make, with the same run config unless an option here sets one (materialize.py).
``--scale`` and ``--max-rows`` build a *sample* under ``<root>/<blend>/samples/<sample>/`` through the sample twin
assets, never touching the full build. With ``NEMOTRON_DEPLOYMENT=cluster`` the runs are launched through the
instance's run launcher (Ray) instead of executed here. ``status`` shows per dataset the shards planned / done /
stale / failed / missing, tokens and rows, and every other output; ``verify`` re-checks every output's files and
checksums, printing one line per problem (file: why). ``materialize --json`` prints one JSON document on stdout,
whatever the exit status: what the runs made, per asset, in the words of ``status --json`` (cli/result.py); every
log line goes to stderr. ``export`` writes the blend's pools, packed SFT and JSONL as a folder
``datasets.load_dataset(DIR, config)`` reads, with a dataset card, and pushes it with ``--push``. Exit status: 0
success, 1 a run failed or verify found problems, 2 a bad blend or command line.
"""

import argparse
import atexit
import json
import os
import sys
import threading
from collections.abc import Callable

from nemotron_assets.core import settings


class UsageError(Exception):
    """A command line that cannot work; exit status 2 with the message."""


def run() -> None:
    """The command's entry point (``nemotron-assets`` and ``python -m nemotron_assets``): ``main``, then exit.

    Everything the command wrote was committed before ``main`` returned, so the exit does only what a command owes
    its caller: it waits for our threads, runs the ``atexit`` callbacks (logging's flush among them), flushes
    stdout and stderr, and ends the process with ``os._exit`` (status 1, and no traceback, when whoever read stdout
    left before the end). The interpreter's own teardown is skipped, for two
    reasons:
    - its full garbage collections over every object the imports and the work left behind took 0.35-0.4 s at the
      end of a pretraining build of 1 GB, about 3 % of the command (bench/README.md);
    - the C++ libraries loaded by then (Arrow with its thread pool and S3 client, jemalloc) destroy their static
      objects after the interpreter is gone, and under load that teardown sometimes aborted a finished command
      ("terminate called without an active exception", exit status -6) after it had printed its result."""
    try:
        code = main()
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()  # what the interpreter's exit would run first (there is no public name for it)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of stdout left early (``| head``): exit 1 quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the last flush cannot fail again
        code = 1
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from nemotron_assets.core.allocator import loading_for_good

    with loading_for_good():  # Dagster and the pipelines' modules: the process keeps them to its end
        from nemotron_assets.core.blend import UnknownBlend
        from nemotron_assets.core.instance import InstanceError
        from nemotron_assets.core.settings import DeploymentError
        from nemotron_assets.sources.errors import InputError

        command = _command(args.command)
    try:
        settings.deployment()  # an unknown NEMOTRON_DEPLOYMENT is an error for every command
        return command(args)
    except (InputError, UsageError, UnknownBlend, DeploymentError, InstanceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if getattr(args, "json", False) and args.command == "materialize":
            from nemotron_assets.cli.result import error_document

            print(json.dumps(error_document(args.blend, str(exc), 2), indent=1))
        return 2


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of command ``name``, with the modules it runs on imported."""
    if name == "materialize":
        from nemotron_assets.cli.materialize import materialize

        return materialize
    if name == "export":
        from nemotron_assets.cli.export import export

        return export
    import nemotron_assets.cli.reports  # noqa: F401 - what status and verify report with

    return show_status if name == "status" else verify


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nemotron-assets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    mat = commands.add_parser("materialize", help="materialize a blend (or part of it) through Dagster")
    mat.add_argument("blend", help="blend name (file stem in the blends folder)")
    mat.add_argument("--select", default=None,
                     help="comma-separated assets of the blend, e.g. source_split,pretrain_shard (default: all)")
    mat.add_argument("--partition", default=None,
                     help="a dataset name (its source split and shards) or a shard key like wiki/shard_00000")
    mat.add_argument("--scale", choices=("tiny", "small", "full"), default="full",
                     help="build a sample of <= 10,000 (tiny) or 1,000,000 (small) rows per dataset under "
                          "<root>/<blend>/samples/<scale>/; full (default) is the real build")
    mat.add_argument("--max-rows", type=int, default=None,
                     help="build a sample of the first N rows of each dataset under <root>/<blend>/samples/rows_N/")
    mat.add_argument("--force", action="store_true", help="rebuild outputs that are already up to date")
    mat.add_argument("--tokenizer-backend", choices=("auto", "hf", "fastokens"), default=None,
                     help="the pretraining shards' tokenizer backend (default auto: the fastest exact one)")
    mat.add_argument("--shards-per-run", type=int, default=None,
                     help="shard partitions per Dagster run (default 16); each run builds its shards at the same time")
    mat.add_argument("--build-processes", type=int, default=None,
                     help="shards of one run built at the same time, each in a process forked from the run's step "
                          "(1: one after the other). Default: one per core, at most 8")
    mat.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)  # gone: runs build in parallel
    mat.add_argument("--executor", choices=("in_process", "multiprocess"), default=None,
                     help="in_process (the default of every run): each run's steps in its process; multiprocess: "
                          "one process per step")
    mat.add_argument("--log-level", default=None,
                     help="console log level (default INFO; DEBUG with --dagster-logs, where the events are)")
    mat.add_argument("--dagster-logs", action="store_true", help="print Dagster's full event log instead of one "
                                                                  "line per message")
    mat.add_argument("--json", action="store_true", help="print one JSON document of what the runs made on stdout "
                                                         "(log lines stay on stderr)")
    stat = commands.add_parser("status", help="shards planned / done / stale / failed / missing, tokens, rows")
    stat.add_argument("blend", nargs="?", default=None, help="blend name (default: every blend)")
    stat.add_argument("--json", action="store_true", help="machine-readable output")
    ver = commands.add_parser("verify", help="re-check every output's files and checksums")
    ver.add_argument("blend", help="blend name (file stem in the blends folder)")
    exp = commands.add_parser("export", help="the blend's pools, packed SFT and JSONL as a Hugging Face dataset folder")
    exp.add_argument("blend", help="blend name (file stem in the blends folder)")
    exp.add_argument("--hf", default=None, metavar="DIR",
                     help="the folder to write (default <root>/<blend>/hf); if it exists it must be an export of "
                          "this blend")
    exp.add_argument("--push", default=None, metavar="REPO_ID", help="then create the Hub dataset repo and upload")
    exp.add_argument("--public", action="store_true", help="with --push: a public repo (default private)")
    exp.add_argument("--force", action="store_true", help="write the folder again even when it is up to date")
    exp.add_argument("--log-level", default=None, help="console log level (default INFO)")
    exp.add_argument("--dagster-logs", action="store_true", help=argparse.SUPPRESS)
    return parser


def show_status(args: argparse.Namespace) -> int:
    from nemotron_assets.cli.reports import format_status, status_json

    reports, orphans = collect_statuses(args.blend)
    if args.json:
        print(json.dumps(status_json(reports, orphans), indent=1))
        return 0
    print("\n\n".join(format_status(r) for r in reports))
    if orphans:
        print(f"\n{len(orphans)} staging folder(s) left by killed runs ({sum(o.bytes for o in orphans):,} bytes), "
              f"removed by the next materialize: {', '.join(o.path for o in orphans[:5])}")
    return 0


def collect_statuses(blend_name: str | None) -> tuple[list, list]:
    """The status of one blend (every blend, and the broken ones, when None), and the staging folders left by killed
    runs."""
    from nemotron_assets.cli.reports import BlendStatus, collect_status
    from nemotron_assets.core.blend import load_blend_folder
    from nemotron_assets.core.instance import open_instance

    folder = load_blend_folder(settings.blends_dir())
    if blend_name is not None:
        chosen, broken = [folder.find(blend_name)], []
    else:
        chosen, broken = folder.blends, folder.broken
    store = storage()
    with open_instance() as instance:
        reports = [collect_status(instance, store, blend, blend_file) for blend_file, blend in chosen]
    reports += [BlendStatus(bad.name, error=str(bad.error)) for bad in broken]
    return reports, store.orphaned_staging()


def verify(args: argparse.Namespace) -> int:
    name, problems, skipped = collect_verify_problems(args.blend)
    for problem in problems:
        print(problem)
    for problem in skipped:
        print(problem, file=sys.stderr)
    print(f"{name}: {len(problems)} problem(s)" if problems else f"{name}: every output verified", file=sys.stderr)
    return 1 if problems else 0


def collect_verify_problems(blend_name: str) -> tuple[str, list, list]:
    """(the blend's name, the problems ``verify`` finds, the outputs it skips and says so)."""
    from nemotron_assets.cli.reports import collect_problems
    from nemotron_assets.core.blend import load_blend_folder
    from nemotron_assets.core.instance import open_instance

    blend_file, blend = load_blend_folder(settings.blends_dir()).find(blend_name)
    with open_instance() as instance:
        found = collect_problems(instance, storage(), blend, blend_file)
    return (blend.name, [problem for problem in found if not problem.skipped],
            [problem for problem in found if problem.skipped])


def storage():
    from nemotron_assets.core.storage import Storage

    return Storage(settings.data_root(), endpoint_url=settings.s3_endpoint_url())
