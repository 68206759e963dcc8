"""How every step builds an output, or finds it up to date: one skeleton, written once.

    inputs -> up to date? -> stage -> delete the receipt -> commit -> receipt last

A step describes its output (`Output`: where its receipt lives and the inputs that decide its bytes) and writes its
files into a staging folder (`Staged`: the files, their counts); this module does the rest:

1. **Up to date?** An output written before the ``.receipts/`` and ``.meta/`` folders is first moved to today's
   places (core/upgrade.py), its bytes unchanged. ``records.freshness`` then compares the receipt with the inputs a
   build would use now. A ``done`` output is skipped ("up to date"), unless forced; anything else is built, and the
   log says why (`check`).
2. **Stage.** The build writes only into a private staging folder (``Storage.staging``): nothing a reader can see
   changes while it runs, and a failure leaves the previous version, or nothing.
3. **Delete the receipt.** From here on the output is "not done" for every reader (`commit`).
4. **Commit** each file in the order the build gave (an atomic rename locally, one PUT per object on S3), after
   deleting what an earlier build left that this one replaces or no longer writes (``Staged.delete_first``, and
   every file the earlier receipt lists that this build does not write: a shard of several text fields that lost
   one, or whose names changed with ``split_sentences``).
5. **Receipt last**, recording each committed file's size, sha256 and storage stamp.

A run of shards (`ShardRun`) does the same for each of its partitions, building those that must be built at the
same time, each in a process forked from the step (core/workers.py), and committing them here, in partition order.
So a run of several shards is parallel whoever launched it: the command line, the UI, a backfill, ``dagster asset
materialize``, a schedule, a sensor or a Ray worker.
"""

import contextlib
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import (
    NotReady,
    Receipt,
    freshness,
    output_path,
    rebuild_reason,
    receipt_path,
    require_manifest,
    stored_path,
    write_receipt,
)
from nemotron_assets.core.storage import Storage, StoredFile, locate_os_errors
from nemotron_assets.core.upgrade import upgrade
from nemotron_assets.core.workers import ForkedCalls, Report, build_processes, usable_cores
from nemotron_assets.sources.manifest import SourceManifest

Log = Callable[[str], None]


@dataclass(frozen=True)
class Output:
    """One output of a step: its receipt is ``<folder>/.receipts/<name>.json`` for the prefix ``<folder>/<name>``, its
    files lie beside it (records.py ``receipt_path``, ``output_path``)."""

    prefix: str
    inputs: dict  # everything that decides the files' bytes
    kind: str  # what was built: "pretrain_shard", "harmony_shard", ...
    key: str  # its name in the receipt and the log: a partition key, or the prefix
    extra: dict = field(default_factory=dict)  # informative receipt fields (the blend, the rows read, ...)


