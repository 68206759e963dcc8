"""The build host: a process the ``materialize`` command forks at its start, which loads the pretraining tokenizer
and later forks the shard builds of the command's runs; first, it can measure the blend's first dataset for the
command's source_split step.

Why a process of its own. Loading Llama-3's tokenizer takes ~1.4 s, most of it holding the GIL (hf-tokenizers'
``from_str``, fastokens' parse). Loaded in a thread of the command, beside the first second of Dagster (opening the
sqlite instance, the repository, the source split run), both wanted the GIL and the command reached its shard
run ~0.3-0.5 s later than without that thread, and then still had to wait for the rest of the load. In a process of
its own the load runs on the second core, which is idle until the builds start (bench/README.md has the
timelines). The builds have to be forked from the process that holds the loaded tokenizer, so this process is also
where they are forked; it is forked before Dagster is imported, so it and its builds carry none of the command's
sqlite connections, threads or S3 clients.

Measuring ahead. The command's first ~2 s go to importing Dagster and opening its instance, before the source_split
step can begin to measure the first dataset (``build_manifest``: one pass over its files, ~0.3-0.7 s for 1 GB).
When the command will run that step for a whole, local dataset, the host measures it first, while the command starts
Dagster, and the step takes that manifest instead of measuring again (``measured_ahead``). It is the same function
on the same blend, files and folder, so the manifest is the one the step would have made a moment later. Only the
first dataset: the later ones the step measures itself while the host loads the tokenizer, never twice.

What stays in the step (pretrain/shard_processes.py): deciding which shards are up to date, committing, receipts,
checks, logging and reporting. For that the step needs only the tokenizer's facts (``TokenizerFacts``), which the
host sends once its load has ended.

The conversation on the host's one pipe:

- host -> command, when measuring ahead: ``("manifest", dataset, manifest)``, with None when measuring failed (the
  step then measures the dataset itself and meets the error, located as usual);
- host -> command, once: ``("loaded", facts)``, or ``("failed", error)`` and the host ends (the step then loads the
  tokenizer itself and meets the same error, located as usual);
- command -> host: ``(requests, processes)``: build these shards (``BuildRequest``), ``processes`` at a time;
- host -> command: ``("message", name, text)`` as the builds log, and ``("result", name, succeeded, value)`` for
  every request, in the order they were given;
- command -> host: ``None``: end.

Stopping. The host leads a process group of its own, which its builds join when it forks them: ``kill`` ends the
host and every build at once (a step that fails or is terminated before its builds end). If the command dies
without a word, the host learns it when it next reads or writes the pipe, and ends; its builds learn it from their
own pipes to the host. The builds do not keep the command's pipe open, so a host that dies alone (killed, out of
memory) fails the builds still waiting at once (``ForkedCallDied``).
"""

import functools
import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import SourceManifest
from nemotron_assets.core.workers import ForkedCallDied, ForkedCalls, Report, picklable_error
from nemotron_assets.defs.pretrain.shard_step import build_staged
from nemotron_assets.sources.manifest import build_manifest
from nemotron_assets.tokenize.documents import DocumentOptions, LoadedTokenizer, TokenizerFacts, cached_tokenizer


@dataclass(frozen=True)
class BuildRequest:
    """One shard for the host to build into ``folder`` (a staging folder the step made and will commit from)."""

    blend: Blend
    manifest: SourceManifest
    key: ShardKey
    folder: Path
    threads: int


@dataclass(frozen=True)
class MeasureAhead:
    """The dataset whose source split the host measures before loading the tokenizer: ``build_manifest(blend,
    blend.entry(dataset), base_dir)``, exactly as the step would call it."""

    blend: Blend
    dataset: str
    base_dir: Path


