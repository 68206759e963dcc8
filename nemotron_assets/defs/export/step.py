"""One export folder, on the step skeleton (core/step.py), top to bottom:

    the sets (sets.py) -> is the folder this blend's? -> up to date? -> stage README.md -> delete the receipt
    -> place every data file -> README.md -> the receipt last

The folder is ``<root>/<blend>/hf/``, or the one the run config names (``export --hf DIR``: a local folder or an
``s3://`` URL). Inside it::

    README.md                                  the dataset card (formats/hf_card.py)
    pools/<pool>/part-00000.parquet, sft/<split>/shard_NNNNN.parquet, jsonl/<dataset>/<split>/shard_NNNNN.jsonl[.zst]
    .meta/export.json                          {"blend": ...}: written first, so a folder is known as this blend's
    .receipts/README.json                      the receipt: every file's sha256, the card's inputs

**Whose folder.** A folder is written only when it does not exist, or when its ``.meta/export.json`` names this
blend (an earlier export, finished or killed midway). Any other folder that exists is refused before anything is
written (`claim`).

**Files.** A data file is placed as it is committed, never re-encoded (``Storage.copy_from``): a hard link when the
folder is on the data's local file system, a server-side copy when both are on S3, else a byte copy. Each appears
whole or not at all. A file an earlier export listed and this one does not is deleted.

**Up to date.** The receipt's inputs are every exported file's sha256 (from its own receipt), the sample listings
whose licenses the card counts, the dataset ``license:`` settings, the configs' layout and this format's version.
A changed pool makes the export stale; a plain ``materialize`` never builds it (pipeline.py).
"""

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.records import read_receipt
from nemotron_assets.core.step import Log, Outcome, Output, Staged, build_output
from nemotron_assets.core.storage import STAGING_DIR, Storage, StoredFile
from nemotron_assets.defs.export.sets import ExportSet, describe, export_sets
from nemotron_assets.formats.hf_card import card_text
from nemotron_assets.sources.errors import InputError

EXPORT_KIND = "hf_export"
EXPORT_FORMAT = "hf-export/1"
CARD = "README.md"
CARD_PREFIX = "README"  # the receipt: .receipts/README.json (core/records.py receipt_path)
MARKER = ".meta/export.json"
#: what an upload leaves out: the hidden folders (.receipts/, .meta/, .staging/) at any depth
HIDDEN = [".*", "*/.*"]


def export_dir(blend: str) -> str:
    """The default folder, relative to the storage root."""
    return f"{blend}/hf"


def destination(store: Storage, blend: str, folder: str | None = None) -> Storage:
    """The export folder as a storage of its own (same endpoint and credentials as the data's)."""
    if folder is None:
        return store.at(store.url(export_dir(blend)))
    return store.at(folder if folder.startswith("s3://") else str(Path(folder).expanduser().resolve()))


def check_claim(folder: Storage, blend: str) -> bool:
    """Whether ``folder`` is already this blend's export folder (False: it does not exist); ``InputError`` when it
    exists and is not."""
    try:
        marker = json.loads(folder.read_bytes(MARKER))
    except (FileNotFoundError, ValueError):
        marker = None
    if isinstance(marker, dict) and marker.get("blend") == blend:
        return True
    if _exists(folder):
        raise InputError(f"export folder already exists: {folder.root}: it is not an export of blend {blend!r} (no "
                         f"{MARKER} naming it); choose another --hf folder, or remove this one")
    return False


def claim(folder: Storage, blend: str) -> None:
    """Make ``folder`` this blend's export folder: refuse one that exists and is not, else write the marker."""
    if not check_claim(folder, blend):
        folder.write_bytes(MARKER, json.dumps({"blend": blend}).encode() + b"\n")


def _exists(folder: Storage) -> bool:
    return folder.fs.exists(folder.root) if folder.is_s3 else os.path.lexists(folder.root)


def export_inputs(blend: Blend, sets: list[ExportSet]) -> dict:
    """Everything that decides the folder's bytes."""
    return {
        "format": EXPORT_FORMAT,
        "title": blend.name,
        "configs": {s.config: {split: [f.path for f in files] for split, files in s.splits.items()} for s in sets},
        "files": {f.path: f.digest["sha256"] for s in sets for f in s.files()},
        "read": {path: sha256 for s in sets for path, sha256 in s.read.items()},
        "licenses": {entry.name: entry.license for entry in blend.entries() if entry.license is not None},
    }


@dataclass(frozen=True)
class Exported:
    """What one export did: the skeleton's outcome and the folder it wrote."""

    outcome: Outcome
    folder: Storage
    sets: list[ExportSet]


def materialize_export(store: Storage, blend: Blend, folder: str | None = None, force: bool = False,
                       log: Log = print) -> Exported:
    """Write (or find up to date) the export folder of the blend's full build."""
    sets = export_sets(store, blend, blend.name)  # NotReady / InputError before anything is written
    target = destination(store, blend.name, folder)
    claim(target, blend.name)
    for orphan in target.remove_orphaned_staging():
        log(f"removed {orphan.path} left by a killed export")
    earlier = read_receipt(target, CARD_PREFIX)
    placed = {file.path: file for s in sets for file in s.files()}

    def build(staging: Path) -> Staged:
        configs = [describe(store, blend, s) for s in sets]
        empty = [pool for pool in blend.pools() if f"pool_{pool}" not in {s.config for s in sets}]
        summary = (f"Exported by nemotron_assets from the blend `{blend.name}`: each config is one set of files the "
                   "blend built, as committed." + (f" Pools without rows (no config): {', '.join(empty)}." if empty
                                                   else ""))
        (staging / CARD).write_text(card_text(blend.name, configs, summary))
        stats = {"configs": {c.name: {split.name: split.rows for split in c.splits} for c in configs},
                 "licenses": {c.name: c.licenses for c in configs}, "files": len(placed),
                 "bytes": sum(file.digest["bytes"] for file in placed.values())}
        gone = tuple(name for name in (earlier.files if earlier else {}) if name not in placed and name != CARD)
        return Staged({CARD: staging / CARD}, stats, digests={path: file.digest for path, file in placed.items()},
                      delete_first=gone, copies={path: StoredFile(store, file.source) for path, file in placed.items()})

    output = Output(CARD_PREFIX, export_inputs(blend, sets), EXPORT_KIND, "hf", extra={"blend": blend.name})
    outcome = build_output(target, output, build, force, log)
    if not target.is_s3:  # the staging folders' parent, empty now: the folder keeps only the export
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(target.root, STAGING_DIR))
    return Exported(outcome, target, sets)


def hard_links(store: Storage, exported: Exported) -> int:
    """How many of the exported files share their inode with the committed file (0 on S3)."""
    if store.is_s3 or exported.folder.is_s3:
        return 0
    return sum(os.stat(store.url(file.source)).st_ino == os.stat(exported.folder.url(file.path)).st_ino
               for s in exported.sets for file in s.files())
