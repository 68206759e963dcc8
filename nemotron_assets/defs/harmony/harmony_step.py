"""Materialize one normalized Harmony shard into storage, or recognise that it is already there.

The same shape as a pretraining shard (pretrain/shard_step.py): a shard is up to date when ``records.freshness``
says so, i.e. its receipt names the inputs a build would use now and its Parquet file is as committed. Those
inputs are everything that decides the shard's bytes:

- ``format``: this code's output format version (``FORMAT_VERSION``, bumped when the writer changes);
- ``source``: the manifest's fingerprint of the shard's rows and file versions;
- ``family`` and ``mapper_version``: the family mapper and its version (normalize/families.py, bumped
  whenever a mapper's output changes);
- ``settings``: the entry's ``split`` (some mappers read facts from it), ``messages_field``, ``tools_field``,
  ``text_field``, and the blend's ``on_error``.

Commit order: receipt deleted, ``.parquet`` committed, receipt written. At every instant the storage holds a
finished shard, or a shard without a receipt (not done).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey, harmony_shard_prefix
from nemotron_assets.core.records import Receipt, SourceManifest, freshness, rebuild_reason, receipt_path, write_receipt
from nemotron_assets.core.storage import Storage, locate_os_errors
from nemotron_assets.defs.harmony.harmony_shard import build_harmony_shard
from nemotron_assets.normalize.families import mapper_version
from nemotron_assets.sources.manifest import read_options

RECEIPT_KIND = "harmony_shard"
FORMAT_VERSION = "harmony-parquet/1"


@dataclass(frozen=True)
class HarmonyOutcome:
    key: ShardKey
    status: str  # "built" or "up to date"
    receipt: Receipt
    seconds: float = 0.0
    rebuilt_because: str = ""


def shard_inputs(blend: Blend, entry: DatasetEntry, manifest: SourceManifest, index: int) -> dict:
    """The receipt ``inputs`` of Harmony shard ``index`` of ``manifest`` built now."""
    return {
        "format": FORMAT_VERSION,
        "source": manifest.shard_fingerprint(index),
        "family": entry.family,
        "mapper_version": mapper_version(entry.family),
        "settings": {"split": entry.split, "messages_field": entry.messages_field, "tools_field": entry.tools_field,
                     "text_field": entry.text_field, "on_error": blend.on_error},
    }


def materialize_harmony_shard(storage: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey,
                              force: bool = False, log: Callable[[str], None] = print,
                              base: str | None = None) -> HarmonyOutcome:
    """Normalize shard ``key`` under ``base`` (the blend's folder, or a sample's; default the full build)."""
    started = time.monotonic()
    entry = blend.entry(key.dataset)
    prefix = harmony_shard_prefix(base or blend.name, key)
    inputs = shard_inputs(blend, entry, manifest, key.index)
    current = freshness(storage, prefix, inputs)
    rebuilt_because = rebuild_reason(current, force)
    if rebuilt_because is None:
        return HarmonyOutcome(key, "up to date", current.receipt, time.monotonic() - started)
    if rebuilt_because:
        log(f"{key}: rebuilding: {rebuilt_because}")
    with storage.staging() as folder:
        staged = folder / "shard.parquet"
        with locate_os_errors(folder):
            stats = build_harmony_shard(manifest, key.index, entry.family, entry.split, read_options(blend, entry),
                                        staged, messages_field=entry.messages_field, tools_field=entry.tools_field)
        receipt = Receipt(kind=RECEIPT_KIND, key=str(key), inputs=inputs,
                          files={".parquet": {"bytes": stats.bytes, "sha256": stats.sha256}}, stats=stats.as_dict(),
                          extra={"blend": blend.name, "split": manifest.split})
        storage.delete(receipt_path(prefix))
        storage.commit(staged, f"{prefix}.parquet")
        receipt = write_receipt(storage, prefix, receipt)
    if stats.dropped:
        log(f"{key}: {sum(stats.dropped.values()):,} row(s) not written (unreadable, or skipped by their family): "
            f"{dict(stats.dropped)}; first: {stats.examples[0]}")
    return HarmonyOutcome(key, "built", receipt, time.monotonic() - started, rebuilt_because)
