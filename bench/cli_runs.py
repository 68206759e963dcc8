"""Running ``python -m nemotron_assets materialize`` as a user does, and measuring it from the outside.

Shared by the post-training benches (``bench_normalize.py``, ``bench_posttrain.py``). Each run gets a fresh temp
``DAGSTER_HOME`` (the checkout's ``dagster_home/dagster.yaml``) and ``NEMOTRON_DATA_ROOT``. While it runs, the
process tree (the CLI, its fork server and worker processes) is sampled from ``/proc`` every ``SAMPLE_S``:

- peak RSS: the largest single process, over time;
- CPU seconds: per process, the last user + system time seen, summed over every process that appeared (a process
  that lives less than one sampling interval can be missed; the last interval of each process is not counted);
  a step's CPU is the growth of that sum over the step's time window;
- per-step wall time: the CLI prints ``run <id> <asset> <first>...<last>: ok in N s (steps M s)`` when a run
  ends; a step ends at its last run's line and starts at the line before it (the previous step's last), so a step's
  time includes starting its worker processes;
- the command's time split (`print_run`): start-up (until the first run starts: its line's time minus its N),
  each Dagster run's N, of which its steps' own work M (Dagster's step durations; a checkout older than the
  ``(steps M s)`` part shows none), and the rest (between runs, and the command's end).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_S = 0.2
TICKS = os.sysconf("SC_CLK_TCK")
RUN_LINE = re.compile(r"^run \S+ (?P<asset>[a-z_]+)(?: \S+)?: ok in (?P<seconds>[\d.]+) s"
                      r"(?: \(steps (?P<steps>[\d.]+) s\))?$")


@dataclass
class CliRun:
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    steps: dict[str, dict]  # asset -> {"wall_s", "run_s": [seconds of each run], "step_s": [...], "peak_rss_mb"}
    output: str
    data_root: Path | None = None  # kept outputs (``keep=True``), else None
    samples: list[tuple[float, int, float]] = field(default_factory=list)  # (s since start, largest RSS kB, CPU s)
    startup_s: float = 0.0  # until the first run started

    @property
    def runs_s(self) -> float:
        return sum(sum(step["run_s"]) for step in self.steps.values())

    @property
    def step_work_s(self) -> float:
        return sum(sum(step["step_s"]) for step in self.steps.values())


def _tree(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat[stat.rfind(")") + 2:].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, todo = [root], [root]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in parents.items() if parent == pid and child not in tree]
        tree += children
        todo += children
    return tree


def _rss_kb_and_cpu_ticks(pid: int) -> tuple[int, int] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rfind(")") + 2:].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]), ticks
    except (OSError, IndexError, ValueError):
        return None
    return 0, ticks


def run_cli(tree: Path, blends: Path, blend: str, extra: list[str], keep: bool = False) -> CliRun:
    """One ``materialize`` of ``blend`` (in the folder ``blends``) with ``tree``'s code, in a fresh instance and data
    root; raises ``SystemExit`` with the output's tail if it fails."""
    work = Path(tempfile.mkdtemp(prefix="nemotron-bench-cli-"))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(tree / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ, DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(work / "data"),
               NEMOTRON_BLENDS_DIR=str(blends), HF_HUB_OFFLINE="1", PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "nemotron_assets", "materialize", blend, *extra]
    started = time.monotonic()
    process = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ticks: dict[int, int] = {}
    samples: list[tuple[float, int, float]] = []

    def sample() -> None:
        while process.poll() is None:
            largest = 0
            for pid in _tree(process.pid):
                seen = _rss_kb_and_cpu_ticks(pid)
                if seen is not None:
                    largest = max(largest, seen[0])
                    ticks[pid] = max(ticks.get(pid, 0), seen[1])
            samples.append((time.monotonic() - started, largest, sum(ticks.values()) / TICKS))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines = [(time.monotonic() - started, line.rstrip("\n")) for line in process.stdout]
    process.wait()
    wall = time.monotonic() - started
    sampler.join()
    output = "\n".join(line for _, line in lines)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({process.returncode}):\n{output[-4000:]}")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    first_run = next(((at, float(m["seconds"])) for at, line in lines if (m := RUN_LINE.match(line))), (wall, 0.0))
    return CliRun(wall, sum(ticks.values()) / TICKS, max((kb for _, kb, _ in samples), default=0) / 1024,
                  step_times(lines, samples), output, work / "data" if keep else None, samples,
                  startup_s=first_run[0] - first_run[1])


def step_times(lines: list[tuple[float, str]], samples: list[tuple[float, int, float]]) -> dict[str, dict]:
    """Per asset, in the order the steps ran: wall seconds, each run's seconds, and from the samples in its time
    window the peak RSS (largest process) and the CPU seconds of the tree."""
    steps: dict[str, dict] = {}
    previous_end = 0.0
    for at, line in lines:
        match = RUN_LINE.match(line)
        if not match:
            continue
        step = steps.setdefault(match["asset"], {"start": previous_end, "end": at, "run_s": [], "step_s": []})
        step["end"] = at
        step["run_s"].append(float(match["seconds"]))
        if match["steps"] is not None:
            step["step_s"].append(float(match["steps"]))
        previous_end = at

    def cpu_at(moment: float) -> float:
        return max((cpu for t, _, cpu in samples if t <= moment), default=0.0)

    return {asset: {"wall_s": s["end"] - s["start"], "run_s": s["run_s"], "step_s": s["step_s"],
                    "cpu_s": cpu_at(s["end"]) - cpu_at(s["start"]),
                    "peak_rss_mb": max((kb for t, kb, _ in samples if s["start"] <= t <= s["end"]), default=0) / 1024}
            for asset, s in steps.items()}


def print_run(name: str, run: CliRun) -> None:
    print(f"\n{name}: wall {run.wall_s:.1f} s, CPU {run.cpu_s:.1f} s ({100 * run.cpu_s / run.wall_s:.0f} % of one "
          f"core), peak RSS (largest process) {run.peak_rss_mb:.0f} MB")
    print(f"  start-up {run.startup_s:.1f} s; {sum(len(s['run_s']) for s in run.steps.values())} Dagster run(s) "
          f"{run.runs_s:.1f} s, of which the steps' work {run.step_work_s:.1f} s; the rest "
          f"{run.wall_s - run.startup_s - run.runs_s:.1f} s")
    print(f"  {'step':16} {'wall s':>7} {'CPU s':>7} {'peak MB':>8}   runs (s) [steps' work (s)]")
    for asset, step in run.steps.items():
        work = f" [{', '.join(f'{s:.1f}' for s in step['step_s'])}]" if step["step_s"] else ""
        print(f"  {asset:16} {step['wall_s']:7.1f} {step['cpu_s']:7.1f} {step['peak_rss_mb']:8.0f}   "
              f"{', '.join(f'{s:.1f}' for s in step['run_s'])}{work}")
