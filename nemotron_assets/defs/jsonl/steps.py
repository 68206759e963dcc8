"""Materialize the JSONL files of one source shard, and the manifest listing them, or find them up to date.

**A shard.** Its receipt is ``<base>/jsonl/<dataset>/shard_NNNNN.json``; its files lie beside it, one per split that
received rows, ``<split>/shard_NNNNN.jsonl[.zst]`` (the receipt names them by that path, records.py
``output_path``). It is up to date when ``records.freshness`` says so, its receipt ``inputs`` being everything that
decides the files' bytes:

- ``format``: the transforms' and writer's version (formats/transforms.py ``FORMAT_VERSION``);
- ``source``: the manifest's fingerprint of the shard's rows and file versions;
- ``transform`` (``Transform.spec``: the same however the blend spells it) and ``compression``;
- ``holdout`` (fractions and seed) and ``split``: the split every row of a dataset listed under the blend's
  ``valid:``/``test:`` goes to, in which case the holdout does not apply and is recorded as none.

Commit order: receipt deleted; every file an earlier build may have left in a split or compression this build does
not write deleted (after the holdout or ``compression`` changed, yesterday's ``valid/shard_00000.jsonl`` must not
stay beside today's files); the new files committed; receipt written last.

**The manifest** ``<base>/jsonl/manifest.json`` (receipt ``manifest.receipt.json``) lists per split the files of
every JSONL dataset in dataset then shard order, relative to ``root`` (the ``jsonl/`` folder), with counts per
dataset. It refuses planned shards that are not up to date (``NotReady`` naming them). Its inputs are each shard's
inputs hash and files' sha256 (a shard may have no file at all, and its counts are in the manifest), and ``root``.
"""

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import (
    ShardKey,
    jsonl_dir,
    jsonl_manifest_path,
    jsonl_manifest_prefix,
    jsonl_shard_prefix,
)
from nemotron_assets.core.records import (
    Freshness,
    NotReady,
    Receipt,
    SourceManifest,
    State,
    freshness,
    output_path,
    read_receipt,
    rebuild_reason,
    receipt_path,
    require_manifest,
    write_receipt,
)
from nemotron_assets.core.storage import Storage, locate_os_errors
from nemotron_assets.defs.jsonl.build import build_jsonl_shard
from nemotron_assets.formats.splits import SPLITS, Split
from nemotron_assets.formats.transforms import (
    FORMAT_VERSION,
    JsonlShardStats,
    jsonl_manifest,
    jsonl_name,
    parse_transform,
)
from nemotron_assets.sources.manifest import read_options

SHARD_KIND = "jsonl_shard"
MANIFEST_KIND = "jsonl_manifest"
MANIFEST_FORMAT = "jsonl-manifest/1"
SHOWN_NOT_READY = 5  # shards named in a NotReady message


@dataclass(frozen=True)
class JsonlOutcome:
    key: str  # the shard key, or "manifest"
    status: str  # "built" or "up to date"
    receipt: Receipt
    seconds: float = 0.0
    rebuilt_because: str = ""


# --- one shard ------------------------------------------------------------------------------------------------
def fixed_split(blend: Blend, dataset: str) -> Split | None:
    """The split every row of a dataset listed under the blend's ``valid:`` or ``test:`` goes to; None for train
    datasets, whose rows the holdout assigns."""
    split = blend.split_of(dataset)
    return None if split == "train" else split


def shard_inputs(blend: Blend, entry: DatasetEntry, manifest: SourceManifest, index: int) -> dict:
    """The receipt ``inputs`` of JSONL shard ``index`` of ``manifest`` built now."""
    fixed = fixed_split(blend, entry.name)
    holdout = blend.holdout if fixed is None else None
    return {"format": FORMAT_VERSION, "source": manifest.shard_fingerprint(index),
            "transform": parse_transform(entry.transform).spec(), "compression": entry.compression,
            "holdout": holdout.model_dump() if holdout is not None else None, "split": fixed}


def jsonl_freshness(store: Storage, blend: Blend, base: str, manifest: SourceManifest, index: int,
                    read_content: bool = False) -> Freshness:
    """The one up-to-date test (records.py), for one planned JSONL shard."""
    prefix = jsonl_shard_prefix(base, ShardKey(manifest.dataset, index))
    inputs = shard_inputs(blend, blend.entry(manifest.dataset), manifest, index)
    return freshness(store, prefix, inputs, read_content=read_content)


def possible_files(index: int) -> list[str]:
    """Every file a build of shard ``index`` can write, named as its receipt names them."""
    return [f"{split}/{jsonl_name(index, compression)}" for split in SPLITS for compression in (None, "zstd")]