class BuildHost:
    """The host process of one tokenizer setting (``spec``, ``revision``, ``options``): forked now, loading at once.

    One step at a time asks it for builds (``builds``); the command ``close``s it at its end. Made by the command
    while it has no thread besides its main one (a fork copies no other thread, and one holding a lock would leave
    that lock held in the child)."""

    def __init__(self, spec: str, revision: str | None, options: DocumentOptions,
                 ahead: MeasureAhead | None = None) -> None:
        self.setting = (spec, revision, options)
        self.ahead = ahead
        self.owner = os.getpid()  # a process forked from the command does not own its host
        context = multiprocessing.get_context("fork")
        self._connection, child_end = context.Pipe()
        # Not a daemon: a daemon process may not fork processes of its own, and the host forks the builds.
        self._process = context.Process(target=_serve,
                                        args=(spec, revision, options, ahead, child_end, self._connection),
                                        name="build_host")
        self._process.start()
        child_end.close()  # the command keeps only its own end: EOF then means the host has gone
        try:
            os.setpgid(self._process.pid, self._process.pid)  # also done by the host: whichever runs first
        except OSError:
            pass  # the host did it already, or has already ended
        self._facts: TokenizerFacts | None = None
        self._measured: dict[str, SourceManifest | None] = {}  # the manifest measured ahead, until taken
        self.state = "loading"  # loading -> ready <-> building; or gone
        global _COMMAND_HOST
        _COMMAND_HOST = self

    @property
    def pid(self) -> int:
        return self._process.pid

    def facts(self) -> TokenizerFacts | None:
        """The loaded tokenizer's facts, once the load has ended; None when it failed or the host is gone."""
        self._read_while_loading(until=lambda: False)
        return self._facts if self.state != "gone" else None

    def manifest(self, blend: Blend, dataset: str, base_dir: Path) -> SourceManifest | None:
        """The manifest the host measured ahead for this very call of ``build_manifest``, waiting for it if need be
        (the host began earlier than the step could); once only. None for any other dataset, blend or folder, when
        measuring failed, or when the host is gone: the step measures the dataset itself."""
        if self.ahead != MeasureAhead(blend, dataset, base_dir):
            return None
        self._read_while_loading(until=lambda: dataset in self._measured)
        self.ahead = None  # taken (or given up): a second source_split of the dataset measures it again
        return self._measured.pop(dataset, None)

    def builds(self, requests: dict[str, BuildRequest], processes: int,
               on_message: Callable[[str, Any], None]) -> "HostedBuilds":
        """Start building ``requests`` (name -> request), ``processes`` at a time, each in a process the host forks."""
        if self.state != "ready":
            raise RuntimeError(f"the build host is {self.state}, not ready for builds")
        self._connection.send((requests, processes))
        self.state = "building"
        return HostedBuilds(self, list(requests), on_message)

    def close(self) -> None:
        """Let the host end (it is idle), or kill it if it is not: the command is ending."""
        if self.state in ("loading", "building"):
            self.kill()
        if self.state == "gone":
            return
        try:
            self._connection.send(None)
        except OSError:
            pass  # it has gone already
        self._process.join()
        self._connection.close()
        self.state = "gone"

    def kill(self) -> None:
        """End the host and every build it forked, now."""
        if self.state == "gone":
            return
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except OSError:  # no such group (yet): the host alone
            self._process.kill()
        self._process.join()
        self._connection.close()
        self.state = "gone"

    def _read_while_loading(self, until: Callable[[], bool]) -> None:
        """Read the host's own messages until ``until()`` holds, its load has ended, or it has gone."""
        while not until() and self.state == "loading" and (message := self._receive()) is not None:
            if not self._take(message):
                self.kill()  # not a message of a loading host

    def _take(self, message: tuple) -> bool:
        """Keep what a message of the host's own says (its manifest, its tokenizer's facts, a failed load); False for
        any other message (a build's)."""
        kind = message[0]
        if kind == "manifest":
            self._measured[message[1]] = message[2]
        elif kind == "loaded":
            self._facts, self.state = message[1], "ready"
        elif kind == "failed":
            self.kill()  # it is ending
        else:
            return False
        return True

    def _receive(self) -> tuple | None:
        """The host's next message, or None when it has gone (then it is marked so)."""
        try:
            return self._connection.recv()
        except (EOFError, OSError):
            self.kill()
            return None


