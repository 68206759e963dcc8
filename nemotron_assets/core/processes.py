"""Naming a process so that another process can later tell whether it is still alive.

Used for the leftovers of a process killed with ``kill -9``: staging folders (storage.py) and Dagster runs left
``STARTED`` by a killed CLI (instance.py). A token is ``<host>-<pid>-<start time>``: the start time (clock ticks since
boot, from ``/proc``) tells a reused pid apart from the process that wrote the token.
"""

import os
import socket
from pathlib import Path


def host_name() -> str:
    return socket.gethostname().replace("-", "_")


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22); "" without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces


def owner_token(pid: int | None = None) -> str:
    """``<host>-<pid>-<start>`` of this process (or ``pid``)."""
    pid = os.getpid() if pid is None else pid
    return f"{host_name()}-{pid}-{process_start(pid) or '0'}"


def owner_alive(token: str) -> bool | None:
    """Whether the process named by ``token`` still runs: None if it is another machine's (or not a token)."""
    parts = token.split("-")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    host, pid, started = parts[0], int(parts[1]), parts[2]
    if host != host_name():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by another user
    return started in ("0", process_start(pid))
