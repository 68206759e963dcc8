"""``export BLEND --hf DIR [--push REPO_ID] [--public]``: the blend's pools, packed SFT and JSONL as a Hugging Face
folder, through the asset ``<blend>/hf_export`` (defs/export/), and optionally pushed to the Hub.

One Dagster run, exactly ``dagster asset materialize --select <blend>/hf_export`` with the run config naming the
folder (``hf_dir``; without ``--hf`` the asset's default ``<root>/<blend>/hf/``). The outputs it exports must be up to
date: materialize the blend first. A folder that exists and is not an export of this blend is refused before the
run (exit 2). ``--push`` uploads the folder after a successful run (defs/export/push.py).
"""

import argparse
import sys
import time
from pathlib import Path

import dagster as dg

from nemotron_assets.cli import UsageError, storage
from nemotron_assets.cli.interrupts import EXIT_STATUS, Interrupted, Interrupts
from nemotron_assets.cli.materialize import console_level, report
from nemotron_assets.core import settings
from nemotron_assets.core.blend import load_blend_folder
from nemotron_assets.core.instance import LAUNCHED_BY_TAG, PROCESS_TAG, SAMPLE_TAG, open_instance
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.processes import owner_token
from nemotron_assets.core.runs import execute_assets, load_repository
from nemotron_assets.defs.export.pipeline import exports_something
from nemotron_assets.defs.export.step import check_claim, destination


def export(args: argparse.Namespace) -> int:
    started = time.monotonic()
    _, blend = load_blend_folder(settings.blends_dir()).find(args.blend)
    if not exports_something(blend):
        raise UsageError(f"blend {blend.name!r} has nothing to export: no candidate pool (curation:), packed SFT "
                         "(sft:) or JSONL dataset (transform:)")
    hf_dir = None if args.hf is None else (args.hf if args.hf.startswith("s3://") else str(Path(args.hf).resolve()))
    if args.push and (hf_dir or storage().root).startswith("s3://"):
        raise UsageError("--push uploads a local folder: give --hf a local folder")
    folder = destination(storage(), blend.name, hf_dir)
    check_claim(folder, blend.name)  # InputError (exit 2) before any run

    instance = open_instance(console_level=console_level(args))
    origin, repo = load_repository()
    asset_key = dg.AssetKey(Scope(blend.name).key("hf_export"))
    config = {"force": args.force or None, "hf_dir": hf_dir}
    run_config = {"ops": {repo.assets_defs_by_key[asset_key].op.name:
                          {"config": {name: value for name, value in config.items() if value is not None}}},
                  "loggers": {"compact_console": {"config": {"log_level": console_level(args)}}}}
    tags = {LAUNCHED_BY_TAG: "cli", SAMPLE_TAG: "full", PROCESS_TAG: owner_token()}
    with Interrupts() as interrupts:
        try:
            outcome = execute_assets(origin, repo, instance, [asset_key], None, run_config, tags)
            report(outcome.for_asset("hf_export"))
            interrupts.check()
            if not outcome.success:
                print(f"FAILED in {time.monotonic() - started:.1f} s\n\nerror in run {outcome.run_id} "
                      "(hf_export):\n" + "\n".join(f"  {line}" for line in outcome.error.splitlines()),
                      file=sys.stderr)
                return 1
            print(f"exported {blend.name} to {folder.root}", file=sys.stderr)
            if args.push and not push(folder.root, args.push, args.public, blend.name):
                return 1
        except (KeyboardInterrupt, Interrupted):
            print(f"interrupted by {interrupts.signalled or 'SIGINT'}: run the same command again to go on (the "
                  "folder is rebuilt only where it is not up to date; a push uploads only what the Hub lacks)",
                  file=sys.stderr)
            return EXIT_STATUS
    print(f"done in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


def push(folder: str, repo_id: str, public: bool, blend: str) -> bool:
    """Push the folder; False (the Hub's answer printed) when the Hub refused."""
    from huggingface_hub.errors import HfHubHTTPError

    from nemotron_assets.defs.export.push import push_folder

    try:
        pushed = push_folder(Path(folder), repo_id, public=public, message=f"Export of blend {blend}")
    except (HfHubHTTPError, ValueError) as exc:  # ValueError: the Hub refused the card's metadata
        print(f"error: pushing {folder} to {repo_id} failed: {exc}", file=sys.stderr)
        return False
    print(f"pushed to {pushed.repo_url} ({'private' if pushed.private else 'public'}), commit {pushed.commit}",
          file=sys.stderr)
    return True