@dataclass
class Staged:
    """What a build wrote into its staging folder."""

    files: dict[str, Path]  # name in the receipt (".bin", "train/shard_00000.jsonl") -> staged file, commit order
    stats: dict
    digests: dict[str, dict] = field(default_factory=dict)  # name -> {"bytes", "sha256"}, when the build has them
    delete_first: tuple[str, ...] = ()  # files of an earlier build to delete before the commit (names as above)
    #: files published as they are stored elsewhere, never staged: name -> the stored file (``Storage.copy_from``:
    #: a hard link, a server-side copy or a byte copy), committed before ``files``; their digests are in ``digests``
    copies: dict[str, StoredFile] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What a step did for one output."""

    key: str
    status: str  # "built" or "up to date"
    receipt: Receipt
    seconds: float = 0.0  # wall time (not in the receipt, whose inputs are deterministic)
    rebuilt_because: str = ""  # why an output that existed was built again


@dataclass(frozen=True)
class Pending:
    """An output that must be built, and why (``""``: it never was)."""

    output: Output
    rebuilt_because: str
    started: float
    earlier_files: tuple[str, ...] = ()  # the files the output's current receipt lists, if it has one


def check(store: Storage, output: Output, force: bool = False, log: Log = print) -> Outcome | Pending:
    """Step 1: the outcome of an output that is up to date, or what building it takes."""
    started = time.monotonic()
    if upgrade(store, output.prefix):
        log(f"{output.key}: moved its receipt and side files to .receipts/ and .meta/")
    current = freshness(store, output.prefix, output.inputs)
    because = rebuild_reason(current, force)
    if because is None:
        return Outcome(output.key, "up to date", current.receipt, time.monotonic() - started)
    if because:
        log(f"{output.key}: rebuilding: {because}")
    earlier = tuple(current.receipt.files) if current.receipt is not None else ()
    return Pending(output, because, started, earlier)


def commit(store: Storage, pending: Pending, staged: Staged) -> Outcome:
    """Steps 3 to 5: publish what the build staged, then the receipt that makes the output done."""
    output = pending.output
    files = {name: staged.digests[name] for name in staged.copies}
    files.update({name: staged.digests.get(name) or file_digest(path) for name, path in staged.files.items()})
    left_behind = [name for name in pending.earlier_files if name not in files]  # the earlier build wrote them
    store.delete(receipt_path(output.prefix))
    for name in (*staged.delete_first, *left_behind):
        store.delete(output_path(output.prefix, name))
    for name, source in staged.copies.items():
        store.copy_from(source, output_path(output.prefix, name))
    for name, path in staged.files.items():
        store.commit(path, output_path(output.prefix, name))
    receipt = write_receipt(store, output.prefix, Receipt(kind=output.kind, key=output.key, inputs=output.inputs,
                                                          files=files, stats=staged.stats, extra=output.extra))
    return Outcome(output.key, "built", receipt, time.monotonic() - pending.started, pending.rebuilt_because)


def build_output(store: Storage, output: Output, build: Callable[[Path], Staged], force: bool = False,
                 log: Log = print) -> Outcome:
    """The whole skeleton for one output: ``build(folder)`` writes the files into the staging folder."""
    checked = check(store, output, force, log)
    if isinstance(checked, Outcome):
        return checked
    with store.staging() as folder:
        with locate_os_errors(folder):
            staged = build(folder)
        return commit(store, checked, staged)


def check_together(store: Storage, outputs: list[Output], force: bool = False, log: Log = print
                   ) -> list[Outcome] | list[Pending]:
    """Step 1 for outputs one build writes together (each view of a pool reads the pool once): every outcome when all
    are up to date, else every one pending: all are built when any is not up to date."""
    checked = [check(store, output, force, log) for output in outputs]
    if all(isinstance(c, Outcome) for c in checked):
        return checked
    return [c if isinstance(c, Pending) else Pending(output, "", time.monotonic())
            for c, output in zip(checked, outputs)]


def commit_together(store: Storage, pending: list[Pending], staged: dict[str, Staged]) -> list[Outcome]:
    return [commit(store, p, staged[p.output.prefix]) for p in pending]


def adopt(store: Storage, output: Output, contents: dict[str, bytes], stats: dict) -> Outcome | None:
    """An output written before it had a receipt (by an older version of this tool): when there is no receipt and
    every file already holds exactly the bytes a build would write (``contents``, by name), write the receipt alone
    and call the output up to date. None when it must be built."""
    if store.exists(stored_path(store, receipt_path(output.prefix))):  # at its legacy place: check() moves it
        return None
    files = {}
    for name, data in contents.items():
        relative = output_path(output.prefix, name)
        digest = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if not store.exists(relative) or store.size(relative) != digest["bytes"] \
                or store.sha256(relative) != digest["sha256"]:
            return None
        files[name] = digest
    receipt = write_receipt(store, output.prefix, Receipt(kind=output.kind, key=output.key, inputs=output.inputs,
                                                          files=files, stats=stats, extra=output.extra))
    return Outcome(output.key, "up to date", receipt)


def file_digest(path: Path) -> dict:
    """``{"bytes", "sha256"}`` of a local file, as a receipt records it."""
    with path.open("rb") as stream:
        return {"bytes": path.stat().st_size, "sha256": hashlib.file_digest(stream, "sha256").hexdigest()}


# --- the shards of one run ------------------------------------------------------------------------------------
ShardBuilder = Callable[[Path, Report, int], Staged]  # (staging folder, report a log line, cores it may use)


@dataclass(frozen=True)
class ShardBuild:
    """One partition of a shard run: its output, and how to build it into a staging folder.

    ``build`` may run in a process forked from the step: it may read the sources and write into the folder it is
    given, and it talks to the step only through ``report`` and what it returns. ``forkable`` is False when it
    reads through something a fork must not copy (an S3 client): such a shard is built in the step. ``together``:
    more outputs the same build writes (each view of a pool): then ``build`` returns the `Staged` of each output
    by its prefix, and all are built when any is not up to date (`check_together`). ``cost``: the work it takes, in
    any unit its step shares (the bytes it reads): the forked builds start with the costliest, so a small one ends the
    run rather than a large one. ``spreads``: the build spreads its own work over every core it is given (a large
    Harmony shard, normalized in pieces by worker processes), so the run builds such shards one after another."""

    output: Output
    build: ShardBuilder | Callable[[Path, Report, int], dict[str, Staged]]
    forkable: bool = True
    together: tuple[Output, ...] = ()
    cost: int = 0
    spreads: bool = False


def planned_shard_builds(store: Storage, blend: str, scope, partitions: list[str],
                         manifests: dict[str, SourceManifest],
                         build: Callable[[SourceManifest, ShardKey, str], "ShardBuild"]
                         ) -> dict[str, "ShardBuild | Exception"]:
    """Each partition's shard in its dataset's current plan, as ``build(manifest, key, base)`` makes it. A partition
    whose dataset has no plan, or whose plan has no such shard (a re-plan made fewer), gets its error, which its own
    outcome raises (the others go on). ``manifests`` keeps the plans read, by dataset, for the caller."""
    builds: dict[str, ShardBuild | Exception] = {}
    for partition in partitions:
        sample, shard = scope.split(partition)
        key = ShardKey.parse(shard)
        try:
            if key.dataset not in manifests:
                manifests[key.dataset] = require_manifest(store, blend, scope.base(sample), key.dataset)
            manifest = manifests[key.dataset]
            if key.index >= len(manifest.shards):
                raise NotReady(f"the current plan of {key.dataset!r} has only {len(manifest.shards)} shard(s); "
                               f"re-materialize {blend}/source_split")
            builds[partition] = build(manifest, key, scope.base(sample))
        except Exception as exc:  # noqa: BLE001 - reported as this partition's failure
            builds[partition] = exc
    return builds


class ShardRun:
    """The shards of one step run: `plan` them all, then take each one's `outcome` in partition order.

    ``plan`` decides which shards are up to date (before any fork). When two or more must be built, they start at
    once in ``processes`` processes forked from the step (0: one per usable core, at most
    ``workers.MAX_BUILD_PROCESSES``), each taking the next shard when it is done, after ``prepare()`` ran here (it
    loads what every build shares, e.g. a tokenizer, so no child loads it again). ``outcome(partition)`` waits for
    that shard's build and commits it. A shard that is not forkable, or alone, is built by ``outcome`` itself. An
    error of one shard (planning, building or committing) is raised by its own ``outcome`` and by no other.
    Leaving the context kills the builds still running and removes their staging folders.

    When every build to run ``spreads`` its own work over the cores it is given, and ``processes`` is left at 0,
    ``outcome`` builds each in turn on every core instead: a shard cannot be split between two processes, its pieces
    can. Six 200 MB Harmony shards (two datasets, one twice as costly per row) in two processes kept one core idle for
    the last 9 s of 45 s; one after another, each on both cores, the step took 42 s (bench/README.md)."""

    def __init__(self, store: Storage, log: Log, *, force: bool = False, processes: int = 0,
                 prepare: Callable[[], object] | None = None, what: str = "shard(s)") -> None:
        self.store, self.log, self.force, self.what = store, log, force, what
        self.processes = build_processes(processes)
        self.processes_chosen = processes != 0  # the run config named a number: fork that many, whatever the builds
        self.prepare = prepare or (lambda: None)
        # per partition: up to date (its outcome), to build (pending: one, or all its outputs built together), or
        # the error its outcome raises
        self._planned: dict[str, Outcome | Pending | list[Pending] | BaseException] = {}
        self._builds: dict[str, ShardBuild] = {}
        self._to_build: list[str] = []
        self._forked: ForkedCalls | None = None
        self._staging: dict[str, tuple[contextlib.ExitStack, Path]] = {}  # the forked builds' folders

    def __enter__(self) -> "ShardRun":
        return self

    def __exit__(self, *exc_info) -> None:
        if self._forked is not None:
            self._forked.close()
        for stack, _ in self._staging.values():
            stack.close()
        self._staging.clear()

    def plan(self, builds: dict[str, ShardBuild | BaseException]) -> None:
        """Check every partition (a ``BaseException`` stands for a partition that could not even be described),
        and start the builds that can run at the same time."""
        for partition, build in builds.items():
            if isinstance(build, ShardBuild):
                self._builds[partition] = build
                try:
                    build = self._check(build)
                except Exception as exc:  # noqa: BLE001 - raised by this shard's outcome, where it is reported
                    build = exc
            self._planned[partition] = build
        to_build = [p for p, planned in self._planned.items() if isinstance(planned, (Pending, list))]
        self._to_build = to_build
        forked = sorted((p for p in to_build if self._builds[p].forkable), key=lambda p: -self._builds[p].cost)
        if self.processes < 2 or len(forked) < 2:
            return
        if not self.processes_chosen and all(self._builds[p].spreads for p in forked):
            self.log(f"building {len(forked)} {self.what} one after another, each on {usable_cores()} cores")
            return
        processes = min(self.processes, len(forked))
        cores = max(1, usable_cores() // processes)  # the cores are shared among the processes
        self.prepare()  # before the fork: every child shares what it loads
        calls = {}
        for partition in forked:
            stack = contextlib.ExitStack()
            folder = stack.enter_context(self.store.staging())
            self._staging[partition] = (stack, folder)
            calls[partition] = _forked_build(self._builds[partition].build, folder, cores)
        self._forked = ForkedCalls(calls, processes, on_message=lambda _partition, line: self.log(line))
        self.log(f"building {len(forked)} {self.what} in {processes} processes, {cores} core(s) each")

    def building(self) -> list[str]:
        """The partitions `plan` found to build (not up to date), in partition order."""
        return list(self._to_build)

    def _check(self, build: ShardBuild) -> Outcome | Pending | list[Pending]:
        if not build.together:
            return check(self.store, build.output, self.force, self.log)
        checked = check_together(self.store, [build.output, *build.together], self.force, self.log)
        return checked[0] if isinstance(checked[0], Outcome) else checked

    def outcome(self, partition: str) -> Outcome:
        """The partition's outcome (of its first output, when several are built together)."""
        planned = self._planned.pop(partition)
        if isinstance(planned, BaseException):
            raise planned
        if isinstance(planned, Outcome):
            return planned
        if partition not in self._staging:  # built here: alone, or not forkable
            build = self._builds[partition].build
            with self.store.staging() as folder:
                with locate_os_errors(folder):
                    staged = build(folder, self.log, usable_cores())
                return self._commit(planned, staged)
        stack, folder = self._staging.pop(partition)
        with stack:
            with locate_os_errors(folder):
                staged = self._forked.result(partition)
            return self._commit(planned, staged)

    def _commit(self, planned: Pending | list[Pending], staged) -> Outcome:
        if isinstance(planned, list):
            return commit_together(self.store, planned, staged)[0]
        return commit(self.store, planned, staged)


def _forked_build(build: ShardBuilder, folder: Path, cores: int) -> Callable[[Report], Staged]:
    return lambda report: build(folder, report, cores)
