"""Helpers for the UI end-to-end test: a real Dagster webserver (+ daemon) on loopback, its GraphQL endpoint,
and reading the asset graph out of the page's SVG."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class DagsterUI:
    url: str
    logs: dict[str, Path]
    start_daemon: Callable[[], None] = lambda: None  # starts ``dagster-daemon run`` if it is not running yet

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(f"{self.url}/graphql", method="POST",
                                         data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read())
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def run_status(self, run_id: str) -> str:
        data = self.graphql("query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }",
                            {"id": run_id})["runOrError"]
        return data.get("status", data["__typename"])

    def wait_for_run(self, run_id: str, timeout: float = 120) -> str:
        """Poll the run's status until it ends; return the final status (SUCCESS, FAILURE, CANCELED)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.run_status(run_id)
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still {status} after {timeout:.0f} s")
            time.sleep(0.5)

    def launch_backfill(self, asset: list[str], partitions: list[str]) -> str:
        """What the UI's "Launch backfill" sends for these partitions of one asset; the backfill's id."""
        data = self.graphql("""mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams:
            $params) { __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
                            {"params": {"assetSelection": [{"path": asset}], "partitionNames": partitions}})
        result = data["launchPartitionBackfill"]
        if "backfillId" not in result:
            raise AssertionError(f"backfill not launched: {result}")
        return result["backfillId"]

    def wait_for_backfill_runs(self, backfill_id: str, timeout: float = 180) -> list[dict]:
        """Poll until the backfill has made its runs and each has ended; those runs. The backfill's own status turns
        COMPLETED only at the daemon's next backfill loop, 30 s later (a fixed interval): the runs are what a user
        waits for."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs(("dagster/backfill", backfill_id))
            if runs and all(run["status"] in ("SUCCESS", "FAILURE", "CANCELED") for run in runs):
                return runs
            if time.monotonic() > deadline:
                raise AssertionError(f"backfill {backfill_id}: runs {runs} after {timeout:.0f} s\n{self.log_tails()}")
            time.sleep(1)

    def runs(self, tag: tuple[str, str] | None = None) -> list[dict]:
        """Every run (or those with one tag): id, status, asset selection."""
        filters = {"tags": [{"key": tag[0], "value": tag[1]}]} if tag else {}
        data = self.graphql("""query($filter: RunsFilter) { runsOrError(filter: $filter) { ... on Runs { results {
            runId status assetSelection { path } } } } }""", {"filter": filters})
        return data["runsOrError"]["results"]

    def run_messages(self, run_id: str) -> list[str]:
        """The messages a run's steps logged (its event log, as the run page shows it)."""
        data = self.graphql("""query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
            ... on MessageEvent { message } } } } }""", {"id": run_id})
        return [event.get("message", "") for event in data["logsForRun"]["events"]]

    def log_tails(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name} ---\n{path.read_text(errors='replace')[-chars:]}"
                         for name, path in self.logs.items() if path.exists())


def _stop(process: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the process we started; if it lingers, kill its own process group (started with setsid)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def dagster_ui(repo: Path, env: dict[str, str], log_dir: Path, daemon: bool = True,
               startup_timeout: float = 60) -> Iterator[DagsterUI]:
    """``dagster-webserver -h 127.0.0.1 -p PORT -w workspace.yaml`` and ``dagster-daemon run`` (which dequeues the
    runs the UI launches: the instance's ``concurrency.runs`` means a QueuedRunCoordinator) until exit. With
    ``daemon=False`` the daemon starts at ``ui.start_daemon()``: a backfill requested before it starts is taken by
    its first loop, instead of waiting up to the backfill daemon's fixed 30 s interval."""
    port = free_port()
    bin_dir = Path(sys.executable).parent
    workspace = str(repo / "workspace.yaml")
    commands = {"webserver": [str(bin_dir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w", workspace],
                "daemon": [str(bin_dir / "dagster-daemon"), "run", "-w", workspace]}
    logs = {name: log_dir / f"{name}.log" for name in commands}
    processes: dict[str, subprocess.Popen] = {}

    def start(name: str) -> None:
        if name in processes:
            return
        with open(logs[name], "wb") as log:
            processes[name] = subprocess.Popen(commands[name], cwd=repo, env=env, stdout=log,
                                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)

    ui = DagsterUI(f"http://127.0.0.1:{port}", logs, start_daemon=lambda: start("daemon"))
    try:
        start("webserver")
        if daemon:
            start("daemon")
        deadline = time.monotonic() + startup_timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"{ui.url}/server_info", timeout=2) as response:
                    if response.status == 200 and "dagster_webserver_version" in json.loads(response.read()):
                        break
            dead = [name for name, p in processes.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"dagster UI not up on port {port} (exited: {dead})\n{ui.log_tails()}")
            time.sleep(0.25)
        yield ui
    finally:
        for process in processes.values():
            _stop(process)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def graph_edges(nodes: dict[str, dict], paths: list[str], tolerance: float = 12) -> set[tuple[str, str]]:
    """Edges of the rendered asset graph as (upstream, downstream) names.

    ``nodes``: name -> the node's ``<foreignObject>`` box (x, y, width, height) in SVG coordinates; ``paths``:
    the ``d`` attribute of each edge ``<path>``. An edge starts on one node's right side and ends (arrowhead
    included) at another node's left side, in the left-to-right layout Dagster uses."""
    edges = set()
    for d in paths:
        numbers = [float(n) for n in _NUMBER.findall(d)]
        if len(numbers) < 4:
            continue
        (x1, y1), (x2, y2) = numbers[:2], numbers[-2:]
        source = [n for n, b in nodes.items() if abs(b["x"] + b["width"] - x1) <= tolerance
                  and b["y"] <= y1 <= b["y"] + b["height"]]
        target = [n for n, b in nodes.items() if abs(b["x"] - x2) <= tolerance and b["y"] <= y2 <= b["y"] + b["height"]]
        if len(source) == 1 and len(target) == 1:
            edges.add((source[0], target[0]))
    return edges
