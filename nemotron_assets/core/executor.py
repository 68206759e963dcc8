"""The code location's executor: Dagster's multiprocess executor, with step processes forked from a warm server.

Every run the UI, a schedule, a sensor or a backfill launches executes its steps (a shard batch, then its
checks) in separate processes. Dagster's default start method for them is ``spawn``: each step process
starts a fresh interpreter and imports dagster and our definitions again, ~2.5-3 s per step on a 2-core
machine, twice per shard run. With ``forkserver`` Dagster preloads the code location's module
(``nemotron_assets.definitions``) once per run in a fork server and forks each step process from it: the
first step still waits for the server's imports, every later one starts in less than half the time (measured
in bench/README.md). Nothing else changes: same executor, same steps, same isolation between steps.

The run config can still choose ``in_process`` (our CLI does) or set any multiprocess option, including
another ``start_method``; only a multiprocess run that names no start method gets ``forkserver``.
"""

from typing import Any

import dagster as dg


def _forkserver_unless_chosen(config: dict[str, Any]) -> dict[str, Any]:
    if "multiprocess" not in config:
        return config
    multiprocess = dict(config["multiprocess"])
    if not multiprocess.get("start_method"):
        multiprocess["start_method"] = {"forkserver": {}}
    return {"multiprocess": multiprocess}


executor = dg.multi_or_in_process_executor.configured(
    _forkserver_unless_chosen,
    config_schema=dg.multi_or_in_process_executor.config_schema,
    name="multi_or_in_process_forkserver",
)