def materialize_jsonl_shard(store: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey,
                            force: bool = False, log: Callable[[str], None] = print,
                            base: str | None = None) -> JsonlOutcome:
    """Build shard ``key`` under ``base`` (the blend's folder, or a sample's; default the full build)."""
    started = time.monotonic()
    entry = blend.entry(key.dataset)
    prefix = jsonl_shard_prefix(base or blend.name, key)
    inputs = shard_inputs(blend, entry, manifest, key.index)
    current = freshness(store, prefix, inputs)
    rebuilt_because = rebuild_reason(current, force)
    if rebuilt_because is None:
        return JsonlOutcome(str(key), "up to date", current.receipt, time.monotonic() - started)
    if rebuilt_because:
        log(f"{key}: rebuilding: {rebuilt_because}")
    with store.staging() as folder:
        with locate_os_errors(folder):
            stats = build_jsonl_shard(manifest, key.index, parse_transform(entry.transform), read_options(blend, entry),
                                      folder, holdout=blend.holdout.holdout() if blend.holdout else None,
                                      fixed_split=fixed_split(blend, entry.name), compression=entry.compression)
        files = {f["path"]: {"bytes": f["bytes"], "sha256": f["sha256"]} for f in stats.files.values()}
        receipt = Receipt(kind=SHARD_KIND, key=str(key), inputs=inputs, files=files, stats=stats.as_dict(),
                          extra={"blend": blend.name, "split": manifest.split})
        store.delete(receipt_path(prefix))
        for name in possible_files(key.index):
            if name not in files:
                store.delete(output_path(prefix, name))
        for name in files:
            store.commit(folder / name, output_path(prefix, name))
        receipt = write_receipt(store, prefix, receipt)
    if stats.dropped:
        log(f"{key}: {sum(stats.dropped.values()):,} of {stats.rows_in:,} row(s) not written: {dict(stats.dropped)}; "
            f"first: {stats.examples[0]}")
    return JsonlOutcome(str(key), "built", receipt, time.monotonic() - started, rebuilt_because)


# --- the manifest -----------------------------------------------------------------------------------------------
def current_shards(store: Storage, blend: Blend, base: str) -> list[tuple[ShardKey, Receipt]]:
    """Every planned JSONL shard with its receipt, in blend then shard order; ``NotReady`` naming the shards that
    are not up to date (or the dataset that has no plan)."""
    done, not_done = [], []
    for entry in blend.datasets_of("jsonl"):
        manifest = require_manifest(store, blend.name, base, entry.name)
        for shard in manifest.shards:
            key = ShardKey(entry.name, shard.index)
            state = jsonl_freshness(store, blend, base, manifest, shard.index)
            if state.done:
                done.append((key, state.receipt))
            else:
                not_done.append(f"{key} ({state.state.value}: {state.reason})")
    if not_done:
        more = f" and {len(not_done) - SHOWN_NOT_READY} more" if len(not_done) > SHOWN_NOT_READY else ""
        raise NotReady(f"{len(not_done)} JSONL shard(s) of {blend.name} are not up to date: "
                       f"{'; '.join(not_done[:SHOWN_NOT_READY])}{more}: materialize {blend.name}/jsonl_shard first")
    return done


def manifest_inputs(store: Storage, base: str, shards: list[tuple[ShardKey, Receipt]]) -> dict:
    return {"format": MANIFEST_FORMAT, "root": store.url(jsonl_dir(base)),
            "shards": {str(key): {"inputs": receipt.inputs_sha256,
                                  "files": {name: recorded["sha256"] for name, recorded in receipt.files.items()}}
                       for key, receipt in shards}}


def materialize_jsonl_manifest(store: Storage, blend: Blend, base: str, force: bool = False
                               ) -> tuple[JsonlOutcome, dict]:
    """``<base>/jsonl/manifest.json`` of the shards under ``base``, or find it up to date; (outcome, manifest)."""
    shards = current_shards(store, blend, base)
    inputs = manifest_inputs(store, base, shards)
    prefix, relative = jsonl_manifest_prefix(base), jsonl_manifest_path(base)
    current = freshness(store, prefix, inputs)
    rebuilt_because = rebuild_reason(current, force)
    if rebuilt_because is None:
        return JsonlOutcome("manifest", "up to date", current.receipt), json.loads(store.read_bytes(relative))
    listing = jsonl_manifest([JsonlShardStats.from_dict(receipt.stats) for _, receipt in shards])
    manifest = {"format": listing.pop("format"), "blend": blend.name, "root": inputs["root"], **listing}
    data = json.dumps(manifest, indent=1).encode() + b"\n"
    store.delete(receipt_path(prefix))
    store.write_bytes(relative, data)
    stats = {"rows": manifest["rows"], "files": {split: len(manifest[split]) for split in SPLITS}}
    receipt = write_receipt(store, prefix, Receipt(
        kind=MANIFEST_KIND, key="manifest", inputs=inputs, stats=stats,
        files={"manifest.json": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}))
    return JsonlOutcome("manifest", "built", receipt, rebuilt_because=rebuilt_because), manifest


def manifest_freshness(store: Storage, blend: Blend, base: str, read_content: bool = False) -> Freshness:
    """The manifest's state by the one definition; while its shards are not all up to date it cannot be judged:
    stale if it was built, else missing (as posttrain/downstream.py ``downstream_states``)."""
    prefix = jsonl_manifest_prefix(base)
    try:
        inputs = manifest_inputs(store, base, current_shards(store, blend, base))
    except NotReady as exc:
        receipt = read_receipt(store, prefix)
        return (Freshness(State.STALE, f"its inputs are not up to date: {exc}", receipt) if receipt
                else Freshness(State.MISSING, "it has no receipt"))
    return freshness(store, prefix, inputs, read_content=read_content)
