"""Build the shards of one step run at the same time, each in a process of its own.

A shard built alone keeps ~1.55 of 2 cores busy: its reader thread holds the GIL while it parses JSON into Python
strings, and the tokenizing threads wait for it. Two shards in two processes have a GIL each. On the 1 GB bench input
(4 shards, 2 cores) building them two at a time in forked processes took 6.7-6.8 s against 8.1-8.2 s one after the
other in threads (bench/README.md).

The processes are forked from a process that has the tokenizer loaded, so none of them parses it again: from the
command's build host when the command started one (``materialize`` with one run at a time in its own process,
pretrain/build_host.py), else from the step, after it loaded the tokenizer.

The step stays in charge of everything that is not the build: deciding which shards are up to date (before any
fork), committing each finished shard, writing its receipt, logging, and reporting to Dagster, in partition order.
A forked build only reads its source files and writes into its own staging folder (``shard_step.build_staged``);
what it logs comes back through a pipe and is logged by the step.

Used only where forking is safe and pays: a system with ``fork``, two processes allowed (by default one per core),
source files on local disk (an S3 client copied by the fork is not used in the child; such shards are built in the
step, one after the other), and at least two shards to build, or one when the build host has the tokenizer (the
step would have to load it first).
"""

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import SourceManifest
from nemotron_assets.core.storage import Storage, locate_os_errors
from nemotron_assets.core.workers import ForkedCalls, Report, fork_available
from nemotron_assets.defs.pretrain.build_host import BuildHost, BuildRequest, HostedBuilds
from nemotron_assets.defs.pretrain.shard_step import (
    PlannedBuild,
    ShardOutcome,
    build_planned,
    build_staged,
    commit_shard,
    plan_shard,
)
from nemotron_assets.sources.files import is_remote
from nemotron_assets.tokenize.documents import LoadedTokenizer, TokenizerFacts

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

    ``plan`` decides which shards are up to date (before any fork), from the tokenizer's ``facts``. The buildable
    shards whose sources are local then start at once in forked processes, ``processes`` at a time (see the module's
    docstring for when); ``outcome(partition)`` waits for that shard's build and commits it. Any other shard is
    built by ``outcome`` itself, in the step, as ``shard_step.materialize_shard`` does, with the tokenizer
    ``load_tokenizer`` gives. An error of one shard (planning, building or committing) is raised by its own
    ``outcome`` and by no other. Leaving the context kills the builds still running and removes their staging
    folders."""

    def __init__(self, storage: Storage, blend: Blend, facts: TokenizerFacts,
                 load_tokenizer: Callable[[], LoadedTokenizer], processes: int, log: Callable[[str], None],
                 force: bool = False, host: BuildHost | None = None) -> None:
        self.storage, self.blend, self.facts, self.force, self.log = storage, blend, facts, force, log
        self.load_tokenizer, self.processes, self.host = load_tokenizer, processes, host
        self._calls: ForkedCalls | HostedBuilds | None = None  # the forked builds, once planned
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
                planned = plan_shard(self.storage, self.blend, target.manifest, target.key, self.facts, self.force,
                                     self.log, target.base)
            except Exception as exc:  # noqa: BLE001 - raised by this shard's outcome, where it is reported
                planned = exc
            self._planned[target.partition] = (target, planned)
        builds = [target for target, planned in self._planned.values() if isinstance(planned, PlannedBuild)]
        forked = list(filter(forkable, builds))
        if self.processes < 2 or not forked or (self.host is None and len(builds) < 2):
            return
        processes = min(self.processes, len(forked))
        threads = max(1, usable_cores() // processes)  # the cores are shared among the processes
        folders = {}
        for target in forked:
            stack = contextlib.ExitStack()
            folders[target.partition] = folder = stack.enter_context(self.storage.staging())
            self._staging[target.partition] = (stack, folder)
        if self.host is not None:
            requests = {t.partition: BuildRequest(self.blend, t.manifest, t.key, folders[t.partition], threads)
                        for t in forked}
            self._calls = self.host.builds(requests, processes, self._log_message)
            forked_from = "the build host"
        else:
            tokenizer = self.load_tokenizer()  # before the fork: every child shares this one
            calls = {t.partition: self._build_call(t, tokenizer, folders[t.partition], threads) for t in forked}
            self._calls = ForkedCalls(calls, processes, self._log_message)
            forked_from = "this step"
        self.log(f"building {len(forked)} shard(s) in {processes} process{'es' if processes > 1 else ''} forked "
                 f"from {forked_from}, {threads} tokenizing thread(s) each")

    def outcome(self, partition: str) -> ShardOutcome:
        target, planned = self._planned.pop(partition)
        if isinstance(planned, BaseException):
            raise planned
        if isinstance(planned, ShardOutcome):
            return planned
        if partition not in self._staging:
            return build_planned(self.storage, self.blend, target.manifest, planned, self.load_tokenizer(), self.log)
        stack, folder = self._staging.pop(partition)
        with stack:
            with locate_os_errors(folder):
                stats, read = self._calls.result(partition)
            return commit_shard(self.storage, self.blend, target.manifest, planned, self.facts, folder, stats, read,
                                self.log)

    def _log_message(self, _build: str, message: str) -> None:
        self.log(message)  # a forked build's progress line

    def _build_call(self, target: ShardTarget, tokenizer: LoadedTokenizer, folder: Path,
                    threads: int) -> Callable[[Report], tuple]:
        def build(report: Report) -> tuple:
            return build_staged(self.blend, target.manifest, target.key, tokenizer, folder, report, threads=threads)
        return build
