"""The records that describe outputs: manifests (what is planned) and receipts (what was built), and the one
definition of "up to date".

**Manifests.** A dataset's ``<base>/sources/<dataset>/manifest.json`` lists the exact files read (url, size,
format, compression, rows, content hash or ETag) and the shard plan (row ranges of those files per shard).
``SourceManifest.shard_fingerprint`` is the identity of one shard's input.

**Receipts.** Every step that publishes files (a tokenized shard, a Harmony shard, ...) writes a *receipt* beside
them, last, after deleting the old one first: a shard without a readable receipt is not done. Receipts live in a
hidden ``.receipts/`` folder beside the outputs (``receipt_path``), so a folder of Parquet or JSONL files holds only
data and a trainer can be pointed at it (``pyarrow.dataset`` skips names starting with ``.``, ``datasets`` skips
hidden folders). Files a trainer does not read (a pool's ``manifest.json``, a packed shard's samples listing) lie in
a hidden ``.meta/`` folder beside the data, for the same reason. A tree written before these folders existed is
read where it lies (``stored_path``) and moved by the next build (core/upgrade.py). The receipt says

- ``inputs``: everything that determines the bytes of the files: the source rows and file versions, the
  tokenizer file's hash, every processing setting and the code's format version. Its sha256 is
  ``inputs_sha256``.
- ``files``: each published file's size and sha256, as written, named by its suffix (``.bin``) or by its path
  relative to the prefix's folder (``train/shard_00000.jsonl``, ``.meta/manifest.json``; ``output_path``).
- ``committed``: each file's storage stamp right after the commit (modification time on local disk, ETag on S3),
  so a file changed afterwards is noticed without reading it. This is the only part of a receipt that differs
  between two builds of the same inputs.
- ``stats``: counts for status, metadata and checks.

``freshness`` compares a receipt with the inputs a build would use *now* and with the files in storage. It is
the single definition every consumer uses: ``materialize`` skips only ``DONE`` outputs, ``status`` shows the
state, ``verify`` and the listing assets (``megatron_blend``, ...) refuse anything else, naming the reason::

    DONE     the receipt matches the current inputs and every file is as committed
    STALE    built, but from other inputs (a setting, the tokenizer, the source changed), or a file
             changed after it was committed (its stamp moved and its sha256 no longer matches)
    MISSING  never built, or only partly (no readable receipt, or a file is gone)
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from nemotron_assets.core.layout import manifest_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.manifest import SourceManifest

RECEIPT_VERSION = 2


class NotReady(Exception):
    """An output this step needs is missing or stale: a retry cannot help, building it can. The message names the
    outputs, why, and what to materialize."""


def read_manifest(store: Storage, base: str, dataset: str) -> SourceManifest:
    """A dataset's manifest under ``base``; ``FileNotFoundError``/``ValueError`` say what is wrong."""
    path = manifest_path(base, dataset)
    if not store.exists(path):
        raise FileNotFoundError(store.url(path))
    try:
        return SourceManifest.from_json(json.loads(store.read_bytes(path)))
    except (KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError already
        raise ValueError(f"not a readable manifest: {exc}") from None


def require_manifest(store: Storage, blend: str, base: str, dataset: str) -> SourceManifest:
    """The dataset's manifest, for a step that needs it: a missing one is ``NotReady`` (a retry cannot make it),
    naming what to materialize."""
    try:
        return read_manifest(store, base, dataset)
    except FileNotFoundError as exc:
        raise NotReady(f"{exc} does not exist: materialize {blend}/source_split partition {dataset!r} first") from None


def write_manifest(store: Storage, base: str, manifest: SourceManifest) -> str:
    """Commit the manifest under ``base``; returns its relative path."""
    relative = manifest_path(base, manifest.dataset)
    store.write_bytes(relative, manifest.to_bytes())
    return relative


# --- receipts ---------------------------------------------------------------------------------------------


class State(StrEnum):
    DONE = "done"
    STALE = "stale"
    MISSING = "missing"


@dataclass(frozen=True)
class Receipt:
    kind: str  # what was built: "pretrain_shard", "harmony_shard", ...
    key: str  # its partition key
    inputs: dict  # everything that determines the files' bytes
    files: dict[str, dict]  # suffix (".bin") -> {"bytes": n, "sha256": hex}
    stats: dict
    committed: dict[str, str] = field(default_factory=dict)  # suffix -> storage stamp after commit
    extra: dict = field(default_factory=dict)  # informative fields (ranges read, tokenizer spec, ...)

    @property
    def inputs_sha256(self) -> str:
        return inputs_sha256(self.inputs)

    def to_bytes(self) -> bytes:
        body = {"receipt_version": RECEIPT_VERSION, "kind": self.kind, "key": self.key, "inputs": self.inputs,
                "inputs_sha256": self.inputs_sha256, "files": self.files, "committed": self.committed,
                "stats": self.stats, **self.extra}
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @staticmethod
    def from_bytes(data: bytes) -> "Receipt":
        """Parse a receipt; ValueError if it is not one of this version (an old receipt means: rebuild)."""
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("receipt_version") != RECEIPT_VERSION:
            raise ValueError(f"not a version-{RECEIPT_VERSION} receipt")
        known = {"receipt_version", "kind", "key", "inputs", "inputs_sha256", "files", "committed", "stats"}
        try:
            return Receipt(kind=body["kind"], key=body["key"], inputs=body["inputs"], files=body["files"],
                           stats=body["stats"], committed=body.get("committed", {}),
                           extra={k: v for k, v in body.items() if k not in known})
        except KeyError as exc:
            raise ValueError(f"receipt lacks {exc}") from None


@dataclass(frozen=True)
class Freshness:
    state: State
    reason: str = ""  # why the output is not done; "" when it is
    receipt: Receipt | None = None

    @property
    def done(self) -> bool:
        return self.state is State.DONE


def inputs_sha256(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


RECEIPTS_DIR = ".receipts"  # beside the outputs: <folder>/.receipts/<name>.json
META_DIR = ".meta"  # beside the data: what a trainer does not read (manifests, listings, duplicates)


def receipt_path(prefix: str) -> str:
    """The receipt of the outputs at ``prefix``, in the hidden folder beside them (``.../shard_00000`` ->
    ``.../.receipts/shard_00000.json``)."""
    folder, _, name = prefix.rpartition("/")
    return f"{folder}/{RECEIPTS_DIR}/{name}.json" if folder else f"{RECEIPTS_DIR}/{name}.json"


def meta_path(folder: str, name: str) -> str:
    """A file beside the data of ``folder`` that a trainer does not read: ``<folder>/.meta/<name>``."""
    return f"{folder}/{META_DIR}/{name}"


def legacy_path(path: str) -> str:
    """Where a receipt or a ``.meta/`` file lay before those folders existed: the same name in the folder above
    (``.../.receipts/shard_00000.json`` -> ``.../shard_00000.json``, ``.../.meta/manifest.json`` ->
    ``.../manifest.json``). Other paths are their own legacy place."""
    folder, _, name = path.rpartition("/")
    parent, _, hidden = folder.rpartition("/")
    if hidden not in (RECEIPTS_DIR, META_DIR):
        return path
    return f"{parent}/{name}" if parent else name


def stored_path(store: Storage, path: str) -> str:
    """``path``, or its legacy place when only that exists: a tree written before ``.receipts/`` and ``.meta/`` is
    read where it lies (``status`` and ``verify`` write nothing; the next build moves it, core/upgrade.py)."""
    legacy = legacy_path(path)
    if legacy != path and not store.exists(path) and store.exists(legacy):
        return legacy
    return path


def output_path(prefix: str, name: str) -> str:
    """Where the file a receipt lists under ``name`` lives. A name that starts with ``.`` and holds no ``/`` is a
    suffix of the prefix (``.bin``: ``.../shard_00000.bin``); any other name is a path relative to the prefix's
    folder (``train/shard_00000.jsonl`` for the JSONL splits, ``.meta/shard_00000.samples.parquet`` for a side file,
    ``manifest.json``)."""
    if name.startswith(".") and "/" not in name:
        return prefix + name
    folder = prefix.rpartition("/")[0]
    return f"{folder}/{name}" if folder else name


def read_receipt(store: Storage, prefix: str) -> Receipt | None:
    """The receipt at ``prefix`` (at its legacy place in a tree not moved yet), or None if there is none or it is
    unreadable (either way: not done)."""
    return _stored_receipt(store, prefix)[0]


def _stored_receipt(store: Storage, prefix: str) -> tuple[Receipt | None, bool]:
    """(the receipt or None, whether a file lies at its place): one read where it is, two where it is not."""
    path = receipt_path(prefix)
    for place in (path, legacy_path(path)):
        try:
            return parse_receipt(store.read_bytes(place)), True
        except FileNotFoundError:
            continue
    return None, False


def parse_receipt(data: bytes) -> Receipt | None:
    """The receipt in ``data``, or None when it is not a readable receipt of this version."""
    try:
        return Receipt.from_bytes(data)
    except (ValueError, UnicodeDecodeError, TypeError):
        return None


def write_receipt(store: Storage, prefix: str, receipt: Receipt) -> Receipt:
    """Record the committed files' stamps and write the receipt: the last act of every build step."""
    stamps = {suffix: store.stamp(output_path(prefix, suffix)) for suffix in receipt.files}
    final = Receipt(receipt.kind, receipt.key, receipt.inputs, receipt.files, receipt.stats, stamps, receipt.extra)
    store.write_bytes(receipt_path(prefix), final.to_bytes())
    return final


def freshness_when_ready(store: Storage, prefix: str, inputs_of: Callable[[], dict], *, read_content: bool = False,
                         not_ready: tuple[type[Exception], ...] = (NotReady,)) -> Freshness:
    """`freshness` of an output whose expected inputs come from upstream outputs (``inputs_of``). When those cannot
    be judged yet (``inputs_of`` raises one of ``not_ready``: an upstream output missing or stale), the output is
    stale if it was ever built, else missing: it cannot be up to date before its inputs are."""
    try:
        inputs = inputs_of()
    except not_ready as exc:
        receipt = read_receipt(store, prefix)
        if receipt is None:
            return Freshness(State.MISSING, "it has no receipt")
        return Freshness(State.STALE, f"its inputs are not up to date: {exc}", receipt)
    return freshness(store, prefix, inputs, read_content=read_content)


def freshness(store: Storage, prefix: str, expected_inputs: dict, *, read_content: bool = False) -> Freshness:
    """Whether the outputs at ``prefix`` are up to date for ``expected_inputs``.

    A file whose stamp moved since the commit is hashed: same bytes (e.g. copied back) still count as done.
    ``read_content`` hashes every file whatever its stamp (``verify`` does; ``materialize`` does not).
    """
    receipt, exists = _stored_receipt(store, prefix)
    if receipt is None:
        return Freshness(State.MISSING, "its receipt is not readable" if exists else "it has no receipt")
    for suffix, recorded in receipt.files.items():
        relative = output_path(prefix, suffix)
        if not store.exists(relative):
            return Freshness(State.MISSING, f"its {suffix} file is missing", receipt)
        if store.size(relative) != recorded["bytes"]:
            return Freshness(State.STALE, f"its {suffix} file changed after it was built (size "
                                          f"{store.size(relative):,}, the receipt says {recorded['bytes']:,})", receipt)
        if read_content or store.stamp(relative) != receipt.committed.get(suffix):
            actual = store.sha256(relative)
            if actual != recorded["sha256"]:
                return Freshness(State.STALE, f"its {suffix} file changed after it was built (sha256 {actual[:12]}…, "
                                              f"the receipt says {recorded['sha256'][:12]}…)", receipt)
    if receipt.inputs != expected_inputs:
        return Freshness(State.STALE, "built with " + describe_changes(receipt.inputs, expected_inputs), receipt)
    return Freshness(State.DONE, "", receipt)


def rebuild_reason(current: Freshness, force: bool) -> str | None:
    """None when the outputs are up to date and not forced (skip them); else why they are built again ("" for
    outputs that were never built, so there is nothing to explain)."""
    if current.done:
        return "forced" if force else None
    return current.reason if current.receipt is not None else ""


def describe_changes(built: dict, now: dict) -> str:
    """``add_eos=true, now false; tokenizer.sha256=3f2a…, now 9b1c…``: the inputs that differ, flattened."""
    old, new = _flatten(built), _flatten(now)
    changes = []
    for name in sorted(old.keys() | new.keys()):
        if old.get(name, _ABSENT) != new.get(name, _ABSENT):
            changes.append(f"{name}={_show(old.get(name, _ABSENT))}, now {_show(new.get(name, _ABSENT))}")
    return "; ".join(changes) if changes else "other inputs"


_ABSENT = object()


def _flatten(value: dict, prefix: str = "") -> dict:
    flat = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict):
            flat.update(_flatten(item, f"{name}."))
        else:
            flat[name] = item
    return flat


def _show(value: object) -> str:
    if value is _ABSENT:
        return "(not set)"
    if isinstance(value, str) and len(value) > 14:  # a hash: its first 12 characters, the quotes kept balanced
        return json.dumps(value[:12])[:-1] + '…"'
    return json.dumps(value)
