"""One dataset of a blend -> its manifest: resolve the files, measure them, plan the shards.

``measure_dataset`` lists the files (sources/discovery.py), counts every file's rows and hashes its content in one
streaming pass (sources/readers.py), and cuts the rows into shards of about ``shard_size`` input bytes
(sources/plan.py). The manifest (sources/manifest.py) is what every later step builds from.

A file measured before is not read again when it is provably the same (`Measured`, the last measurement): the same
size and, locally, the same modification time (recorded beside the manifest, ``stamps.json``), or on S3 the same
ETag. A local file of the same size with another modification time is read and hashed again; the next
``source_split`` records its new time. ``status`` and ``verify`` measure this way too (defs/sources/current.py), so
they judge the shards against the input files as they are now, as ``materialize`` does. The new-files sensor
(automation.py) applies the same rule without reading any file (`unplanned_inputs`): a file it cannot prove unchanged
is left to a re-plan.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import input_stamps_path
from nemotron_assets.core.records import read_manifest
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.discovery import resolve_files, storage_options_for
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile, is_remote
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.plan import plan_shards, shard_count_for
from nemotron_assets.sources.readers import ReadOptions, check_parquet_text_column, count_rows_and_hash


def read_options(blend: Blend, entry: DatasetEntry) -> ReadOptions:
    """How every step reads a dataset's rows: its text field, the blend's ``on_error``, an S3 endpoint."""
    return ReadOptions(dataset=entry.name, text_field=entry.text_fields or entry.text_field, on_error=blend.on_error,
                       storage_options=storage_options_for(entry))


@dataclass(frozen=True)
class Measured:
    """A dataset as measured: its manifest, and the modification time of each local file when it was measured."""

    manifest: SourceManifest
    stamps: dict[str, int] = field(default_factory=dict)  # local file -> st_mtime_ns

    def stamps_bytes(self) -> bytes:
        return json.dumps({"format": STAMPS_FORMAT, "mtime_ns": self.stamps}, sort_keys=True, indent=1).encode()


STAMPS_FORMAT = "input-stamps/1"


def read_stamps(data: bytes | None) -> dict[str, int]:
    """The recorded modification times (``stamps.json``); none when absent or unreadable (then files are hashed)."""
    try:
        recorded = json.loads(data) if data else {}
        return {str(k): int(v) for k, v in recorded.get("mtime_ns", {}).items()} \
            if recorded.get("format") == STAMPS_FORMAT else {}
    except (ValueError, TypeError, AttributeError):
        return {}


def measured_before(store: Storage, base: str, dataset: str) -> Measured | None:
    """The dataset's last measurement under ``base`` (its manifest and stamps), or None."""
    try:
        manifest = read_manifest(store, base, dataset)
    except (FileNotFoundError, ValueError):
        return None
    stamps_file = input_stamps_path(base, dataset)
    return Measured(manifest, read_stamps(store.read_bytes(stamps_file) if store.exists(stamps_file) else None))


def build_manifest(blend: Blend, entry: DatasetEntry, base_dir: Path, max_rows: int | None = None) -> SourceManifest:
    """Resolve, measure (rows + content hash, one streaming pass per file) and plan one dataset."""
    return measure_dataset(blend, entry, base_dir, max_rows).manifest


def measure_dataset(blend: Blend, entry: DatasetEntry, base_dir: Path, max_rows: int | None = None,
                    known: Measured | None = None) -> Measured:
    """Resolve, measure and plan one dataset; a file ``known`` measured and provably unchanged is not read.

    With ``max_rows`` (a sample) only the first files holding that many rows are measured and listed.
    """
    resolution = resolve_files(entry, base_dir)
    options = read_options(blend, entry)
    if entry.kind == "pretrain":  # text: every Parquet file must have the text column, checked before reading
        for source in resolution.files:
            if source.format == "parquet":
                check_parquet_text_column(source, options)
    measured_before = {f.url: f for f in known.manifest.files} if known else {}
    files, skipped, stamps = [], [], {}
    for source in resolution.files:
        if max_rows is not None and sum(f.rows for f in files) >= max_rows:
            break  # a sample: the files after the first max_rows rows are neither read nor listed
        stamp = None if is_remote(source.url) else os.stat(source.url).st_mtime_ns  # before reading it
        if stamp is not None:
            stamps[source.url] = stamp
        before = measured_before.get(source.url)
        if before is not None and before.rows and _unchanged(source, stamp, before, known):
            files.append(before)  # an empty file is read again: the blend's on_error decides what it means
            continue
        line_starts: list[tuple[int, int]] = []
        rows, digest = count_rows_and_hash(source, options, line_starts)
        fingerprint = source.fingerprint or f"blake3:{digest}"
        if rows == 0:
            if blend.on_error != "skip":
                raise InputError("empty file (no rows); remove it or set on_error: skip", dataset=entry.name,
                                 path=source.url)
            skipped.append(source.url)
        files.append(SourceFile(source.url, source.size, source.format, source.compression, rows, fingerprint,
                                tuple(line_starts)))
    if sum(f.rows for f in files) == 0:
        raise InputError(f"empty dataset: {len(files)} file(s) at {entry.path} hold no rows", dataset=entry.name,
                         field="path")
    return Measured(plan_manifest(blend, entry, resolution.revision, files, max_rows, skipped), stamps)