class HostedBuilds:
    """The builds of one ``BuildHost.builds`` call: ``result(name)`` in any order, ``close`` when leaving.

    The same use as ``forked_calls.ForkedCalls``: while ``result`` waits, every build's messages go to
    ``on_message(name, message)``; a build that fails raises its own error from its own ``result``; a host that
    dies fails every build whose result had not come yet (``ForkedCallDied``)."""

    def __init__(self, host: BuildHost, names: list[str], on_message: Callable[[str, Any], None]) -> None:
        self._host, self._on_message = host, on_message
        self._waiting = set(names)  # results not received yet
        self._ended: dict[str, tuple[bool, Any]] = {}

    def result(self, name: str) -> Any:
        if name not in self._waiting and name not in self._ended:
            raise KeyError(f"no build named {name!r}")
        while name not in self._ended:
            message = self._host._receive()
            if message is None:
                for lost in self._waiting:
                    self._ended[lost] = (False, ForkedCallDied(f"the build host ended before {lost} was built"))
                self._waiting.clear()
                break
            kind, build, *payload = message
            if kind == "message":
                self._on_message(build, payload[0])
                continue
            self._waiting.discard(build)
            self._ended[build] = (payload[0], payload[1])
        if not self._waiting and self._host.state == "building":
            self._host.state = "ready"  # every result is here: the host waits for the next request
        succeeded, value = self._ended.pop(name)
        if not succeeded:
            raise value
        return value

    def close(self) -> None:
        """Kill the host and its builds if results are still coming (the step is leaving early)."""
        if self._waiting:
            self._host.kill()
            self._waiting.clear()


_COMMAND_HOST: BuildHost | None = None  # the host this process started, if any (one per command)


def command_host(spec: str, revision: str | None, options: DocumentOptions) -> BuildHost | None:
    """The host the running command started for this tokenizer setting, if it is there and free for builds.

    None in any other process (a Dagster worker process, a Ray worker, a forked build), for another setting, or
    when the host is gone: the step then loads the tokenizer itself."""
    host = _COMMAND_HOST
    if host is None or host.owner != os.getpid() or host.setting != (spec, revision, options):
        return None
    return host if host.state in ("loading", "ready") else None


def measured_ahead(blend: Blend, dataset: str, base_dir: Path) -> SourceManifest | None:
    """The manifest the running command's host measured ahead for ``build_manifest(blend, blend.entry(dataset),
    base_dir)``, if it did; None otherwise (then the caller measures)."""
    host = _COMMAND_HOST
    if host is None or host.owner != os.getpid():
        return None
    return host.manifest(blend, dataset, base_dir)


# --- in the host process ------------------------------------------------------------------------------------
def _serve(spec: str, revision: str | None, options: DocumentOptions, ahead: MeasureAhead | None,
           connection: Connection, commands_end: Connection) -> None:
    """Measure ahead (if asked), load the tokenizer, say so, then build what the command asks for until it says
    ``None``.

    The command's end of the pipe, copied by the fork, is closed first: the command's death then closes the pipe."""
    commands_end.close()
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a handler copied from the command would turn these into
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # exceptions this loop reports and survives
    if ahead is not None:
        try:
            connection.send(("manifest", ahead.dataset, _measure(ahead)))
        except (BrokenPipeError, ConnectionResetError):
            return  # the command has gone
    try:
        tokenizer = cached_tokenizer(spec, revision, options)
    except BaseException as exc:  # noqa: BLE001 - reported to the command; the step meets it again, located
        connection.send(("failed", picklable_error(exc)))
        return
    try:
        connection.send(("loaded", tokenizer.facts))
        while (request := connection.recv()) is not None:
            _build_all(*request, tokenizer, connection)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the command has gone; leaving the builds' context killed them
    connection.close()


def _measure(ahead: MeasureAhead) -> SourceManifest | None:
    try:
        return build_manifest(ahead.blend, ahead.blend.entry(ahead.dataset), ahead.base_dir)
    except Exception:  # noqa: BLE001 - the step measures the dataset itself and reports the error, located
        return None


def _build_all(requests: dict[str, BuildRequest], processes: int, tokenizer: LoadedTokenizer,
               connection: Connection) -> None:
    """One request of the command: its builds in forked processes, each result sent as it comes, in order."""
    calls = {name: functools.partial(_build, build, tokenizer) for name, build in requests.items()}
    with ForkedCalls(calls, processes, on_message=lambda name, text: connection.send(("message", name, text)),
                     close_in_children=[connection]) as forked:
        for name in requests:
            try:
                value = forked.result(name)
            except Exception as exc:  # noqa: BLE001 - the build's own error, raised by the step for its shard
                connection.send(("result", name, False, exc))
            else:
                connection.send(("result", name, True, value))


def _build(request: BuildRequest, tokenizer: LoadedTokenizer, report: Report) -> tuple:
    return build_staged(request.blend, request.manifest, request.key, tokenizer, request.folder, report,
                        threads=request.threads)
