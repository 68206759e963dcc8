"""Real servers for the cluster test, on loopback in a temp folder: Debian's PostgreSQL (initdb + pg_ctl) and a
Ray head (``ray start --head --block``). Each is stopped by the process id this module started, never by name:
``ray stop`` would stop every Ray node of the machine, including other sessions' heads."""

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nemotron_assets_tests.s3_server import free_port

POSTGRES_USER = "nemotron"
POSTGRES_PASSWORD = "cluster-test-secret"  # scram over TCP, so the URL's password is really used
POSTGRES_DB = "dagster"


def postgres_bin_dir() -> Path | None:
    """The folder of Debian's ``initdb``/``pg_ctl`` (``/usr/lib/postgresql/<version>/bin``), else one on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _as_server_user(args: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: as root, run them as the ``postgres`` user (``nobody`` if the
    Debian package did not create it) through ``runuser``."""
    if os.geteuid() != 0:
        return args
    try:
        pwd.getpwnam("postgres")
        user = "postgres"
    except KeyError:
        user = "nobody"
    return ["runuser", "-u", user, "--", *args]


def _server_owner() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam("postgres")
        return entry.pw_uid, entry.pw_gid
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _wait_for_port(port: int, process: subprocess.Popen | None, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start on 127.0.0.1:{port}")
        time.sleep(0.2)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh PostgreSQL cluster on a free loopback port with database ``dagster``; yields its
    ``postgresql+psycopg2://`` URL. The data folder lives in /tmp (pytest's tmp folders are private to root,
    and the server runs as ``postgres``) and is removed afterwards."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are missing: run .ci/install_system_deps.sh")
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="nemotron-pg-"))
    data, logfile, pwfile = root / "data", root / "server.log", root / "pwfile"
    pwfile.write_text(POSTGRES_PASSWORD + "\n")
    owner = _server_owner()
    if owner:
        for path in (root, pwfile):
            os.chown(path, *owner)
    root.chmod(0o700)
    try:
        subprocess.run(_as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-U", POSTGRES_USER,
                                        f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust",
                                        "-E", "UTF8", "--locale=C", "--no-sync"]),
                       check=True, capture_output=True, text=True, timeout=120)
        options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={root} -c fsync=off"
        subprocess.run(_as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(logfile),
                                        "-o", options, "-w", "-t", "60", "start"]),
                       check=True, capture_output=True, text=True, timeout=90)
        try:
            _wait_for_port(port, None, "PostgreSQL", 30)
            import psycopg2

            connection = psycopg2.connect(host="127.0.0.1", port=port, user=POSTGRES_USER,
                                          password=POSTGRES_PASSWORD, dbname="postgres")
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {POSTGRES_DB}")
            connection.close()
            yield f"postgresql+psycopg2://{POSTGRES_USER}:{POSTGRES_PASSWORD}@127.0.0.1:{port}/{POSTGRES_DB}"
        finally:
            subprocess.run(_as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                                            "stop"]), capture_output=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        log = logfile.read_text()[-2000:] if logfile.exists() else ""
        raise RuntimeError(f"{exc.cmd[-1] if exc.cmd else 'postgres'} failed: {exc.stderr}\n{log}") from exc
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def ray_head(env: dict[str, str], num_cpus: int = 2) -> Iterator[str]:
    """A single-node Ray head bound to 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` stops Ray 2.60 from
    replacing ``--node-ip-address 127.0.0.1`` with the machine's external address), usage stats off, every port
    picked free; yields the job-submission (dashboard) address. ``env`` is the nodes' environment: the Dagster
    settings must reach the run workers through the launcher's ``env_vars``, not through this."""
    ray = Path(sys.executable).with_name("ray")
    root = Path(tempfile.mkdtemp(prefix="nemotron-ray-"))  # short: Ray's unix socket paths must fit 107 bytes
    gcs, dashboard, client, agent = free_port(), free_port(), free_port(), free_port()
    node_env = dict(env, RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    node_env.pop("RAY_ADDRESS", None)
    log = (root / "ray-start.log").open("w")
    process = subprocess.Popen(
        [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--ray-client-server-port",
         str(client), "--dashboard-agent-listen-port", str(agent), "--disable-usage-stats",
         "--num-cpus", str(num_cpus), "--temp-dir", str(root / "t"), "--include-dashboard", "true"],
        cwd=root, env=node_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_for_dashboard(address, process, root, timeout=90)
        yield address
    finally:
        # SIGTERM to `ray start --block` makes it stop the processes of its own node; its process group (it was
        # started in a new session) catches what is left. Nothing else on the machine is touched.
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_dashboard(address: str, process: subprocess.Popen, root: Path, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{address}/api/version", timeout=2) as response:
                if response.status == 200:
                    # the job API is served by the dashboard's JobHead module, up a moment after /api/version
                    with urllib.request.urlopen(f"{address}/api/jobs/", timeout=5) as jobs:
                        if jobs.status == 200:
                            return
        if process.poll() is not None or time.monotonic() > deadline:
            log = (root / "ray-start.log").read_text()[-3000:]
            raise RuntimeError(f"the Ray head did not come up at {address}:\n{log}")
        time.sleep(0.5)