def _unchanged(source: SourceFile, stamp: int | None, before: SourceFile, known: Measured) -> bool:
    """Whether a listed file is provably the one measured before, without reading it."""
    if source.size != before.size:
        return False
    if source.fingerprint:  # S3's ETag, a hub file's hash: it changes with the content
        return source.fingerprint == before.fingerprint
    return stamp is not None and known.stamps.get(source.url) == stamp


def changed_inputs(before: SourceManifest, now: SourceManifest) -> list[tuple[str, str]]:
    """(file, "changed" / "added" / "removed") for each input file that differs between two measurements."""
    return _changed_files(before.files, now.files)


def unplanned_inputs(listed: list[SourceFile], known: Measured | None) -> list[tuple[str, str]]:
    """(file, "changed" / "added" / "removed") for each ``listed`` file (``resolve_files``) that is not provably
    the one the dataset's recorded plan measured (``known``, from `measured_before`), by the rule
    ``measure_dataset`` follows, without reading a file: the same size and, locally, the modification time
    recorded in stamps.json, or on S3 the same ETag. A local file of the same size with another modification time
    counts as changed here: only a re-plan reads it, and it hashes that file alone. With no recorded plan, every
    file is new."""
    if known is None:
        return [(source.url, "added") for source in listed]
    before = {f.url: f for f in known.manifest.files}
    now = []
    for source in listed:
        measured = before.get(source.url)
        stamp = None if is_remote(source.url) else os.stat(source.url).st_mtime_ns
        now.append(measured if measured is not None and _unchanged(source, stamp, measured, known) else source)
    return _changed_files(known.manifest.files, now)  # a listed local file has no fingerprint: never equal


def _changed_files(before: list[SourceFile], now: list[SourceFile]) -> list[tuple[str, str]]:
    old = {f.url: (f.size, f.fingerprint) for f in before}
    new = {f.url: (f.size, f.fingerprint) for f in now}
    changes = [(url, "removed") for url in old if url not in new]
    changes += [(url, "added") for url in new if url not in old]
    changes += [(url, "changed") for url in old if url in new and old[url] != new[url]]
    return changes


def plan_manifest(blend: Blend, entry: DatasetEntry, revision: str | None, files: list[SourceFile],
                  max_rows: int | None, skipped: list[str]) -> SourceManifest:
    """The manifest of measured ``files``: the blend's settings cut their rows into shards."""
    rows = _limit_rows([f.rows for f in files], max_rows)
    sizes = [f.size * r // f.rows if f.rows else 0 for f, r in zip(files, rows)]
    count = blend.shard_count_override(entry) or shard_count_for(sum(sizes), sum(rows), blend.shard_size_bytes)
    return SourceManifest(
        blend=blend.name, dataset=entry.name, split=blend.split_of(entry.name), path=entry.path,
        revision=revision, text_field=entry.text_field, files=files,
        shards=plan_shards(sizes, rows, count), max_rows=max_rows, skipped_empty_files=skipped,
    )


def replan_reason(blend: Blend, entry: DatasetEntry, base_dir: Path, manifest: SourceManifest) -> str | None:
    """Why a full build's manifest is no longer the plan the blend and the files make now, or None.

    The files are listed again (never read): a file that appeared, went, or changed size (or ETag, on S3) means
    the dataset must be measured again. A local file rewritten to the same size is not seen here. Then the
    measurements in the manifest are planned again with the blend's settings as they are now (``shard_size``,
    ``num_shards``, ``split``, ``text_field``, ...). ``hf://`` sources are pinned by revision and not listed."""
    if not entry.path.startswith("hf://"):
        listed = [(f.url, f.size, f.fingerprint) for f in resolve_files(entry, base_dir).files]
        measured = [(f.url, f.size, f.fingerprint if fingerprint else "")
                    for f, (_, _, fingerprint) in zip(manifest.files, listed)]
        if len(listed) != len(manifest.files) or measured != listed:
            return "its source files changed"
    planned = plan_manifest(blend, entry, manifest.revision, manifest.files, None, manifest.skipped_empty_files)
    if planned.to_bytes() != manifest.to_bytes():
        return "the blend's settings plan it otherwise"
    return None


def _limit_rows(rows: list[int], max_rows: int | None) -> list[int]:
    """Keep only the first ``max_rows`` rows of the dataset (file order)."""
    if max_rows is None:
        return rows
    limited, left = [], max_rows
    for r in rows:
        take = min(r, left)
        limited.append(take)
        left -= take
    return limited
