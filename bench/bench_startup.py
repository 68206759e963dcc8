#!/usr/bin/env python3
"""Start-up: what a user pays before any work, this checkout against an older one, alternating, in one invocation.

    .venv/bin/python bench/bench_startup.py --before /path/to/old/checkout [--runs 5]

Three measurements, each a fresh process, as a user types them:

- **definitions import:** ``python -c "import nemotron_assets.definitions"`` (what every ``dagster`` command and
  the code server load first);
- **a trivial command:** ``dagster asset materialize -m nemotron_assets.definitions --select sample/megatron_blend``
  on the bundled sample blend, already built (the step finds its shards done and writes, or keeps, two small
  files), with the default executor and the sqlite instance;
- **the sample blend from scratch:** ``python -m nemotron_assets materialize sample`` in a fresh Dagster home and
  data root, the first build of ``make demo`` (three runs: the source splits, 7 small shards, ``blend.json``);
- **the post-training sample**, ``python -m nemotron_assets materialize posttrain_sample``, from scratch (as above)
  and up to date (ten runs, each step finding its outputs done): mostly the runs themselves, and the events they
  record in the instance.

Each checkout builds both blends once beforehand (not timed), in its own Dagster home (its own
``dagster_home/dagster.yaml``) and data root. Prints the
range of each measurement and the ratio before / now (> 1: now is faster).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def environment(code: Path, work: Path) -> dict:
    home = work / "home"
    if not home.exists():
        home.mkdir(parents=True)
        shutil.copy(code / "dagster_home" / "dagster.yaml", home / "dagster.yaml")  # each checkout's own instance
    return {**os.environ, "PYTHONPATH": str(code), "DAGSTER_HOME": str(home), "NEMOTRON_DATA_ROOT": str(work / "data"),
            "NEMOTRON_BLENDS_DIR": str(REPO / "blends"), "HF_HUB_OFFLINE": "1"}


def timed(cmd: list[str], env: dict, cwd: Path) -> float:
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="an older checkout of this repository")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    python, dagster = sys.executable, str(Path(sys.executable).parent / "dagster")
    sides = {"before": Path(args.before).resolve(), "now": REPO}
    work = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    commands = {
        "definitions import": [python, "-c", "import nemotron_assets.definitions"],
        "trivial dagster asset materialize": [dagster, "asset", "materialize", "-m", "nemotron_assets.definitions",
                                              "--select", "sample/megatron_blend"],
        "the sample blend from scratch": [python, "-m", "nemotron_assets", "materialize", "sample"],
        "the post-training sample from scratch": [python, "-m", "nemotron_assets", "materialize", "posttrain_sample"],
        "the post-training sample, up to date": [python, "-m", "nemotron_assets", "materialize", "posttrain_sample"],
    }
    fresh = {"the sample blend from scratch", "the post-training sample from scratch"}  # a new home and data root
    for side, code in sides.items():
        subprocess.run([python, "-m", "compileall", "-q", str(code / "nemotron_assets")], check=True)
        for blend in ("sample", "posttrain_sample"):
            timed([python, "-m", "nemotron_assets", "materialize", blend], environment(code, work / side), code)
    times = {(side, name): [] for side in sides for name in commands}
    for run in range(args.runs):
        for name, cmd in commands.items():
            for side, code in sides.items():
                place = work / f"{side}-fresh-{run}" if name in fresh else work / side
                times[side, name].append(timed(cmd, environment(code, place), code))
    for name in commands:
        before, now = times["before", name], times["now", name]
        ratios = sorted(b / n for b, n in zip(before, now))
        print(f"{name}: before {min(before):.2f}-{max(before):.2f} s, now {min(now):.2f}-{max(now):.2f} s, "
              f"before/now {ratios[0]:.2f}-{ratios[-1]:.2f} (median {ratios[len(ratios) // 2]:.2f})")
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
