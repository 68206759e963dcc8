"""Build the shards of one step run at the same time, each in a process forked from the step.

A shard built alone keeps ~1.55 of 2 cores busy: its reader thread holds the GIL while it parses JSON into Python
strings, and the tokenizing threads wait for it. Two shards in two processes have a GIL each. On the 1 GB bench input
(4 shards, 2 cores) building them two at a time in forked processes took 6.7-6.8 s against 8.1-8.2 s one after the
other in threads (bench/README.md). The processes are forked after the step has loaded the tokenizer, so none of
them parses it again.

The step stays in charge of everything that is not the build: deciding which shards are up to date (before any
fork), committing each finished shard, writing its receipt, logging, and reporting to Dagster, in partition order.
A forked build only reads its source files and writes into its own staging folder (``shard_step.build_staged``);
what it logs comes back through a pipe and is logged by the step.

Used only where forking is safe and pays: a system with ``fork``, at least two shards to build, two processes
allowed (by default one per core), and source files on local disk (an S3 client copied by the fork is not used in
the child; such shards are built in the step, one after the other).
"""

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.blend import Blend
from nemotron_assets.forked_calls import ForkedCalls, Report, fork_available
from nemotron_assets.layout import ShardKey
from nemotron_assets.pretrain.shard_step import (
    PlannedBuild,
    ShardOutcome,
    build_planned,
    build_staged,
    commit_shard,
    plan_shard,
)
from nemotron_assets.records import SourceManifest
from nemotron_assets.sources.files import is_remote
from nemotron_assets.storage import Storage, locate_os_errors
from nemotron_assets.tokenize.documents import LoadedTokenizer

#: A bound on memory (each process holds a shard's batches in flight and its own tokenizer caches), not a measured
#: optimum: only 2 cores were available to measure on.
MAX_BUILD_PROCESSES = 8


@dataclass(frozen=True)
class ShardTarget:
    """One partition of the run: which shard of which dataset, under which folder (the blend's, or a sample's)."""

    partition: str
    manifest: SourceManifest
    key: ShardKey
    base: str


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def build_processes(requested: int) -> int:
    """How many shards to build at once: ``requested`` (0: one per usable core), at most ``MAX_BUILD_PROCESSES``;
    1 (build in the step) when fork is not available. ``ShardRun`` forks no more processes than it has shards."""
    return max(1, min(requested or usable_cores(), MAX_BUILD_PROCESSES)) if fork_available() else 1


def forkable(target: ShardTarget) -> bool:
    """Whether the shard's sources are local files (a forked build must not use a copied S3 client)."""
    return not any(is_remote(target.manifest.files[r.file_index].url)
                   for r in target.manifest.shards[target.key.index].ranges)


class ShardRun:
    """The shards of one step run: ``plan`` them all, then take each one's ``outcome`` in partition order.

    ``plan`` decides which shards are up to date (before any fork). When at least two must be built and
    ``processes`` > 1, the buildable ones whose sources are local start at once in forked processes, ``processes`` at
    a time; ``outcome(partition)`` then waits for that shard's build and commits it. Any other shard is built by
    ``outcome`` itself, in the step, as ``shard_step.materialize_shard`` does. An error of one shard (planning,
    building or committing) is raised by its own ``outcome`` and by no other. Leaving the context kills the
    builds still running and removes their staging folders."""

    def __init__(self, storage: Storage, blend: Blend, tokenizer: LoadedTokenizer, processes: int,
                 log: Callable[[str], None], force: bool = False) -> None:
        self.storage, self.blend, self.tokenizer, self.force, self.log = storage, blend, tokenizer, force, log
        self.processes = processes
        self._calls: ForkedCalls | None = None  # the forked builds, once planned
        self._planned: dict[str, tuple[ShardTarget, ShardOutcome | PlannedBuild | BaseException]] = {}
        self._staging: dict[str, tuple[contextlib.ExitStack, Path]] = {}  # the forked builds' folders

    def __enter__(self) -> "ShardRun":
        return self

    def __exit__(self, *exc_info) -> None:
        if self._calls is not None:
            self._calls.close()
        for stack, _ in self._staging.values():
            stack.close()
        self._staging.clear()

    def plan(self, targets: list[ShardTarget]) -> None:
        for target in targets:
            try:
                planned = plan_shard(self.storage, self.blend, target.manifest, target.key, self.tokenizer,
                                     self.force, self.log, target.base)
            except Exception as exc:  # noqa: BLE001 - raised by this shard's outcome, where it is reported
                planned = exc
            self._planned[target.partition] = (target, planned)
        builds = [target for target, planned in self._planned.values() if isinstance(planned, PlannedBuild)]
        if self.processes < 2 or len(builds) < 2:
            return
        forked = list(filter(forkable, builds))
        if not forked:
            return
        processes = min(self.processes, len(forked))
        threads = max(1, usable_cores() // processes)  # the cores are shared among the processes
        calls = {}
        for target in forked:
            stack = contextlib.ExitStack()
            folder = stack.enter_context(self.storage.staging())
            self._staging[target.partition] = (stack, folder)
            calls[target.partition] = self._build_call(target, folder, threads)
        self.log(f"building {len(calls)} shard(s) in {processes} processes forked from this step, "
                 f"{threads} tokenizing thread(s) each")
        self._calls = ForkedCalls(calls, processes, on_message=lambda _, message: self.log(message))

    def outcome(self, partition: str) -> ShardOutcome:
        target, planned = self._planned.pop(partition)
        if isinstance(planned, BaseException):
            raise planned
        if isinstance(planned, ShardOutcome):
            return planned
        if partition not in self._staging:
            return build_planned(self.storage, self.blend, target.manifest, planned, self.tokenizer, self.log)
        stack, folder = self._staging.pop(partition)
        with stack:
            with locate_os_errors(folder):
                stats, read = self._calls.result(partition)
            return commit_shard(self.storage, self.blend, target.manifest, planned, self.tokenizer, folder, stats,
                                read, self.log)

    def _build_call(self, target: ShardTarget, folder: Path, threads: int) -> Callable[[Report], tuple]:
        def build(report: Report) -> tuple:
            return build_staged(self.blend, target.manifest, target.key, self.tokenizer, folder, report,
                                threads=threads)
        return build
